package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"

	"openxet/store/accounts"
)

func fileBucket(dir string) string {
	return FileBucketURL(filepath.Join(dir, "bucket"))
}

func mustOpen(tb testing.TB, dir, bucket string) *Store {
	tb.Helper()
	return mustOpenIndex(tb, testIndex(tb, dir), bucket)
}

// mustOpenIndex opens a store on an index location (a SQLite file or a
// postgres:// URL) and a bucket, closed when tb ends.
func mustOpenIndex(tb testing.TB, index, bucket string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), Config{IndexPath: index, BucketURL: bucket})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func chunksOf(seed uint64, n, size int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
		for j := range out[i] {
			out[i][j] = byte(r.Uint32())
		}
	}
	return out
}

// putFile stores xorbs and registers one file of them for tenant.
func putFile(tb testing.TB, s *Store, tenant string, quota int64, xorbs ...[][]byte) xet.FileInfo {
	tb.Helper()
	ctx := context.Background()
	var f xet.FileInfo
	var leaves []xet.Leaf
	var cas []xet.CASInfo
	for _, chunks := range xorbs {
		body, info := xet.BuildXorb(chunks, false)
		if _, err := s.PutXorb(ctx, tenant, info, body[:info.StreamLen], quota); err != nil {
			tb.Fatal(err)
		}
		hashes := make([]xet.Hash, len(info.Chunks))
		for i, c := range info.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.Terms = append(f.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkEnd: uint32(len(info.Chunks))})
		f.Verification = append(f.Verification, xet.RangeHash(hashes))
		cas = append(cas, xet.CASInfoFromXorb(info))
	}
	f.Hash = xet.FileHash(leaves)
	f.Flags = xet.FileFlagVerification
	sha := xet.Hash{1, 2, byte(len(leaves))}
	f.SHA256 = &sha
	f.Flags |= xet.FileFlagMetadataExt
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}
	body := sh.MarshalUpload()
	parsed, err := xet.ParseShard(body)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.VerifyShard(ctx, parsed); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.PutShard(ctx, tenant, body, parsed); err != nil {
		tb.Fatal(err)
	}
	return f
}

// dump is every row of every index table, as sorted text.
func dump(tb testing.TB, s *Store) map[string][]string {
	tb.Helper()
	out := map[string][]string{}
	for _, t := range indexTables {
		rows, err := s.db.Query(`SELECT * FROM ` + t)
		if err != nil {
			tb.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			rows.Scan(ptrs...)
			var parts []string
			for i, v := range vals {
				if cols[i] == "created" { // owner and shard times come back from the records
					continue
				}
				parts = append(parts, fmt.Sprintf("%s=%v", cols[i], v))
			}
			out[t] = append(out[t], strings.Join(parts, " "))
		}
		rows.Close()
		sort.Strings(out[t])
	}
	return out
}

// populate makes a store with every kind of state reindex must rebuild.
func populate(tb testing.TB, s *Store) {
	tb.Helper()
	ctx := context.Background()
	for _, t := range []string{"alice", "bob"} {
		if _, _, err := s.CreateCredential(ctx, t, []string{accounts.ScopeWrite}); err != nil {
			tb.Fatal(err)
		}
	}
	c, _, _ := s.CreateCredential(ctx, "carol", []string{accounts.ScopeRead})
	if _, err := s.RevokeCredential(ctx, c.ID); err != nil {
		tb.Fatal(err)
	}
	putFile(tb, s, "alice", Unlimited, chunksOf(1, 3, 10_000), chunksOf(2, 2, 5_000))
	putFile(tb, s, "bob", Unlimited, chunksOf(1, 3, 10_000)) // the same first xorb: bob owns it too
	putFile(tb, s, "bob", Unlimited, chunksOf(3, 1, 100))
	if err := s.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":1000000}`), ptr(int64(1000000))); err != nil {
		tb.Fatal(err)
	}
	r, err := s.CreateRepo(ctx, RepoID{Tenant: "alice", Type: "model", Name: "demo"}, false)
	if err != nil {
		tb.Fatal(err)
	}
	head, _ := s.Resolve(ctx, r.RepoID, "main")
	if err := s.PutBlob(ctx, "x", []byte("hi")); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.Commit(ctx, r.RepoID, "main", NewCommit{Parent: head.SHA, Summary: "add", Changes: []Change{{Op: PutFile, Path: "a.txt", Entry: TreeEntry{SizeBytes: 2, SHA256: "x", GitOID: fakeOID("y")}}}}); err != nil {
		tb.Fatal(err)
	}
}

func TestReindexRebuildsEverything(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	populate(t, s)
	before := dump(t, s)
	if len(before["xorb_owners"]) != 4 || len(before["files"]) != 3 || len(before["credentials"]) != 3 {
		t.Fatalf("populate made %v", before)
	}
	s.Close()

	index := testIndex(t, dir)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(index + suffix)
	}
	var stages []string
	err := Reindex(context.Background(), ReindexConfig{IndexPath: index, BucketURL: fileBucket(dir), Progress: func(stage string, done, total int) {
		if done == total {
			stages = append(stages, stage)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 6 {
		t.Fatalf("progress stages %v", stages)
	}
	s2 := mustOpen(t, dir, fileBucket(dir))
	if diff := cmp.Diff(before, dump(t, s2)); diff != "" {
		t.Fatalf("rebuilt index differs (-before +after):\n%s", diff)
	}
	// Running it again is safe.
	s2.Close()
	if err := Reindex(context.Background(), ReindexConfig{IndexPath: index, BucketURL: fileBucket(dir)}); err != nil {
		t.Fatal(err)
	}
}

func TestReindexCheckFindsTamperedCounter(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	populate(t, s)
	cfg := ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)}
	diffs, err := CheckIndex(context.Background(), cfg)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("clean index: %v %v", diffs, err)
	}
	if _, err := s.db.Exec(`UPDATE tenants SET usage_bytes = usage_bytes + 1 WHERE name = 'bob'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`DELETE FROM files WHERE tenant = 'alice'`); err != nil {
		t.Fatal(err)
	}
	diffs, err = CheckIndex(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Reported in the order of the compared tables: tenants before files.
	if len(diffs) != 2 || diffs[0].Table != "tenants" || diffs[0].Key != "bob" || diffs[1].Table != "files" {
		t.Fatalf("differences %v", diffs)
	}
	// A counter above what the bucket backs is not what a crash leaves; a
	// file row the index lacks is.
	if diffs[0].Leftover() || !diffs[1].Leftover() {
		t.Fatalf("leftover: tenants %v, files %v; want false, true", diffs[0].Leftover(), diffs[1].Leftover())
	}
}

// TestDifferenceLeftover: what an interrupted write leaves (the bucket
// ahead of the index) is a leftover; anything else is a mismatch.
func TestDifferenceLeftover(t *testing.T) {
	for _, tc := range []struct {
		d    Difference
		want bool
	}{
		{Difference{Table: "xorb_owners", Key: "x/alice", Bucket: "100", InBucket: true}, true},
		{Difference{Table: "shard_owners", Key: "s/alice", InBucket: true}, true}, // its value is ""
		{Difference{Table: "shard_owners", Key: "s/alice", InIndex: true}, false}, // the index ahead
		{Difference{Table: "files", Key: "alice/f", Index: "10 …", InIndex: true}, false},
		{Difference{Table: "xorbs", Key: "x", Index: "5 AA", Bucket: "5 AB", InIndex: true, InBucket: true}, false},
		{Difference{Table: "dedup", Key: "c/alice", Bucket: "x", InBucket: true}, true},
		{Difference{Table: "tenants", Key: "alice", Index: "100 quota=default limits=", Bucket: "300 quota=default limits=", InIndex: true, InBucket: true}, true},
		{Difference{Table: "tenants", Key: "alice", Index: "300 quota=default limits=", Bucket: "100 quota=default limits=", InIndex: true, InBucket: true}, false},
		{Difference{Table: "tenants", Key: "alice", Index: "100 quota=5 limits=", Bucket: "300 quota=default limits=", InIndex: true, InBucket: true}, false},
		{Difference{Table: "tenants", Key: "alice", Bucket: "300 quota=default limits=", InBucket: true}, true},
		{Difference{Table: "repos", Key: "alice/model/m", Bucket: "1 private 0", InBucket: true}, false},
		{Difference{Table: "credentials", Key: "id", Bucket: "carol read …", InBucket: true}, false},
	} {
		if got := tc.d.Leftover(); got != tc.want {
			t.Errorf("%v (in index %v, bucket %v): leftover %v, want %v", tc.d, tc.d.InIndex, tc.d.InBucket, got, tc.want)
		}
	}
}

func TestReindexRefusesWhileServed(t *testing.T) {
	dir := t.TempDir()
	mustOpen(t, dir, fileBucket(dir)) // holds the shared lock
	err := Reindex(context.Background(), ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)})
	if err == nil || !strings.Contains(err.Error(), ErrIndexInUse.Error()) {
		t.Fatalf("reindex under a server: %v", err)
	}
}

// TestStoreConformance runs the store's contract against every bucket
// driver the tests can reach.
func TestStoreConformance(t *testing.T) {
	for name, be := range map[string]struct {
		indexes func(t *testing.T) func(dir string) string
		bucket  func(t *testing.T, dir string) string
	}{
		"file":         {sqliteIndexes, func(_ *testing.T, dir string) string { return fileBucket(dir) }},
		"mem":          {sqliteIndexes, func(*testing.T, string) string { return "mem://" }},
		"s3":           {sqliteIndexes, s3Bucket}, // conformance_test.go; skipped without MinIO
		"postgres+s3":  {pgIndexes, s3Bucket},     // skipped without PostgreSQL or MinIO
		"s3-no-compat": {sqliteIndexes, s3NoCompatBucket},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			index := be.indexes(t)
			url := be.bucket(t, dir)
			s := mustOpenIndex(t, index(dir), url)
			ctx := context.Background()
			body, info := xet.BuildXorb(chunksOf(9, 2, 1000), false)
			for i, want := range []bool{true, false} {
				got, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited)
				if err != nil || got != want {
					t.Fatalf("put %d: %v %v", i, got, err)
				}
			}
			if u, _ := s.Usage(ctx, "alice"); u != info.StreamLen {
				t.Fatalf("usage %d", u)
			}
			// Over quota: no row, counter or owner record changes. The
			// object may stay, owned by nobody, and is adopted by the next
			// upload of the xorb.
			body2, info2 := xet.BuildXorb(chunksOf(10, 2, 1000), false)
			before := dump(t, s)
			_, err := s.PutXorb(ctx, "alice", info2, body2[:info2.StreamLen], info.StreamLen+10)
			var oq *OverQuotaError
			if !errors.As(err, &oq) || oq.UsageBytes != info.StreamLen {
				t.Fatalf("over quota: %v", err)
			}
			if diff := cmp.Diff(before, dump(t, s)); diff != "" {
				t.Fatalf("refused put changed the index:\n%s", diff)
			}
			if ok, _ := s.Bucket().Exists(ctx, xorbOwnerKey(info2.Hash.String(), "alice")); ok {
				t.Fatal("refused put left its owner record")
			}
			if got, err := s.PutXorb(ctx, "bob", info2, body2[:info2.StreamLen], Unlimited); err != nil || !got {
				t.Fatalf("put after a refused put: %v %v", got, err)
			}
			if c, err := s.XorbChunks(ctx, info2.Hash); err != nil || !cmp.Equal(c, info2.Chunks) {
				t.Fatalf("layout after a refused put: %v", err)
			}
			r, err := s.OpenXorbRange(ctx, info.Hash, 0, info.StreamLen)
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			if _, err := s.XorbChunks(ctx, xet.Hash{1}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("absent xorb: %v", err)
			}
			if _, err := s.File(ctx, "alice", info.Hash); !errors.Is(err, ErrNotFound) {
				t.Fatalf("absent file: %v", err)
			}
			moreConformance(t, s, index, dir, url, name != "mem")
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestReindexIgnoresQuotaBelowUsage: lowering a quota under a tenant's usage
// is a normal admin action; a rebuild restores the owner records as they
// are and never enforces a quota.
func TestReindexIgnoresQuotaBelowUsage(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	populate(t, s)
	ctx := context.Background()
	if err := s.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":1}`), ptr(int64(1))); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	cfg := ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)}
	if diffs, err := CheckIndex(ctx, cfg); err != nil || len(diffs) != 0 {
		t.Fatalf("check with alice's quota below her usage: differences %v, error %v", diffs, err)
	}
	s.Close()
	if err := Reindex(ctx, cfg); err != nil {
		t.Fatalf("reindex with alice's quota below her usage: %v", err)
	}
	s2 := mustOpen(t, dir, fileBucket(dir))
	if diff := cmp.Diff(before, dump(t, s2)); diff != "" {
		t.Fatalf("rebuilt index differs (-before +after):\n%s", diff)
	}
	if diffs, err := CheckIndex(ctx, cfg); err != nil || len(diffs) != 0 {
		t.Fatalf("check after reindex: differences %v, error %v", diffs, err)
	}
}
