package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

// TestRecordCommit records a commit made elsewhere, with its sha, a Xet
// file not registered yet and a regular file, moves a ref by recording it
// again, and checks that reindex rebuilds the same index.
func TestRecordCommit(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	id := RepoID{Tenant: "mirror", Type: "model", Name: "org__m"}
	blob := []byte(`{"a": 1}`)
	sum := sha256.Sum256(blob)
	if err := s.PutBlob(ctx, hex.EncodeToString(sum[:]), blob); err != nil {
		t.Fatal(err)
	}
	sha1 := "1111111111111111111111111111111111111111"
	c := Commit{SHA: sha1, Summary: "upstream", Tree: []TreeEntry{
		{Path: "w.bin", SizeBytes: 10, XetHash: "ab" + string(bytes.Repeat([]byte("0"), 62)), SHA256: hex.EncodeToString(sum[:])},
		{Path: "config.json", SizeBytes: int64(len(blob)), SHA256: hex.EncodeToString(sum[:])},
	}}
	if err := s.RecordCommit(ctx, id, "internal", c, "refs/mirror/commits/"+sha1, "refs/mirror/names/main"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Resolve(ctx, id, "refs/mirror/names/main")
	if err != nil || got.SHA != sha1 || len(got.Tree) != 2 || got.Tree[0].Path != "config.json" {
		t.Fatalf("resolve: %v %+v", err, got)
	}
	repo, err := s.Repo(ctx, id)
	if err != nil || repo.Visibility != "internal" {
		t.Fatalf("repo: %v %+v", err, repo)
	}
	sha2 := "2222222222222222222222222222222222222222"
	c2 := Commit{SHA: sha2, Summary: "upstream", Tree: c.Tree[1:]}
	if err := s.RecordCommit(ctx, id, "internal", c2, "refs/mirror/commits/"+sha2, "refs/mirror/names/main"); err != nil {
		t.Fatal(err)
	}
	if refs, err := s.RefsTo(ctx, id, sha2); err != nil || len(refs) != 2 {
		t.Errorf("refs to %s: %v %v", sha2, refs, err)
	}
	if err := s.RecordCommit(ctx, id, "internal", Commit{SHA: "nope"}); err == nil {
		t.Error("a commit id that is not one was recorded")
	}
	diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reindex --check: %s", d)
	}
}

// TestEntriesByHash: every entry of every commit of the tenant's repos
// that names a Xet hash, and none of another tenant's or of another hash.
func TestEntriesByHash(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	h := "ab" + string(bytes.Repeat([]byte("0"), 62))
	other := "cd" + string(bytes.Repeat([]byte("0"), 62))
	record := func(tenant, name, sha string, tree ...TreeEntry) {
		t.Helper()
		if err := s.RecordCommit(ctx, RepoID{Tenant: tenant, Type: "model", Name: name}, "internal", Commit{SHA: sha, Summary: "upstream", Tree: tree}, "refs/mirror/commits/"+sha); err != nil {
			t.Fatal(err)
		}
	}
	sha1 := "1111111111111111111111111111111111111111"
	sha2 := "2222222222222222222222222222222222222222"
	record("mirror", "org__a", sha1, TreeEntry{Path: "w.bin", SizeBytes: 10, XetHash: h}, TreeEntry{Path: "x.bin", SizeBytes: 11, XetHash: other})
	record("mirror", "org__b", sha2, TreeEntry{Path: "copy.bin", SizeBytes: 10, XetHash: h}, TreeEntry{Path: "again.bin", SizeBytes: 12, XetHash: h})
	record("elsewhere", "org__c", sha1, TreeEntry{Path: "w.bin", SizeBytes: 10, XetHash: h})
	got, err := s.EntriesByHash(ctx, "mirror", h)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, e := range got {
		paths[e.Repo.Name+"/"+e.Entry.Path] = e.SHA
	}
	want := map[string]string{"org__a/w.bin": sha1, "org__b/copy.bin": sha2, "org__b/again.bin": sha2}
	if len(paths) != len(want) || len(got) != len(want) {
		t.Fatalf("entries of %s: %v, want %v", h, paths, want)
	}
	for k, v := range want {
		if paths[k] != v {
			t.Errorf("entry %s: commit %q, want %q", k, paths[k], v)
		}
	}
	if got, err := s.EntriesByHash(ctx, "mirror", "ef"+string(bytes.Repeat([]byte("0"), 62))); err != nil || len(got) != 0 {
		t.Errorf("a hash nothing names: %v %v", got, err)
	}
}

// BenchmarkEntriesByHash: the claims check a relayed plan and a pull run
// (mirror.claimsAgree) on a mirror tenant holding commits revisions of
// entries revisions' trees of 100 files each, the hash named in one.
//
//	go test -run '^$' -bench EntriesByHash -benchtime 20x ./store/
func BenchmarkEntriesByHash(b *testing.B) {
	for _, commits := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("commits=%d", commits), func(b *testing.B) {
			dir := b.TempDir()
			s := mustOpen(b, dir, fileBucket(dir))
			ctx := context.Background()
			hashOf := func(i, j int) string { return fmt.Sprintf("%032x%032x", i, j) }
			for i := range commits {
				tree := make([]TreeEntry, 100)
				for j := range tree {
					tree[j] = TreeEntry{Path: fmt.Sprintf("model-%05d-of-00100.safetensors", j), SizeBytes: 5 << 30, XetHash: hashOf(i, j), SHA256: hashOf(j, i)}
				}
				sha := fmt.Sprintf("%040x", i+1)
				if err := s.RecordCommit(ctx, RepoID{Tenant: "mirror", Type: "model", Name: fmt.Sprintf("org__m%d", i%10)}, "internal", Commit{SHA: sha, Summary: "upstream", Tree: tree}, "refs/mirror/commits/"+sha); err != nil {
					b.Fatal(err)
				}
			}
			want := hashOf(commits/2, 7)
			for b.Loop() {
				got, err := s.EntriesByHash(ctx, "mirror", want)
				if err != nil || len(got) != 1 {
					b.Fatalf("%v %v", got, err)
				}
			}
		})
	}
}
