package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestApplyChanges: a commit's changes apply in order to the head's tree;
// deleting what is not there (at that point) is ErrEntryNotFound.
func TestApplyChanges(t *testing.T) {
	e := func(p, sha string) TreeEntry { return TreeEntry{Path: p, SHA256: sha} }
	put := func(p, sha string) Change { return Change{Op: PutFile, Path: p, Entry: TreeEntry{SHA256: sha}} }
	del := func(p string) Change { return Change{Op: DeleteFile, Path: p} }
	delDir := func(p string) Change { return Change{Op: DeleteFolder, Path: p} }
	head := []TreeEntry{e("a.txt", "1"), e("d/x", "2"), e("d/y/z", "3"), e("dd", "4")}
	for _, c := range []struct {
		name    string
		changes []Change
		want    []TreeEntry // nil: ErrEntryNotFound
	}{
		{"nothing", nil, head},
		{"add", []Change{put("b.txt", "5")}, []TreeEntry{e("a.txt", "1"), e("b.txt", "5"), e("d/x", "2"), e("d/y/z", "3"), e("dd", "4")}},
		{"replace", []Change{put("a.txt", "9")}, []TreeEntry{e("a.txt", "9"), e("d/x", "2"), e("d/y/z", "3"), e("dd", "4")}},
		{"delete file", []Change{del("a.txt")}, []TreeEntry{e("d/x", "2"), e("d/y/z", "3"), e("dd", "4")}},
		{"delete folder keeps a sibling with its prefix", []Change{delDir("d")}, []TreeEntry{e("a.txt", "1"), e("dd", "4")}},
		{"delete nested folder", []Change{delDir("d/y")}, []TreeEntry{e("a.txt", "1"), e("d/x", "2"), e("dd", "4")}},
		{"add then delete", []Change{put("n", "6"), del("n")}, head},
		{"delete then add", []Change{del("a.txt"), put("a.txt", "7")}, []TreeEntry{e("a.txt", "7"), e("d/x", "2"), e("d/y/z", "3"), e("dd", "4")}},
		{"missing file", []Change{del("nope")}, nil},
		{"a file's deletion naming a folder deletes the folder, as the Hub's", []Change{del("d")}, []TreeEntry{e("a.txt", "1"), e("dd", "4")}},
		{"a file is not a folder", []Change{delDir("a.txt")}, nil},
		{"missing folder", []Change{delDir("e")}, nil},
		{"deleted twice", []Change{del("a.txt"), del("a.txt")}, nil},
		{"a valid change before a missing one", []Change{put("b", "8"), delDir("nope")}, nil},
	} {
		got, err := applyChanges(head, c.changes)
		if c.want == nil {
			if !errors.Is(err, ErrEntryNotFound) || !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want ErrEntryNotFound", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s:\n%s", c.name, diff)
		}
	}
	// A file and a folder of one name cannot both be: ErrPathClash.
	for name, changes := range map[string][]Change{
		"a file under a file":             {put("a.txt/x", "5")},
		"a file named as a folder":        {put("d", "5")},
		"a file named as a nested folder": {put("d/y", "5")},
		"a folder under a new file":       {put("n", "5"), put("n/m/o", "6")},
	} {
		if _, err := applyChanges(head, changes); !errors.Is(err, ErrPathClash) {
			t.Errorf("%s: %v, want ErrPathClash", name, err)
		}
	}
	if got, err := applyChanges(head, []Change{del("a.txt"), put("a.txt/x", "5")}); err != nil || len(got) != 4 {
		t.Errorf("a file replaced by a folder of its name: %v %v", got, err)
	}
	if head[0].Path != "a.txt" || len(head) != 4 {
		t.Fatalf("applyChanges changed its input: %v", head)
	}
}

// indexState is what a refused commit must leave as it was: every object
// of the bucket, every table's row count, every tenant's usage.
type indexState struct {
	Objects []string
	Rows    map[string]int64
	Usage   map[string]int64
}

func stateOf(tb testing.TB, s *Store) indexState {
	tb.Helper()
	ctx := context.Background()
	var st indexState
	it := s.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		st.Objects = append(st.Objects, obj.Key)
	}
	var err error
	if st.Rows, err = s.Counts(ctx); err != nil {
		tb.Fatal(err)
	}
	ts, err := s.Tenants(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	st.Usage = map[string]int64{}
	for _, tn := range ts {
		st.Usage[tn.Name] = tn.UsageBytes
	}
	return st
}

// regular is a PutFile of a regular file with content.
func regular(path, content string) Change {
	sum := sha256.Sum256([]byte(content))
	return Change{Op: PutFile, Path: path, Content: []byte(content),
		Entry: TreeEntry{SizeBytes: int64(len(content)), SHA256: hex.EncodeToString(sum[:]), GitOID: fakeOID("g-" + path)}}
}

// TestRefusedCommitWritesNothing: a commit refused for its branch, its
// parent or a deletion of what is not there writes no blob, no commit
// record, no row and no usage, even when an earlier change of the same
// commit adds a file.
func TestRefusedCommitWritesNothing(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		r := l.repo("alice", "m")
		first, err := l.s.Commit(ctx, r, "main", NewCommit{Summary: "one", Changes: []Change{regular("a.txt", "a"), regular("d/b.txt", "b")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.s.CreateTag(ctx, r, "v1", first); err != nil {
			t.Fatal(err)
		}
		before := stateOf(t, l.s)
		fresh := regular("new.txt", "bytes no commit stored")
		for _, c := range []struct {
			name   string
			branch string
			nc     NewCommit
			want   error
			text   string
		}{
			{"a tag", "v1", NewCommit{Changes: []Change{fresh}}, ErrNotBranch, "tags cannot be committed to"},
			{"a tag's ref", "refs/tags/v1", NewCommit{Changes: []Change{fresh}}, ErrNotBranch, "tags cannot be committed to"},
			{"a pull request", "refs/pr/1", NewCommit{Changes: []Change{fresh}}, ErrNotBranch, "commits go to branches"},
			{"a bad name", "a..b", NewCommit{Changes: []Change{fresh}}, ErrBadRefName, `".." is not allowed`},
			{"a commit id", first.SHA, NewCommit{Changes: []Change{fresh}}, ErrBadRefName, "commit id"},
			{"no such branch", "dev", NewCommit{Changes: []Change{fresh}}, ErrNoBranch, "dev of alice/m"},
			{"a stale parent", "main", NewCommit{Parent: strings.Repeat("0", 40), Changes: []Change{fresh}}, ErrRefMoved, "is not the head of main"},
			{"a missing file", "main", NewCommit{Changes: []Change{fresh, {Op: DeleteFile, Path: "nope.txt"}}}, ErrEntryNotFound, "no file nope.txt"},
			{"a missing folder", "main", NewCommit{Changes: []Change{fresh, {Op: DeleteFolder, Path: "nope"}}}, ErrEntryNotFound, "no folder nope"},
			{"no path", "main", NewCommit{Changes: []Change{fresh, {Op: DeleteFile}}}, nil, "no operation or path"},
		} {
			_, err := l.s.Commit(ctx, r, c.branch, c.nc)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.text)
			}
		}
		if diff := cmp.Diff(before, stateOf(t, l.s)); diff != "" {
			t.Fatalf("refused commits changed the state:\n%s", diff)
		}
		// The same changes without the refused one go through.
		c, err := l.s.Commit(ctx, r, "main", NewCommit{Parent: first.SHA, Changes: []Change{fresh, {Op: DeleteFolder, Path: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(c.Tree); !cmp.Equal(got, []string{"a.txt", "new.txt"}) {
			t.Fatalf("tree %v", got)
		}
		if ok, _ := l.s.Bucket().Exists(ctx, "blobs/"+fresh.Entry.SHA256); !ok {
			t.Fatal("the committed file has no blob")
		}
	})
}

func paths(tree []TreeEntry) []string {
	var out []string
	for _, e := range tree {
		out = append(out, e.Path)
	}
	return out
}

// TestCommitAppliesToTheHeadItMeets: a commit whose branch moves after its
// check applies its changes to the new head in its transaction (no change
// is lost, none is applied twice); with a parent named, it is refused
// instead, and the deletion the new head no longer allows is refused too.
func TestCommitAppliesToTheHeadItMeets(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		r := l.repo("alice", "m")
		if _, err := l.s.Commit(ctx, r, "main", NewCommit{Changes: []Change{regular("a", "a"), regular("b", "b")}}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name      string
			nc        NewCommit
			other     NewCommit // committed while nc waits after its check
			wantTree  []string
			wantError error
		}{
			{"rebased", NewCommit{Changes: []Change{regular("c", "c")}}, NewCommit{Changes: []Change{regular("d", "d")}}, []string{"a", "b", "c", "d"}, nil},
			{"parent named", NewCommit{Changes: []Change{regular("e", "e")}}, NewCommit{Changes: []Change{regular("f", "f")}}, nil, ErrRefMoved},
			{"deleted meanwhile", NewCommit{Changes: []Change{{Op: DeleteFile, Path: "a"}}}, NewCommit{Changes: []Change{{Op: DeleteFile, Path: "a"}}}, nil, ErrEntryNotFound},
		} {
			head, err := l.s.Resolve(ctx, r, "main")
			if err != nil {
				t.Fatal(err)
			}
			if c.wantError == ErrRefMoved {
				c.nc.Parent = head.SHA
			}
			reached, resume := pauseFirstAt(l.s, "commit checked")
			done := make(chan error, 1)
			go func() {
				_, err := l.s.Commit(ctx, r, "main", c.nc)
				done <- err
			}()
			<-reached
			if _, err := l.s.Commit(ctx, r, "main", c.other); err != nil {
				t.Fatalf("%s: the other commit: %v", c.name, err)
			}
			resume()
			err = <-done
			l.s.hook = nil
			if c.wantError != nil {
				if !errors.Is(err, c.wantError) {
					t.Errorf("%s: %v, want %v", c.name, err, c.wantError)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got, err := l.s.Resolve(ctx, r, "main")
			if err != nil {
				t.Fatal(err)
			}
			if !cmp.Equal(paths(got.Tree), c.wantTree) {
				t.Errorf("%s: tree %v, want %v", c.name, paths(got.Tree), c.wantTree)
			}
		}
	})
}

// pauseFirstAt makes the first write of s that reaches step wait there
// (reached is closed when it gets there) until resume is called; later
// writes pass.
func pauseFirstAt(s *Store, step string) (reached <-chan struct{}, resume func()) {
	r, c := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.hook = func(got string) error {
		if got == step && first.CompareAndSwap(false, true) {
			close(r)
			<-c
		}
		return nil
	}
	return r, func() { close(c) }
}
