package store

import (
	"context"
	"testing"
	"time"
)

// TestReposListsOneTenantsReposOfOneType: a listing holds the tenant's
// repos of that type only, by name, with the head of main and the time of
// that commit; a deleted repo is gone from it.
func TestReposListsOneTenantsReposOfOneType(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	clock := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	mk := func(tenant, typ, name string, private bool) RepoID {
		t.Helper()
		id := RepoID{Tenant: tenant, Type: typ, Name: name}
		if _, err := s.CreateRepo(ctx, id, private); err != nil {
			t.Fatal(err)
		}
		return id
	}
	b := mk("alice", "model", "b-model", true)
	a := mk("alice", "model", "a-model", false)
	mk("alice", "dataset", "a-data", false)
	mk("bob", "model", "c-model", false)
	gone := mk("alice", "model", "gone", false)
	if err := s.DeleteRepo(ctx, gone); err != nil {
		t.Fatal(err)
	}
	head, err := s.Resolve(ctx, a, "main")
	if err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(90 * time.Minute)
	if err := s.PutBlob(ctx, "s", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c, err := s.Commit(ctx, a, "main", NewCommit{Parent: head.SHA, Summary: "add", Changes: []Change{{Op: PutFile, Path: "x", Entry: TreeEntry{SizeBytes: 1, SHA256: "s", GitOID: fakeOID("g")}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Repos(ctx, "alice", "model")
	if err != nil {
		t.Fatal(err)
	}
	bHead, _ := s.Resolve(ctx, b, "main")
	created := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	want := []RepoSummary{
		{Repo: Repo{RepoID: a, Created: created}, HeadSHA: c.SHA, Updated: clock},
		{Repo: Repo{RepoID: b, Private: true, Created: created}, HeadSHA: bHead.SHA, Updated: created},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].RepoID != want[i].RepoID || got[i].Private != want[i].Private || got[i].HeadSHA != want[i].HeadSHA ||
			!got[i].Created.Equal(want[i].Created) || !got[i].Updated.Equal(want[i].Updated) {
			t.Errorf("repo %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, c := range []struct {
		tenant, typ string
		n           int
	}{{"alice", "dataset", 1}, {"bob", "model", 1}, {"bob", "dataset", 0}, {"carol", "model", 0}} {
		got, err := s.Repos(ctx, c.tenant, c.typ)
		if err != nil || len(got) != c.n || got == nil {
			t.Errorf("%s %s: %v (%v), want %d repos", c.tenant, c.typ, got, err, c.n)
		}
	}
}
