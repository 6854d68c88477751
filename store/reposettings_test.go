package store

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"openxet/xet"
)

// TestRepoSettingsMoveAndDuplicate: settings are stored and survive a
// rebuild; a move carries the whole history to the new name and frees the
// old one; a duplicate shares every file, so the tenant's usage does not
// move, and it outlives the deletion of its source. Bad input changes
// nothing. The bucket agrees with the index after each step.
func TestRepoSettingsMoveAndDuplicate(t *testing.T) {
	m := newMovesFixture(t)
	b := RepoID{Tenant: "alice", Type: "model", Name: "b"}
	d := RepoID{Tenant: "alice", Type: "model", Name: "d"}
	m.settings()
	m.checkBucket("settings")
	m.move(b)
	m.checkBucket("move")
	m.duplicate(b, d)
	m.checkBucket("duplicate")
	m.deleteSource(b, d)
	m.checkBucket("delete source")
	m.moveChain()
}

// movesFixture is the store TestRepoSettingsMoveAndDuplicate works on.
type movesFixture struct {
	t      *testing.T
	ctx    context.Context
	s      *Store
	bucket string
	a      RepoID       // alice's repo, as first created
	f      xet.FileInfo // the one file of a
	c1     Commit       // a's commit of f, on main and tagged v1
	usage  int64        // alice's usage with a committed
}

// newMovesFixture opens a store and commits and tags one file in repo a.
func newMovesFixture(t *testing.T) *movesFixture {
	t.Helper()
	dir := t.TempDir()
	m := &movesFixture{t: t, ctx: context.Background(), bucket: fileBucket(dir)}
	m.s = mustOpen(t, dir, m.bucket)
	s, ctx := m.s, m.ctx
	m.a = RepoID{Tenant: "alice", Type: "model", Name: "a"}
	if _, err := s.CreateRepo(ctx, m.a, false); err != nil {
		t.Fatal(err)
	}
	m.f = putFile(t, s, "alice", -1, chunksOf(7, 3, 5000))
	head, _ := s.Resolve(ctx, m.a, "main")
	c1, err := commitTree(ctx, s, m.a, "main", head.SHA, "weights", "", []TreeEntry{{Path: "w.bin", SizeBytes: int64(m.f.Size()), XetHash: m.f.Hash.String(), SHA256: m.f.SHA256.String(), GitOID: fakeOID("g")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTag(ctx, m.a, "v1", c1); err != nil {
		t.Fatal(err)
	}
	m.c1 = c1
	m.usage, _ = s.Usage(ctx, "alice")
	return m
}

// checkBucket fails the test if a rebuild from the bucket differs from the index.
func (m *movesFixture) checkBucket(step string) {
	m.t.Helper()
	diffs, err := CheckIndex(m.ctx, ReindexConfig{IndexPath: m.s.cfg.IndexPath, BucketURL: m.bucket})
	if err != nil || len(diffs) != 0 {
		m.t.Fatalf("%s: the bucket disagrees with the index: %v %v", step, diffs, err)
	}
}

// settings sets a's visibility and gating, then tries bad settings.
func (m *movesFixture) settings() {
	t, s, ctx, a := m.t, m.s, m.ctx, m.a
	pub, manual, bad := "public", "manual", "everyone"
	r, err := s.SetRepoSettings(ctx, a, RepoSettings{Visibility: &pub, Gated: &manual})
	if err != nil || r.VisibilityOf() != "public" || r.Private || r.Gated != "manual" {
		t.Fatalf("settings: %+v %v", r, err)
	}
	for _, set := range []RepoSettings{{Visibility: &bad}, {Gated: &bad}} {
		if _, err := s.SetRepoSettings(ctx, a, set); !errors.Is(err, ErrBadSetting) {
			t.Errorf("bad setting %+v: %v", set, err)
		}
	}
	if _, err := s.SetRepoSettings(ctx, RepoID{Tenant: "alice", Type: "model", Name: "none"}, RepoSettings{Gated: &manual}); !errors.Is(err, ErrNotFound) {
		t.Errorf("settings of a missing repo: %v", err)
	}
	got, _ := s.Repo(ctx, a)
	if got.VisibilityOf() != "public" || got.Gated != "manual" {
		t.Errorf("after bad settings: %+v", got)
	}
}

// move tries bad moves of a, then moves it to b.
func (m *movesFixture) move(b RepoID) {
	t, s, ctx, a, c1 := m.t, m.s, m.ctx, m.a, m.c1
	for _, c := range []struct {
		to   RepoID
		want error
	}{
		{RepoID{Tenant: "bob", Type: "model", Name: "b"}, ErrBadRepoName},
		{RepoID{Tenant: "alice", Type: "dataset", Name: "b"}, ErrBadRepoName},
		{RepoID{Tenant: "alice", Type: "model", Name: "bad/name"}, ErrBadRepoName},
		{a, ErrRepoExists},
	} {
		if _, err := s.MoveRepo(ctx, a, c.to); !errors.Is(err, c.want) {
			t.Errorf("move to %v: %v, want %v", c.to, err, c.want)
		}
	}
	if _, err := s.MoveRepo(ctx, RepoID{Tenant: "alice", Type: "model", Name: "none"}, b); !errors.Is(err, ErrNotFound) {
		t.Errorf("move of a missing repo: %v", err)
	}
	moved, err := s.MoveRepo(ctx, a, b)
	if err != nil || moved.RepoID != b || moved.Gated != "manual" {
		t.Fatalf("move: %+v %v", moved, err)
	}
	if _, err := s.Repo(ctx, a); !errors.Is(err, ErrNotFound) {
		t.Errorf("old name after the move: %v", err)
	}
	for _, rev := range []string{"main", "v1", c1.SHA} {
		cm, err := s.Resolve(ctx, b, rev)
		if err != nil || cm.SHA != c1.SHA || !reflect.DeepEqual(cm.Tree, c1.Tree) {
			t.Errorf("moved repo at %s: %s %v", rev, cm.SHA, err)
		}
	}
	if got, err := s.MovedTo(ctx, a); err != nil || got != b {
		t.Errorf("MovedTo(a) = %v, %v; want %v", got, err, b)
	}
	if _, err := s.MovedTo(ctx, b); !errors.Is(err, ErrNotFound) {
		t.Errorf("MovedTo of a name never moved: %v", err)
	}
}

// duplicate tries bad duplicates of b, then duplicates it to d.
func (m *movesFixture) duplicate(b, d RepoID) {
	t, s, ctx := m.t, m.s, m.ctx
	if _, err := s.DuplicateRepo(ctx, b, RepoID{Tenant: "bob", Type: "model", Name: "d"}, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("duplicate of a private repo to another tenant: %v", err)
	}
	if _, err := s.DuplicateRepo(ctx, b, d, "everyone"); !errors.Is(err, ErrBadSetting) {
		t.Errorf("duplicate with a bad visibility: %v", err)
	}
	if _, err := s.DuplicateRepo(ctx, b, b, ""); !errors.Is(err, ErrRepoExists) {
		t.Errorf("duplicate onto itself: %v", err)
	}
	dup, err := s.DuplicateRepo(ctx, b, d, "private")
	if err != nil || !dup.Private || dup.VisibilityOf() != "private" || dup.Gated != "manual" {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	if u, _ := s.Usage(ctx, "alice"); u != m.usage {
		t.Errorf("usage %d after the duplicate, want %d", u, m.usage)
	}
}

// deleteSource deletes b and checks that its duplicate d keeps its
// history and file.
func (m *movesFixture) deleteSource(b, d RepoID) {
	t, s, ctx := m.t, m.s, m.ctx
	if err := s.DeleteRepo(ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, rev := range []string{"main", "v1"} {
		if cm, err := s.Resolve(ctx, d, rev); err != nil || cm.SHA != m.c1.SHA {
			t.Errorf("duplicate at %s after the source is deleted: %s %v", rev, cm.SHA, err)
		}
	}
	if _, err := s.FileBySHA256(ctx, "alice", m.f.SHA256.String()); err != nil {
		t.Errorf("the duplicate's file after the source is deleted: %v", err)
	}
	if _, err := s.MovedTo(ctx, m.a); !errors.Is(err, ErrNotFound) {
		t.Errorf("MovedTo(a) once its repo is deleted: %v", err)
	}
}

// moveChain: a chain of moves leads to where the repo is now, until a repo
// takes the old name again.
func (m *movesFixture) moveChain() {
	t, s, ctx := m.t, m.s, m.ctx
	x, y, z := RepoID{"alice", "model", "x"}, RepoID{"alice", "model", "y"}, RepoID{"alice", "model", "z"}
	if _, err := s.CreateRepo(ctx, x, false); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][2]RepoID{{x, y}, {y, z}} {
		if _, err := s.MoveRepo(ctx, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []RepoID{x, y} {
		if got, err := s.MovedTo(ctx, from); err != nil || got != z {
			t.Errorf("MovedTo(%s) = %v, %v; want %v", from.Name, got, err, z)
		}
	}
	m.checkBucket("two moves")
	if _, err := s.CreateRepo(ctx, x, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MovedTo(ctx, x); !errors.Is(err, ErrNotFound) {
		t.Errorf("MovedTo(x) once x is taken again: %v", err)
	}
	m.checkBucket("old name taken again")
	if _, err := s.DeleteTenant(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MovedTo(ctx, y); !errors.Is(err, ErrNotFound) {
		t.Errorf("MovedTo(y) after the tenant is deleted: %v", err)
	}
	m.checkBucket("tenant deleted")
}
