package store

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/gitobj"
)

// format1 unpacks testdata/format1.tar.gz into a new directory: a data
// directory (index.db and bucket/) that the store of main at 6563e5b made,
// before commit ids were git's, and ids.json, the ids it gave its commits.
// Repo alice/m: "initial" (main's first), c1 (config.json, with a
// description), c2 (sub/dir/notes.txt; main and tag v1) and c3 (dev.txt, on
// branch dev made at c1); repo mirror/up: a mirrored commit, "mirrored".
func format1(t *testing.T) (dir string, ids map[string]string) {
	t.Helper()
	f, err := os.Open("testdata/format1.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ids); err != nil {
		t.Fatal(err)
	}
	return dir, ids
}

// openFormat1 opens the format 1 fixture: on SQLite its own index, which
// Open upgrades; on PostgreSQL an index reindex builds from its bucket,
// which the rebuild upgrades.
func openFormat1(t *testing.T) (*Store, string, map[string]string) {
	t.Helper()
	dir, ids := format1(t)
	if idx := testIndex(t, dir); IsPostgres(idx) {
		if err := Reindex(context.Background(), ReindexConfig{IndexPath: idx, BucketURL: fileBucket(dir)}); err != nil {
			t.Fatal(err)
		}
	} else if idx != filepath.Join(dir, "index.db") {
		t.Fatalf("test index %s is not the fixture's", idx)
	}
	return mustOpen(t, dir, fileBucket(dir)), dir, ids
}

// TestFormatOneCommitsGetGitIDs: the commits a store made before commit ids
// were git's get them (each a real git commit object whose tree is its
// files', its parent the upgraded parent, its author the tenant), refs
// follow, every old id (and its abbreviation) still resolves to the
// commit, as an expected parent too; a mirrored commit keeps the
// upstream's id; reindex agrees with the upgraded index; a drop deletes
// the record named by the old id.
func TestFormatOneCommitsGetGitIDs(t *testing.T) {
	ctx := context.Background()
	s, dir, ids := openFormat1(t)
	id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	now := map[string]Commit{}
	for _, name := range []string{"initial", "c1", "c2", "c3"} {
		old := ids[name]
		c, err := s.Resolve(ctx, id, old)
		if err != nil {
			t.Fatalf("%s (%s) after the upgrade: %v", name, old, err)
		}
		if c.SHA == old || c.Object == nil || gitobj.CommitID(c.Object) != c.SHA {
			t.Fatalf("%s: id %s (was %s), object %q", name, c.SHA, old, c.Object)
		}
		if short, err := s.Resolve(ctx, id, old[:10]); err != nil || short.SHA != c.SHA {
			t.Errorf("abbreviated old id of %s: %s, %v; want %s", name, short.SHA, err, c.SHA)
		}
		gc, err := gitobj.DecodeCommit(c.Object)
		if err != nil {
			t.Fatal(err)
		}
		trees, err := gitTree(c.Tree)
		if err != nil {
			t.Fatal(err)
		}
		wantMsg := gitobj.Message(c.Summary, c.Description)
		if gc.Tree != trees.Root || gc.Message != wantMsg || gc.Author.Name != "alice" || gc.Author.Email != "alice@openxet.invalid" ||
			!gc.Author.When.Equal(c.Created.Truncate(time.Second)) || gc.Committer != gc.Author || c.Author != TenantAuthor("alice") {
			t.Errorf("%s's git commit: %+v; want tree %s, message %q, author alice at %v", name, gc, trees.Root, wantMsg, c.Created)
		}
		now[name] = c
	}
	for child, parent := range map[string]string{"c1": "initial", "c2": "c1", "c3": "c1"} {
		if now[child].Parent != now[parent].SHA {
			t.Errorf("parent of %s: %s, want %s's new id %s", child, now[child].Parent, parent, now[parent].SHA)
		}
	}
	if now["c1"].Description != "with a description" || !strings.Contains(string(now["c1"].Object), "\n\nadd config\n\nwith a description\n") {
		t.Errorf("c1's message: %q", now["c1"].Object)
	}
	for ref, name := range map[string]string{"main": "c2", "dev": "c3", "v1": "c2"} {
		if c, err := s.Resolve(ctx, id, ref); err != nil || c.SHA != now[name].SHA {
			t.Errorf("ref %s: %s, %v; want %s (%s)", ref, c.SHA, err, name, now[name].SHA)
		}
	}
	mirrored, err := s.Resolve(ctx, RepoID{Tenant: "mirror", Type: "model", Name: "up"}, "main")
	if err != nil || mirrored.SHA != ids["mirrored"] || mirrored.Object != nil {
		t.Errorf("mirrored commit: %s (%v), object %q; want the upstream's id %s as it was", mirrored.SHA, err, mirrored.Object, ids["mirrored"])
	}

	// Reindex from the bucket, whose records are still of format 1, makes
	// the same index; opening again upgrades nothing more.
	checkReindexAgrees(t, s, dir)
	before := dump(t, s)
	s.Close()
	s = mustOpen(t, dir, fileBucket(dir))
	if diff := cmp.Diff(before, dump(t, s)); diff != "" {
		t.Fatalf("a second open changed the index:\n%s", diff)
	}

	// A commit naming main's head by its old id as the parent it expects.
	if err := s.PutBlob(ctx, strings.Repeat("ab", 32), []byte("new")); err != nil {
		t.Fatal(err)
	}
	next, err := s.Commit(ctx, id, "main", NewCommit{Parent: ids["c2"], Summary: "next", Changes: []Change{{Op: PutFile, Path: "new.txt",
		Entry: TreeEntry{SizeBytes: 3, SHA256: strings.Repeat("ab", 32)}, Content: []byte("new")}}})
	if err != nil {
		t.Fatalf("commit on main's old id: %v", err)
	}
	if next.Parent != now["c2"].SHA || gitobj.CommitID(next.Object) != next.SHA {
		t.Errorf("new commit: parent %s, want %s", next.Parent, now["c2"].SHA)
	}
	if _, err := s.Commit(ctx, id, "main", NewCommit{Parent: ids["c2"], Summary: "stale"}); !errors.Is(err, ErrRefMoved) {
		t.Errorf("commit on the old id of a head that moved: %v, want ErrRefMoved", err)
	}
	checkReindexAgrees(t, s, dir)

	// Deleting dev drops c3: its record, named by its old id, goes.
	if err := s.DeleteRef(ctx, id, "dev"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bucket", id.prefix(), "commits", ids["c3"]+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("c3's format 1 record after dev was deleted: %v", err)
	}
	if _, err := s.Resolve(ctx, id, ids["c3"]); !errors.Is(err, ErrNotFound) {
		t.Errorf("c3's old id after dev was deleted: %v, want ErrNotFound", err)
	}
	checkReindexAgrees(t, s, dir)
}

// checkReindexAgrees fails t unless an index rebuilt from the bucket is
// the live one.
func checkReindexAgrees(t *testing.T, s *Store, dir string) {
	t.Helper()
	diffs, err := CheckIndex(context.Background(), ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Fatalf("reindex --check: %v", diffs)
	}
}
