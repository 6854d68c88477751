package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPushMovesEveryRefOrNone: a push's updates apply in one transaction:
// one stale ref, a branch moved to a commit that does not descend from
// it, or a tag that exists refuses the whole push and leaves every ref
// and the index as they were; so does a push that crashes before its
// transaction; a push that holds moves every ref, and reindex rebuilds the
// same index from the records.
func TestPushMovesEveryRefOrNone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := s.CreateRepo(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	head, _ := s.Resolve(ctx, id, "main")
	if err := s.CreateBranch(ctx, id, "dev", head); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTag(ctx, id, "v1", head); err != nil {
		t.Fatal(err)
	}
	content := []byte("pushed\n")
	sha := "5d3c8b2b0f1d3a7c5e0b9f8a6d4c2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"
	mk := func(parent string, tree []TreeEntry, summary string, at time.Time) Commit {
		c := Commit{Parent: parent, Summary: summary, Created: at, Tree: tree, Author: TenantAuthor("alice")}
		if err := makeGitCommit(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	entry := TreeEntry{Path: "a.txt", SizeBytes: int64(len(content)), SHA256: sha, GitOID: fakeOID("pushed")}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	c1 := mk(head.SHA, append(append([]TreeEntry{}, head.Tree...), entry), "one", at)
	root := mk("", []TreeEntry{entry}, "unrelated", at)
	blobs := map[string][]byte{sha: content}
	before := dump(t, s)
	for name, c := range map[string]struct {
		updates []PushUpdate
		want    error
	}{
		"stale ref":          {[]PushUpdate{{Ref: "main", Old: head.SHA, New: c1.SHA, Commits: []Commit{c1}}, {Ref: "dev", Old: c1.SHA, New: c1.SHA}}, ErrRefMoved},
		"not a fast-forward": {[]PushUpdate{{Ref: "dev", Old: head.SHA, New: c1.SHA, Commits: []Commit{c1}}, {Ref: "main", Old: head.SHA, New: root.SHA, Commits: []Commit{root}}}, ErrNotFastForward},
		"tag exists":         {[]PushUpdate{{Ref: "main", Old: head.SHA, New: c1.SHA, Commits: []Commit{c1}}, {Ref: TagRef("v1"), Old: "", New: c1.SHA}}, ErrRefExists},
	} {
		if err := s.Push(ctx, id, c.updates, blobs); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if got, err := s.Resolve(ctx, id, "main"); err != nil || got.SHA != head.SHA {
			t.Errorf("%s: main is %s (%v), want %s", name, got.SHA, err, head.SHA)
		}
		if _, err := s.Resolve(ctx, id, c1.SHA); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: the refused push's commit is in the index (%v)", name, err)
		}
	}
	if after := dump(t, s); len(after["commits"]) != len(before["commits"]) || len(after["refs"]) != len(before["refs"]) {
		t.Errorf("refused pushes changed the index: %d commits, %d refs (were %d, %d)", len(after["commits"]), len(after["refs"]), len(before["commits"]), len(before["refs"]))
	}
	// A push that stops (a crash) once its blobs and commit records are
	// written, before the index moves anything: no ref moved, and reindex
	// agrees (the records are of commits no ref reaches).
	crash := errors.New("crash")
	s.hook = func(step string) error {
		if step == "push checked" {
			return crash
		}
		return nil
	}
	if err := s.Push(ctx, id, []PushUpdate{{Ref: "main", Old: head.SHA, New: c1.SHA, Commits: []Commit{c1}}}, blobs); !errors.Is(err, crash) {
		t.Fatalf("push that crashes: %v", err)
	}
	s.hook = nil
	if got, _ := s.Resolve(ctx, id, "main"); got.SHA != head.SHA {
		t.Errorf("main after a crashed push: %s", got.SHA)
	}
	checkReindexAgrees(t, s, dir)
	if err := s.Push(ctx, id, []PushUpdate{{Ref: "main", Old: head.SHA, New: c1.SHA, Commits: []Commit{c1}}, {Ref: "dev", Old: head.SHA, New: c1.SHA}, {Ref: TagRef("v2"), New: c1.SHA}}, blobs); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"main", "dev", "v2"} {
		if got, err := s.Resolve(ctx, id, ref); err != nil || got.SHA != c1.SHA || string(got.Object) != string(c1.Object) {
			t.Errorf("%s after the push: %s (%v)", ref, got.SHA, err)
		}
	}
	checkReindexAgrees(t, s, dir)
	checkForcedPushes(t, s, dir, id, head, c1, mk("", []TreeEntry{entry}, "other root", at.Add(time.Minute)))
}

// checkForcedPushes: a forced update of dev (at c1, as main and tag v2
// are) to root2, an unrelated root: dev moves; c1 stays (main reaches it),
// and so does head (c1's parent). Then, the tags deleted, main moves too,
// forced: c1 and head are dropped, with their records.
func checkForcedPushes(t *testing.T, s *Store, dir string, id RepoID, head, c1, root2 Commit) {
	t.Helper()
	ctx := context.Background()
	if err := s.Push(ctx, id, []PushUpdate{{Ref: "dev", Old: c1.SHA, New: root2.SHA, Commits: []Commit{root2}, Force: true}}, nil); err != nil {
		t.Fatalf("forced push: %v", err)
	}
	if got, _ := s.Resolve(ctx, id, "dev"); got.SHA != root2.SHA {
		t.Errorf("dev after the forced push: %s", got.SHA)
	}
	if _, err := s.Resolve(ctx, id, c1.SHA); err != nil {
		t.Errorf("c1, still on main, after the forced push of dev: %v", err)
	}
	if err := s.DeleteRef(ctx, id, TagRef("v2")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRef(ctx, id, TagRef("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Push(ctx, id, []PushUpdate{{Ref: "main", Old: c1.SHA, New: root2.SHA, Force: true}}, nil); err != nil {
		t.Fatalf("forced push of main: %v", err)
	}
	for _, gone := range []string{c1.SHA, head.SHA} {
		if _, err := s.Resolve(ctx, id, gone); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after the forced pushes: %v, want ErrNotFound (dropped)", gone, err)
		}
	}
	checkReindexAgrees(t, s, dir)
}

// TestModeSurvivesACommit: an executable (pushed with git) stays
// executable when a commit through the API replaces its content, and its
// git tree says so.
func TestModeSurvivesACommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	id := RepoID{Tenant: "alice", Type: "model", Name: "m"}
	if _, err := s.CreateRepo(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	head, _ := s.Resolve(ctx, id, "main")
	run := TreeEntry{Path: "run.sh", SizeBytes: 3, SHA256: fakeSHA256("v1"), GitOID: fakeOID("v1"), Mode: ModeExecutable}
	c := Commit{Parent: head.SHA, Summary: "x", Created: time.Unix(1800000000, 0), Tree: append(append([]TreeEntry{}, head.Tree...), run), Author: TenantAuthor("alice")}
	if err := makeGitCommit(&c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutBlob(ctx, run.SHA256, []byte("v1\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Push(ctx, id, []PushUpdate{{Ref: "main", Old: head.SHA, New: c.SHA, Commits: []Commit{c}}}, nil); err != nil {
		t.Fatal(err)
	}
	next, err := s.Commit(ctx, id, "main", NewCommit{Summary: "edit", Changes: []Change{{Op: PutFile, Path: "run.sh", Content: []byte("v2\n"),
		Entry: TreeEntry{SizeBytes: 3, SHA256: fakeSHA256("v2")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := next.Entry("run.sh"); e.Mode != ModeExecutable {
		t.Errorf("run.sh after an API commit: mode %q, want %s", e.Mode, ModeExecutable)
	}
	trees, _ := gitTree(next.Tree)
	if !strings.Contains(string(trees.Objects[trees.Root]), "100755 run.sh\x00") {
		t.Errorf("the git tree does not hold run.sh as 100755: %q", trees.Objects[trees.Root])
	}
}
