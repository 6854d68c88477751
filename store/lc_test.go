package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/xet"
)

// clock is a settable clock for stores under test; it only moves forward
// when told. It starts clockLead ahead of the real time: a file bucket's
// modification times are real, and a pass reads them as the time an
// object settled, so the clock must never fall behind them, however slow
// the machine. Started at the real time, a test that wrote objects for
// more than a second and then advanced the clock by one saw its objects
// settle "after" the pass and wait out a grace of zero.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// clockLead is longer than any store test runs and shorter than any grace
// a test expects an object's modification time to keep it for.
const clockLead = 10 * time.Minute

func newClock() *clock { return &clock{t: time.Now().Add(clockLead).Truncate(time.Second)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lc is a store under test with its clock and data directory.
type lc struct {
	tb    testing.TB
	dir   string
	index string // a SQLite file in dir, or a postgres:// URL
	clock *clock
	s     *Store
}

func newLC(tb testing.TB) *lc {
	tb.Helper()
	dir := tb.TempDir()
	return newLCOn(tb, dir, testIndex(tb, dir))
}

// newLCOn is newLC with the index at index (see onEngines).
func newLCOn(tb testing.TB, dir, index string) *lc {
	tb.Helper()
	l := &lc{tb: tb, dir: dir, index: index, clock: newClock()}
	l.s = l.open()
	return l
}

// onEngines runs f on a SQLite index and on a PostgreSQL one (skipped
// without PostgreSQL, see pgtest), each with a file:// bucket in dir.
func onEngines(t *testing.T, f func(t *testing.T, newLC func(testing.TB) *lc)) {
	t.Run("sqlite", func(t *testing.T) { f(t, newLC) })
	t.Run("postgres", func(t *testing.T) {
		indexes := pgIndexes(t)
		f(t, func(tb testing.TB) *lc {
			dir := tb.TempDir()
			return newLCOn(tb, dir, indexes(dir))
		})
	})
}

func (l *lc) open() *Store {
	l.tb.Helper()
	s, err := Open(context.Background(), Config{IndexPath: l.index, BucketURL: fileBucket(l.dir), Now: l.clock.Now})
	if err != nil {
		l.tb.Fatal(err)
	}
	l.tb.Cleanup(func() { s.Close() })
	return s
}

func (l *lc) cfg() ReindexConfig {
	return ReindexConfig{IndexPath: l.index, BucketURL: fileBucket(l.dir)}
}

// tfile is a file built for a test: its xorbs, its shard and its bytes.
type tfile struct {
	info   xet.FileInfo
	xorbs  []xet.XorbInfo
	bodies [][]byte
	shard  []byte
	data   []byte
}

func (f tfile) hash() xet.Hash { return f.info.Hash }

// buildFile makes one file of xorbs, each of the given chunk sets.
func buildFile(sets ...[][]byte) tfile {
	var f tfile
	var leaves []xet.Leaf
	var cas []xet.CASInfo
	for _, chunks := range sets {
		body, info := xet.BuildXorb(chunks, false)
		f.xorbs = append(f.xorbs, info)
		f.bodies = append(f.bodies, body[:info.StreamLen])
		hashes := make([]xet.Hash, len(info.Chunks))
		for i, c := range info.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		for _, c := range chunks {
			f.data = append(f.data, c...)
		}
		f.info.Terms = append(f.info.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkEnd: uint32(len(info.Chunks))})
		f.info.Verification = append(f.info.Verification, xet.RangeHash(hashes))
		cas = append(cas, xet.CASInfoFromXorb(info))
	}
	f.info.Hash = xet.FileHash(leaves)
	f.info.Flags = xet.FileFlagVerification
	sha := xet.Hash(xet.ChunkHash(f.data))
	f.info.SHA256 = &sha
	f.info.Flags |= xet.FileFlagMetadataExt
	f.shard = (&xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: cas}).MarshalUpload()
	return f
}

func (l *lc) putXorbs(s *Store, tenant string, f tfile) {
	l.tb.Helper()
	for i, info := range f.xorbs {
		if _, err := s.PutXorb(context.Background(), tenant, info, f.bodies[i], Unlimited); err != nil {
			l.tb.Fatalf("put xorb %d of %s for %s: %v", i, f.hash(), tenant, err)
		}
	}
}

func (l *lc) register(s *Store, tenant string, f tfile) error {
	l.tb.Helper()
	sh, err := xet.ParseShard(f.shard)
	if err != nil {
		l.tb.Fatal(err)
	}
	if err := s.VerifyShard(context.Background(), sh); err != nil {
		return err
	}
	_, err = s.PutShard(context.Background(), tenant, f.shard, sh)
	return err
}

// upload stores a file's xorbs for tenant and registers it.
func (l *lc) upload(tenant string, f tfile) {
	l.tb.Helper()
	l.putXorbs(l.s, tenant, f)
	if err := l.register(l.s, tenant, f); err != nil {
		l.tb.Fatal(err)
	}
}

// readable reports whether tenant can read every byte of f.
func (l *lc) readable(tenant string, f tfile) error {
	ctx := context.Background()
	got, err := l.s.File(ctx, tenant, f.hash())
	if err != nil {
		return err
	}
	terms, _, err := l.s.FileTerms(ctx, tenant, f.hash(), 0, got.SizeBytes)
	if err != nil {
		return err
	}
	var out []byte
	for _, t := range terms {
		var stored int64
		if err := l.s.db.QueryRow(`SELECT stream_len FROM xorbs WHERE hash = ?`, t.Xorb.String()).Scan(&stored); err != nil {
			return fmt.Errorf("xorb %s of the file: %w", t.Xorb, err)
		}
		r, err := l.s.OpenXorbRange(ctx, t.Xorb, 0, stored)
		if err != nil {
			return err
		}
		stream, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		chunks, err := xet.DecodeChunks(stream)
		if err != nil {
			return fmt.Errorf("xorb %s: %w", t.Xorb, err)
		}
		for _, c := range chunks[t.ChunkStart:t.ChunkEnd] {
			out = append(out, c...)
		}
	}
	if !bytes.Equal(out, f.data) {
		return fmt.Errorf("file %s: %d bytes read, %d written, or they differ", f.hash(), len(out), len(f.data))
	}
	return nil
}

func (l *lc) mustReadable(tenant string, f tfile) {
	l.tb.Helper()
	if err := l.readable(tenant, f); err != nil {
		l.tb.Fatalf("%s's file %s: %v", tenant, f.hash(), err)
	}
}

func (l *lc) collect(grace time.Duration) GCReport {
	l.tb.Helper()
	rep, err := l.s.Collect(context.Background(), GCConfig{Grace: grace})
	if err != nil {
		l.tb.Fatalf("collect: %v", err)
	}
	return rep
}

func (l *lc) usage(tenant string) int64 {
	l.tb.Helper()
	u, err := l.s.Usage(context.Background(), tenant)
	if err != nil {
		l.tb.Fatal(err)
	}
	return u
}

// ownedInBucket sums the sizes in tenant's owner records: the usage
// reindex would rebuild.
func (l *lc) ownedInBucket(tenant string) int64 {
	l.tb.Helper()
	ctx := context.Background()
	keys, err := l.s.bucket.ListKeys(ctx, prefixXorbOwners)
	if err != nil {
		l.tb.Fatal(err)
	}
	var n int64
	for _, k := range keys {
		if !strings.HasSuffix(k, "/"+HashName(tenant)) {
			continue
		}
		xorb, _, _ := strings.Cut(strings.TrimPrefix(k, prefixXorbOwners), "/")
		if ok, _ := l.s.bucket.Exists(ctx, xorbKey(xorb)); !ok {
			continue // reindex: an owner of a missing object owns nothing
		}
		data, err := l.s.bucket.ReadAll(ctx, k)
		if err != nil {
			l.tb.Fatal(err)
		}
		var rec xorbOwnerRecord
		json.Unmarshal(data, &rec)
		n += rec.SizeBytes
	}
	return n
}

// checkConsistent: reindex --check is clean and usage equals the owned
// sizes, for every tenant named.
func (l *lc) checkConsistent(tenants ...string) {
	l.tb.Helper()
	diffs, err := CheckIndex(context.Background(), l.cfg())
	if err != nil {
		l.tb.Fatal(err)
	}
	if len(diffs) > 0 {
		l.tb.Fatalf("reindex --check reports %d differences: %v", len(diffs), diffs)
	}
	for _, t := range tenants {
		if u, b := l.usage(t), l.ownedInBucket(t); u != b || u < 0 {
			l.tb.Fatalf("%s: usage %d, owner records in the bucket sum to %d", t, u, b)
		}
	}
}

func (l *lc) exists(key string) bool {
	ok, err := l.s.bucket.Exists(context.Background(), key)
	if err != nil {
		l.tb.Fatal(err)
	}
	return ok
}

func (l *lc) repo(tenant, name string) RepoID {
	l.tb.Helper()
	r, err := l.s.CreateRepo(context.Background(), RepoID{Tenant: tenant, Type: "model", Name: name}, false)
	if err != nil {
		l.tb.Fatal(err)
	}
	return r.RepoID
}

// commit sets paths of branch ref to files (nil deletes the path).
func (l *lc) commit(id RepoID, ref string, files map[string]*tfile) Commit {
	l.tb.Helper()
	ctx := context.Background()
	head, err := l.s.Resolve(ctx, id, ref)
	if err != nil {
		l.tb.Fatal(err)
	}
	var changes []Change
	for p, f := range files {
		if f == nil {
			if _, ok := head.Entry(p); ok {
				changes = append(changes, Change{Op: DeleteFile, Path: p})
			}
			continue
		}
		changes = append(changes, Change{Op: PutFile, Path: p,
			Entry: TreeEntry{SizeBytes: int64(len(f.data)), XetHash: f.hash().String(), SHA256: f.info.SHA256.String(), GitOID: fakeOID("oid-" + p)}})
	}
	c, err := l.s.Commit(ctx, id, ref, NewCommit{Parent: head.SHA, Summary: "test", Changes: changes})
	if err != nil {
		l.tb.Fatal(err)
	}
	return c
}

func chunkSet(seed uint64) [][]byte { return chunksOf(seed, 3, 3000) }
