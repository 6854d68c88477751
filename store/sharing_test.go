package store

import (
	"context"
	"errors"
	"testing"
)

// TestSharedFileIsOnlyWhatASharedRepoReferences: SharedFile finds the
// owner's file only through a repo that is internal or public and one of
// whose commits names the file as a Xet file; not a file of the owner no
// revision names, not a file named only by a regular file's SHA-256, not
// once the repo is private again, not after the file left every
// revision. SharedRepos lists the shared repos of the other tenants.
func TestSharedFileIsOnlyWhatASharedRepoReferences(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	named := putFile(t, s, "alice", Unlimited, chunksOf(1, 3, 4000))
	other := putFile(t, s, "alice", Unlimited, chunksOf(2, 3, 4000))
	r := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := s.CreateRepoWith(ctx, r, "public"); err != nil {
		t.Fatal(err)
	}
	entry := TreeEntry{XetHash: named.Hash.String(), SHA256: named.SHA256.String(), SizeBytes: 12000, GitOID: fakeOID("x")}
	first, err := s.Commit(ctx, r, "main", NewCommit{Summary: "w", Changes: []Change{{Op: PutFile, Path: "w.bin", Entry: entry}}})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := s.SharedFile(ctx, r, named.Hash); err != nil || f.Hash != named.Hash {
		t.Fatalf("the repo's file: %v %v", f.Hash, err)
	}
	if _, err := s.SharedFile(ctx, r, other.Hash); !errors.Is(err, ErrNotFound) {
		t.Errorf("a file of alice no revision names: %v, want ErrNotFound", err)
	}
	if _, err := s.SharedFile(ctx, RepoID{Tenant: "alice", Type: "dataset", Name: "m"}, named.Hash); !errors.Is(err, ErrNotFound) {
		t.Errorf("another repo type: %v, want ErrNotFound", err)
	}
	for _, vis := range []string{"private", "protected"} {
		if _, err := s.SetRepoSettings(ctx, r, RepoSettings{Visibility: &vis}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SharedFile(ctx, r, named.Hash); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s repo: %v, want ErrNotFound", vis, err)
		}
		if got, _ := s.SharedRepos(ctx, "model", "bob", "", false); len(got) != 0 {
			t.Errorf("%s repo listed as shared: %v", vis, got)
		}
	}
	internal := "internal"
	if _, err := s.SetRepoSettings(ctx, r, RepoSettings{Visibility: &internal}); err != nil {
		t.Fatal(err)
	}
	got, err := s.SharedRepos(ctx, "model", "bob", "", false)
	if err != nil || len(got) != 1 || got[0].RepoID != r || got[0].HeadSHA != first.SHA {
		t.Fatalf("shared repos for bob: %v %v", got, err)
	}
	if got, _ := s.SharedRepos(ctx, "model", "", "", true); len(got) != 0 {
		t.Errorf("an internal repo listed as public: %v", got)
	}
	for _, c := range []struct{ except, owner string }{{"alice", ""}, {"bob", "carol"}, {"alice", "alice"}} {
		if got, _ := s.SharedRepos(ctx, "model", c.except, c.owner, false); len(got) != 0 {
			t.Errorf("except %s owner %q: %v", c.except, c.owner, got)
		}
	}
	// Deleted from main, the file is still in the first commit; squashed,
	// it is in no revision.
	if _, err := s.Commit(ctx, r, "main", NewCommit{Summary: "rm", Changes: []Change{{Op: DeleteFile, Path: "w.bin"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SharedFile(ctx, r, named.Hash); err != nil {
		t.Errorf("in an older revision: %v", err)
	}
	if _, err := s.SquashHistory(ctx, r, "main", "squash"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SharedFile(ctx, r, named.Hash); !errors.Is(err, ErrNotFound) {
		t.Errorf("squashed out of every revision: %v, want ErrNotFound", err)
	}
}
