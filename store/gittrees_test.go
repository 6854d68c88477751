package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/gitobj"
)

// gitTreesConformance is the git trees' part of the conformance suite (on
// every index engine): a tree is kept once and read back as it was put,
// a second put of the same id changes nothing, an absent id is
// ErrNotFound, and a commit's object reads back by its id only.
func gitTreesConformance(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	trees, err := gitobj.BuildTrees([]gitobj.File{{Path: "a/b.txt", Blob: gitobj.BlobID([]byte("b"))}, {Path: "c.bin", Blob: gitobj.BlobID(gitobj.LFSPointer("ab", 3))}})
	if err != nil {
		t.Fatal(err)
	}
	top := GitTree{ID: trees.Root, Body: trees.Objects[trees.Root],
		Files: []GitTreeFile{{Blob: gitobj.BlobID(gitobj.LFSPointer("ab", 3)), SHA256: "ab", Size: 3, Pointer: true}}}
	sub := GitTree{ID: trees.Dirs["a"], Body: trees.Objects[trees.Dirs["a"]], Files: []GitTreeFile{{Blob: gitobj.BlobID([]byte("b")), SHA256: "3e23", Size: 1, Exec: true}}}
	if err := s.PutGitTrees(ctx, []GitTree{top, sub}); err != nil {
		t.Fatal(err)
	}
	spoiled := top
	spoiled.Files = nil
	if err := s.PutGitTrees(ctx, []GitTree{spoiled}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []GitTree{top, sub} {
		if got, err := s.GitTree(ctx, want.ID); err != nil || !cmp.Equal(got, want) {
			t.Fatalf("git tree %s: %v\n%s", want.ID, err, cmp.Diff(want, got))
		}
	}
	if _, err := s.GitTree(ctx, gitobj.BlobID([]byte("no tree"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent git tree: %v", err)
	}

	r := RepoID{Tenant: "carol", Type: "model", Name: "git-trees"}
	if _, err := s.CreateRepo(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	c, err := s.Resolve(ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	if obj, err := s.CommitObject(ctx, r, c.SHA); err != nil || !bytes.Equal(obj, c.Object) || obj == nil {
		t.Fatalf("commit object: %q %v, want %q", obj, err, c.Object)
	}
	for _, rev := range []string{"main", c.SHA[:12], gitobj.BlobID([]byte("no commit"))} {
		if _, err := s.CommitObject(ctx, r, rev); !errors.Is(err, ErrNotFound) {
			t.Fatalf("commit object of %q: %v, want ErrNotFound (ids only)", rev, err)
		}
	}
	if _, err := s.CommitObject(ctx, RepoID{Tenant: "dave", Type: "model", Name: "git-trees"}, c.SHA); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another repo's commit object: %v", err)
	}
}
