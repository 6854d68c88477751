package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/store/pgtest"
	"openxet/store/s3test"
	"openxet/xet"

	"openxet/store/accounts"
)

// s3Bucket is the conformance suite's S3 driver: a new bucket on a MinIO
// server started for t (skipped without MinIO, see s3test), with its
// credentials in the environment as a deployment would have them.
func s3Bucket(t *testing.T, _ string) string {
	srv := s3test.Start(t)
	srv.Setenv(t)
	return srv.BucketURL(srv.CreateBucket(t))
}

// s3NoCompatBucket is s3Bucket on a MinIO started with --no-compat
// (random ETags).
func s3NoCompatBucket(t *testing.T, _ string) string {
	srv := s3test.StartNoCompat(t)
	srv.Setenv(t)
	return srv.BucketURL(srv.CreateBucket(t))
}

// sqliteIndexes makes SQLite index locations: dir/index.db.
func sqliteIndexes(t *testing.T) func(dir string) string {
	return func(dir string) string { return filepath.Join(dir, "index.db") }
}

// pgIndexes makes PostgreSQL index locations: a new database on one
// PostgreSQL server started for t (skipped without PostgreSQL, see pgtest)
// for each call.
func pgIndexes(t *testing.T) func(dir string) string {
	srv := pgtest.Start(t)
	return func(string) string { return srv.NewIndex(t) }
}

// moreConformance is the rest of the contract TestStoreConformance checks
// on every bucket driver: files and their ranges, credentials and limits,
// the deployment marker and the signing key, and (when the bucket outlives
// the store, shared) a second store and a rebuild from the bucket agreeing
// with the first.
func moreConformance(t *testing.T, s *Store, indexes func(dir string) string, dir, bucketURL string, shared bool) {
	t.Helper()
	ctx := context.Background()
	chunks := chunksOf(21, 3, 3000)
	f := putFile(t, s, "carol", Unlimited, chunks, chunksOf(22, 2, 4000))
	got, err := s.File(ctx, "carol", f.Hash)
	if err != nil || got.TermCount != 2 || got.SizeBytes != 3*3000+2*4000 {
		t.Fatalf("file: %+v %v", got, err)
	}
	// A range inside the first xorb's stream reads back its bytes.
	body, info := xet.BuildXorb(chunks, false)
	for _, r := range [][2]int64{{0, info.StreamLen}, {int64(info.Chunks[0].SerializedEnd), int64(info.Chunks[1].SerializedEnd - info.Chunks[0].SerializedEnd)}, {info.StreamLen - 7, 7}} {
		rc, err := s.OpenXorbRange(ctx, info.Hash, r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(data, body[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %v: %d bytes, %v", r, len(data), err)
		}
	}
	if _, err := s.OpenXorbRange(ctx, xet.Hash{2}, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("range of an absent xorb: %v", err)
	}

	cred, _, err := s.CreateCredential(ctx, "carol", []string{accounts.ScopeRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeCredential(ctx, cred.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Credential(ctx, cred.ID); err != nil || !c.IsRevoked() {
		t.Fatalf("revoked credential: %+v %v", c, err)
	}
	if err := s.PutTenantLimits(ctx, "carol", []byte(`{"quota_bytes":123456789}`), ptr(int64(123456789))); err != nil {
		t.Fatal(err)
	}

	gitTreesConformance(t, s)
	historyConformance(t, s)

	if s.Deployment() == "" {
		t.Fatal("no deployment id")
	}
	key, stored, err := s.SigningKey(ctx, nil)
	if err != nil || !stored || len(key) != 32 {
		t.Fatalf("signing key: %x %v %v", key, stored, err)
	}
	if again, stored, err := s.SigningKey(ctx, bytes.Repeat([]byte{1}, 32)); err != nil || stored || !bytes.Equal(again, key) {
		t.Fatalf("signing key again: %x %v %v", again, stored, err)
	}
	if !shared {
		return
	}

	// A second store with its own index on the bucket (another node's
	// view) adopts the deployment and finds the key.
	otherIndex := indexes(filepath.Join(dir, "other"))
	other := mustOpenIndex(t, otherIndex, bucketURL)
	if other.Deployment() != s.Deployment() {
		t.Fatalf("second store: deployment %s, want %s", other.Deployment(), s.Deployment())
	}
	if k, _, err := other.SigningKey(ctx, nil); err != nil || !bytes.Equal(k, key) {
		t.Fatalf("second store's signing key %x %v, want %x", k, err, key)
	}
	// A rebuild from the bucket finds no difference.
	before := dump(t, s)
	diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: s.cfg.IndexPath, BucketURL: bucketURL})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("check against the bucket: %v %v", diffs, err)
	}
	other.Close()
	if err := Reindex(ctx, ReindexConfig{IndexPath: otherIndex, BucketURL: bucketURL}); err != nil {
		t.Fatal(err)
	}
	rebuilt := mustOpenIndex(t, otherIndex, bucketURL)
	if diff := cmp.Diff(before, dump(t, rebuilt)); diff != "" {
		t.Fatalf("index rebuilt from the bucket differs (-live +rebuilt):\n%s", diff)
	}
	if rebuilt.Deployment() != s.Deployment() {
		t.Fatalf("rebuilt index: deployment %s, want %s", rebuilt.Deployment(), s.Deployment())
	}
}

// TestCreateIfAbsentAcrossNodes: stores with their own indexes on one
// bucket (nodes), starting at once on a new bucket, end with one
// deployment id and one signing key; uploads of one xorb racing through
// them all succeed on the one object. On S3 this rests on the service's
// conditional writes (If-None-Match: *), not on any lock of ours.
func TestCreateIfAbsentAcrossNodes(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.Setenv(t)
	url := srv.BucketURL(srv.CreateBucket(t))
	dir := t.TempDir()
	const n = 6
	stores := make([]*Store, n)
	keys := make([][]byte, n)
	stored := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := Open(ctx, Config{IndexPath: filepath.Join(dir, string(rune('a'+i)), "index.db"), BucketURL: url})
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
			keys[i], stored[i], err = s.SigningKey(ctx, bytes.Repeat([]byte{byte(i + 1)}, 32))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	winners := 0
	for i, s := range stores {
		defer s.Close()
		if s.Deployment() != stores[0].Deployment() || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("node %d: deployment %s key %x; node 0: %s %x", i, s.Deployment(), keys[i], stores[0].Deployment(), keys[0])
		}
		if stored[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d nodes stored their signing key candidate, want 1", winners)
	}

	body, info := xet.BuildXorb(chunksOf(31, 4, 2000), false)
	inserted := make([]bool, n)
	for i, s := range stores {
		wg.Go(func() {
			var err error
			if inserted[i], err = s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, s := range stores {
		if !inserted[i] {
			t.Fatalf("node %d: upload not recorded in its own index", i)
		}
		if c, err := s.XorbChunks(ctx, info.Hash); err != nil || !cmp.Equal(c, info.Chunks) {
			t.Fatalf("node %d: layout %v", i, err)
		}
	}
}
