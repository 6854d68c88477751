package store

import (
	"context"
	"errors"
	"testing"
)

// TestRepoNamesFoldCase: one repo per name whatever its letter case, on
// both engines; FoldRepoID finds it through any case; a repo may be
// renamed to its own name in another case.
func TestRepoNamesFoldCase(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		id := RepoID{Tenant: "alice", Type: "model", Name: "MyModel"}
		if _, err := l.s.CreateRepo(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"mymodel", "MYMODEL", "MyModel"} {
			if _, err := l.s.CreateRepo(ctx, RepoID{Tenant: "alice", Type: "model", Name: name}, true); !errors.Is(err, ErrRepoExists) {
				t.Errorf("create %s beside MyModel: %v, want ErrRepoExists", name, err)
			}
		}
		if _, err := l.s.CreateRepo(ctx, RepoID{Tenant: "alice", Type: "dataset", Name: "mymodel"}, true); err != nil {
			t.Errorf("a dataset of the name in another case: %v", err)
		}
		if got, err := l.s.FoldRepoID(ctx, RepoID{Tenant: "Alice", Type: "model", Name: "MYMODEL"}); err != nil || got != id {
			t.Errorf("FoldRepoID: %v %v, want %v", got, err, id)
		}
		if _, err := l.s.FoldRepoID(ctx, RepoID{Tenant: "alice", Type: "model", Name: "other"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("FoldRepoID of no repo: %v", err)
		}
		moved := RepoID{Tenant: "alice", Type: "model", Name: "MYMODEL"}
		if _, err := l.s.MoveRepo(ctx, id, moved); err != nil {
			t.Fatalf("rename to another case of its own name: %v", err)
		}
		if got, err := l.s.FoldRepoID(ctx, id); err != nil || got != moved {
			t.Errorf("after the rename: %v %v", got, err)
		}
		if diffs, err := CheckIndex(ctx, l.cfg()); err != nil || len(diffs) != 0 {
			t.Errorf("reindex --check: %v %v", diffs, err)
		}
	})
}
