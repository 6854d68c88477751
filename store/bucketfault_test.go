package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCommitBucketFailsAppliesNothing makes the bucket refuse a commit's ref
// record (its refs folder replaced by a file, which refuses every write,
// also root's): the commit fails, the index still serves the head it had,
// and once the bucket takes writes again the index and the bucket agree
// and the next commit lands. The bucket is never behind what the index
// serves (docs/design.md §3).
func TestCommitBucketFailsAppliesNothing(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
		if _, err := l.s.CreateRepo(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		put := func(name string) NewCommit {
			return NewCommit{Summary: name, Changes: []Change{regular(name, name)}}
		}
		first, err := l.s.Commit(ctx, id, "main", put("a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		refs := filepath.Join(l.dir, "bucket", filepath.FromSlash(id.prefix()), "refs")
		if err := os.Rename(refs, refs+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(refs, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := l.s.Commit(ctx, id, "main", put("b.txt")); err == nil {
			t.Fatal("a commit whose ref record the bucket refused succeeded")
		}
		if head, err := l.s.Resolve(ctx, id, "main"); err != nil || head.SHA != first.SHA {
			t.Fatalf("head after the refused commit: %s %v, want %s (nothing applied)", head.SHA, err, first.SHA)
		}
		if err := errors.Join(os.Remove(refs), os.Rename(refs+".away", refs)); err != nil {
			t.Fatal(err)
		}
		if diffs, err := CheckIndex(ctx, l.cfg()); err != nil || len(diffs) != 0 {
			t.Fatalf("reindex --check after the refused commit: %v %v", diffs, err)
		}
		if _, err := l.s.Commit(ctx, id, "main", put("b.txt")); err != nil {
			t.Fatalf("commit once the bucket takes writes: %v", err)
		}
		if diffs, err := CheckIndex(ctx, l.cfg()); err != nil || len(diffs) != 0 {
			t.Fatalf("reindex --check: %v %v", diffs, err)
		}
	})
}
