package store

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/gitobj"
)

// TestHistory: History pages a branch's history newest first with its
// length, a squash shortens it to one commit, and an unknown commit or
// another repo's commit is ErrNotFound.
func TestHistory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	other := RepoID{Tenant: "alice", Type: "model", Name: "other"}
	for _, r := range []RepoID{id, other} {
		if _, err := s.CreateRepo(ctx, r, false); err != nil {
			t.Fatal(err)
		}
	}
	head, err := s.Resolve(ctx, id, "main")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{head.SHA} // oldest first while building
	var tree []TreeEntry
	for i := range 4 {
		data := []byte(fmt.Sprintf("file %d", i))
		sha := fmt.Sprintf("%064x", i+1)
		if err := s.PutBlob(ctx, sha, data); err != nil {
			t.Fatal(err)
		}
		tree = append(tree, TreeEntry{Path: fmt.Sprintf("f%d", i), SizeBytes: int64(len(data)), SHA256: sha, GitOID: fmt.Sprintf("%040x", i+1)})
		c, err := commitTree(ctx, s, id, "main", head.SHA, fmt.Sprintf("commit %d", i), "body", append([]TreeEntry(nil), tree...))
		if err != nil {
			t.Fatal(err)
		}
		head = c
		want = append([]string{c.SHA}, want...)
	}
	shas := func(cs []Commit) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.SHA)
		}
		return out
	}
	for _, c := range []struct {
		skip, limit int
		want        []string
	}{
		{0, 100, want},
		{0, 2, want[:2]},
		{2, 2, want[2:4]},
		{4, 2, want[4:]},
		{5, 2, []string{}},
	} {
		got, total, err := s.History(ctx, id, head.SHA, c.skip, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if total != len(want) || !cmp.Equal(shas(got), c.want) {
			t.Errorf("History(skip %d, limit %d): %v of %d; want %v of %d", c.skip, c.limit, shas(got), total, c.want, len(want))
		}
	}
	got, _, _ := s.History(ctx, id, head.SHA, 0, 1)
	if got[0].Summary != "commit 3" || got[0].Description != "body" || !got[0].Created.Equal(head.Created) || got[0].Tree != nil {
		t.Errorf("History's newest commit: %+v; want commit 3, body, created %v, no tree", got[0], head.Created)
	}
	// The other repo's first commit is this one's (same tree, author and
	// second: git gives both one id); its second is its own.
	otherFirst, _ := s.Resolve(ctx, other, "main")
	if err := s.PutBlob(ctx, fmt.Sprintf("%064x", 99), []byte("other")); err != nil {
		t.Fatal(err)
	}
	otherHead, err := commitTree(ctx, s, other, "main", otherFirst.SHA, "other's", "", []TreeEntry{{Path: "o", SizeBytes: 5, SHA256: fmt.Sprintf("%064x", 99), GitOID: fakeOID("other")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, sha := range map[string]string{"unknown": fmt.Sprintf("%040x", 9), "another repo's": otherHead.SHA} {
		if _, _, err := s.History(ctx, id, sha, 0, 10); !errors.Is(err, ErrNotFound) {
			t.Errorf("History of an %s commit: %v; want ErrNotFound", name, err)
		}
		if _, err := s.LastChanges(ctx, id, sha, []string{"f0"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("LastChanges at an %s commit: %v; want ErrNotFound", name, err)
		}
	}

	sq, err := s.SquashHistory(ctx, id, "main", "squashed")
	if err != nil {
		t.Fatal(err)
	}
	got, total, err := s.History(ctx, id, sq.SHA, 0, 10)
	if err != nil || total != 1 || len(got) != 1 || got[0].Summary != "squashed" {
		t.Errorf("History after a squash: %v of %d (%v); want the one squashed commit", shas(got), total, err)
	}
}

// TestLastChanges: the newest commit that changed each file or folder,
// through additions, changes, deletions around it and commits that leave
// it alone; the oldest commit for a path unchanged since; nothing for a
// path the tree does not hold. A tree stored in another text (an older
// format: other member order, spaces) with the same entries is no change.
func TestLastChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := s.CreateRepo(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	head, _ := s.Resolve(ctx, id, "main")
	files := map[string]TreeEntry{}
	n := 0
	put := func(p string) {
		n++
		data := []byte(fmt.Sprintf("%s %d", p, n))
		sha := fmt.Sprintf("%064x", n)
		if err := s.PutBlob(ctx, sha, data); err != nil {
			t.Fatal(err)
		}
		files[p] = TreeEntry{Path: p, SizeBytes: int64(len(data)), SHA256: sha, GitOID: fmt.Sprintf("%040x", n)}
	}
	commit := func(summary string) string {
		var tree []TreeEntry
		for _, e := range files {
			tree = append(tree, e)
		}
		c, err := commitTree(ctx, s, id, "main", head.SHA, summary, "", tree)
		if err != nil {
			t.Fatal(err)
		}
		head = c
		return c.SHA
	}
	put("a.txt")
	put("d/x.txt")
	put("d/y.txt")
	put("d2/z.txt") // "d2" sorts after "d/…": not under folder d
	put(`q"uote<&>.txt`)
	c1 := commit("c1")
	put("d/x.txt")
	c2 := commit("c2")
	put("d2/z.txt")
	put("b.txt")
	c3 := commit("c3")
	delete(files, "d/y.txt")
	c4 := commit("c4")
	c5 := commit("c5") // changes nothing

	// c4's tree again in another text, as a commit c6 on top.
	c6 := commitRetexted(t, ctx, s, id, c5, head.Created.Add(time.Second))

	for _, c := range []struct {
		at   string
		want map[string]string
	}{
		{c6, map[string]string{"a.txt": c1, "d": c4, "d/x.txt": c2, "d2": c3, "d2/z.txt": c3, "b.txt": c3, `q"uote<&>.txt`: c1}},
		{c5, map[string]string{"a.txt": c1, "d": c4, "d/x.txt": c2, "d2": c3, "b.txt": c3}},
		{c3, map[string]string{"d": c2, "d/y.txt": c1, "b.txt": c3}},
		{c1, map[string]string{"a.txt": c1, "d": c1}},
	} {
		checkLastChanges(t, ctx, s, id, c.at, c.want)
	}
	// After a squash the one commit left is every path's.
	sq, err := s.SquashHistory(ctx, id, "main", "squashed")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.LastChanges(ctx, id, sq.SHA, []string{"a.txt", "d"})
	if err != nil || got["a.txt"].SHA != sq.SHA || got["d"].SHA != sq.SHA {
		t.Errorf("LastChanges after a squash: %v (%v); want the squashed commit for both", got, err)
	}
}

// commitRetexted writes into the index a commit "c6" on parent, created at
// created, of parent's tree stored in another text (other member order,
// spaces), and returns its SHA.
func commitRetexted(t *testing.T, ctx context.Context, s *Store, id RepoID, parent string, created time.Time) string {
	t.Helper()
	var tree []byte
	if err := s.queryRow(ctx, `SELECT tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, parent).Scan(&tree); err != nil {
		t.Fatal(err)
	}
	var entries []TreeEntry
	json.Unmarshal(tree, &entries)
	var other []string
	for _, e := range entries {
		other = append(other, fmt.Sprintf(`{"git_oid": %q, "sha256": %q, "size": %d, "path": %q}`, e.GitOID, e.SHA256, e.SizeBytes, e.Path))
	}
	c := Commit{Parent: parent, Summary: "c6", Created: created, Tree: entries}
	c.SHA = fmt.Sprintf("%x", sha1.Sum([]byte("c6 "+parent)))
	if err := s.exec(ctx, `INSERT INTO commits(tenant, type, name, sha, parent, summary, description, created, tree) VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)`,
		id.Tenant, id.Type, id.Name, c.SHA, parent, "c6", c.Created.UnixNano(), []byte("[ "+strings.Join(other, ", ")+" ]")); err != nil {
		t.Fatal(err)
	}
	return c.SHA
}

// checkLastChanges checks LastChanges at commit at, for the paths of want
// and two it must leave out, against want (path to commit SHA).
func checkLastChanges(t *testing.T, ctx context.Context, s *Store, id RepoID, at string, want map[string]string) {
	t.Helper()
	paths := []string{"nope", "d/y"}
	for p := range want {
		paths = append(paths, p)
	}
	got, err := s.LastChanges(ctx, id, at, paths)
	if err != nil {
		t.Fatal(err)
	}
	shas := map[string]string{}
	for p, cm := range got {
		shas[p] = cm.SHA
		if cm.Tree != nil || cm.Summary == "" {
			t.Errorf("at %s, %s: %+v; want a commit with its summary, without a tree", at, p, cm)
		}
	}
	if !cmp.Equal(shas, want) {
		t.Errorf("LastChanges at %s: %v\nwant %v", at, shas, want)
	}
}

// commitTree commits tree as the whole new tree of branch (whose head
// must be parent): a PutFile for each of its entries, a DeleteFile for each
// file of the head it lacks.
func commitTree(ctx context.Context, s *Store, id RepoID, branch, parent, summary, description string, tree []TreeEntry) (Commit, error) {
	head, err := s.Resolve(ctx, id, branch)
	if err != nil {
		return Commit{}, err
	}
	var changes []Change
	keep := map[string]bool{}
	for _, e := range tree {
		keep[e.Path] = true
		changes = append(changes, Change{Op: PutFile, Path: e.Path, Entry: e})
	}
	for _, e := range head.Tree {
		if !keep[e.Path] {
			changes = append(changes, Change{Op: DeleteFile, Path: e.Path})
		}
	}
	return s.Commit(ctx, id, branch, NewCommit{Parent: parent, Summary: summary, Description: description, Changes: changes})
}

// historyConformance is History's part of the conformance suite (on every
// engine): a page of a history is in order, newest first, each commit
// with its author.
func historyConformance(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	r := RepoID{Tenant: "carol", Type: "model", Name: "history"}
	if _, err := s.CreateRepo(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	var shas []string
	for i, who := range []string{"ann", "bo", "cy"} {
		body := []byte(who)
		sum := sha256.Sum256(body)
		if err := s.PutBlob(ctx, hex.EncodeToString(sum[:]), body); err != nil {
			t.Fatal(err)
		}
		cm, err := s.Commit(ctx, r, "main", NewCommit{Summary: fmt.Sprint(i), Author: Person{Name: who, Email: who + "@example.com"},
			Changes: []Change{{Op: PutFile, Path: "f.txt", Entry: TreeEntry{SizeBytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), GitOID: gitobj.BlobID(body)}}}})
		if err != nil {
			t.Fatal(err)
		}
		shas = append(shas, cm.SHA)
	}
	page, total, err := s.History(ctx, r, shas[2], 1, 2)
	if err != nil || total != 4 || len(page) != 2 {
		t.Fatalf("history: %d of %d, %v", len(page), total, err)
	}
	if page[0].SHA != shas[1] || page[0].Author.Name != "bo" || page[1].SHA != shas[0] || page[1].Author.Name != "ann" {
		t.Errorf("page: %s by %s, %s by %s; want %s by bo, %s by ann", page[0].SHA, page[0].Author.Name, page[1].SHA, page[1].Author.Name, shas[1], shas[0])
	}
}
