package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHistory: History pages a branch's history newest first with its
// length, WalkHistory reads the same chain with trees, a squash shortens
// it to one commit, and an unknown commit or another repo's commit is
// ErrNotFound.
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
		c, err := s.Commit(ctx, id, "main", head.SHA, fmt.Sprintf("commit %d", i), "body", append([]TreeEntry(nil), tree...))
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
	var walked []string
	var trees []int
	err = s.WalkHistory(ctx, id, head.SHA, func(c Commit) (bool, error) {
		walked, trees = append(walked, c.SHA), append(trees, len(c.Tree))
		return true, nil
	})
	if err != nil || !cmp.Equal(walked, want) || !cmp.Equal(trees, []int{4, 3, 2, 1, 0}) {
		t.Errorf("WalkHistory: %v with trees of %v (%v); want %v with 4, 3, 2, 1, 0 entries", walked, trees, err, want)
	}
	stop := errors.New("stop")
	walked = nil
	err = s.WalkHistory(ctx, id, head.SHA, func(c Commit) (bool, error) {
		walked = append(walked, c.SHA)
		if len(walked) == 2 {
			return false, nil
		}
		return true, nil
	})
	if err != nil || len(walked) != 2 {
		t.Errorf("WalkHistory stopped by fn: %d commits (%v); want 2", len(walked), err)
	}
	if err := s.WalkHistory(ctx, id, head.SHA, func(Commit) (bool, error) { return true, stop }); !errors.Is(err, stop) {
		t.Errorf("WalkHistory with fn failing: %v; want fn's error", err)
	}

	otherHead, _ := s.Resolve(ctx, other, "main")
	for name, sha := range map[string]string{"unknown": fmt.Sprintf("%040x", 9), "another repo's": otherHead.SHA} {
		if _, _, err := s.History(ctx, id, sha, 0, 10); !errors.Is(err, ErrNotFound) {
			t.Errorf("History of an %s commit: %v; want ErrNotFound", name, err)
		}
		if err := s.WalkHistory(ctx, id, sha, func(Commit) (bool, error) { return true, nil }); !errors.Is(err, ErrNotFound) {
			t.Errorf("WalkHistory of an %s commit: %v; want ErrNotFound", name, err)
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
