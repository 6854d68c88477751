package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	keys, err := listKeys(ctx, l.s.bucket, l.s.dir, prefixXorbOwners)
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
			Entry: TreeEntry{SizeBytes: int64(len(f.data)), XetHash: f.hash().String(), SHA256: f.info.SHA256.String(), GitOID: "oid-" + p}})
	}
	c, err := l.s.Commit(ctx, id, ref, NewCommit{Parent: head.SHA, Summary: "test", Changes: changes})
	if err != nil {
		l.tb.Fatal(err)
	}
	return c
}

func chunkSet(seed uint64) [][]byte { return chunksOf(seed, 3, 3000) }

func TestDeleteRepoGivesQuotaBack(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	a, b := buildFile(chunkSet(1)), buildFile(chunkSet(2), chunkSet(3))
	l.upload("alice", a)
	l.upload("alice", b)
	r := l.repo("alice", "weights")
	l.commit(r, "main", map[string]*tfile{"a.bin": &a, "b.bin": &b})
	if err := l.s.PutBlob(ctx, "feed", []byte("small")); err != nil {
		t.Fatal(err)
	}
	full := l.usage("alice")
	if want := a.xorbs[0].StreamLen + b.xorbs[0].StreamLen + b.xorbs[1].StreamLen; full != want {
		t.Fatalf("usage %d, want %d", full, want)
	}
	// Nothing is released while the repo holds the files.
	if rep := l.collect(0); rep.ReleasedBytes != 0 || l.usage("alice") != full {
		t.Fatalf("a pass released %+v with every file in a revision", rep)
	}
	l.checkConsistent("alice")

	if err := l.s.DeleteRepo(ctx, r); err != nil {
		t.Fatal(err)
	}
	if l.usage("alice") != full {
		t.Fatal("deleting a repo changed usage outside the collector's transaction")
	}
	if _, err := l.s.File(ctx, "alice", a.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted repo's file is still retained: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	rep := l.collect(0)
	if rep.ReleasedBytes != full || l.usage("alice") != 0 {
		t.Fatalf("after the delete a pass released %d of %d bytes; usage %d", rep.ReleasedBytes, full, l.usage("alice"))
	}
	if rep.DeletedXorbs != 3 {
		// The shard's owner waits out its grace only when grace > 0.
		t.Fatalf("deleted %d xorbs, want 3: %+v", rep.DeletedXorbs, rep)
	}
	for _, x := range append(a.xorbs, b.xorbs...) {
		if l.exists(xorbKey(x.Hash.String())) {
			t.Fatalf("xorb %s still stored", x.Hash)
		}
	}
	l.checkConsistent("alice")
	// The blob no revision names goes too, the shard with its owner.
	if l.exists("blobs/feed") {
		t.Fatal("an unreferenced blob survived a pass with no grace")
	}
	l.clock.advance(time.Second)
	l.collect(0)
	keys, _ := listKeys(ctx, l.s.bucket, l.s.dir, prefixShards)
	if len(keys) != 0 {
		t.Fatalf("shards left: %v", keys)
	}
	l.checkConsistent("alice")
}

func TestGracePeriodKeepsRecentUploads(t *testing.T) {
	l := newLC(t)
	const grace = 24 * time.Hour
	f := buildFile(chunkSet(4))
	// An upload in progress: xorbs sent, no shard yet.
	l.putXorbs(l.s, "alice", f)
	l.clock.advance(time.Hour)
	rep := l.collect(grace)
	if rep.ReleasedOwners != 0 || rep.DeletedXorbs != 0 {
		t.Fatalf("a pass within the grace period released %+v", rep)
	}
	// The shard comes an hour later: the file is whole and owned.
	if err := l.register(l.s, "alice", f); err != nil {
		t.Fatal(err)
	}
	l.mustReadable("alice", f)

	// A leftover xorb nobody registered goes once the grace period is over.
	g := buildFile(chunkSet(5))
	l.putXorbs(l.s, "bob", g)
	l.clock.advance(grace - time.Minute)
	if rep := l.collect(grace); rep.ReleasedOwners != 0 {
		t.Fatalf("released before the grace period was over: %+v", rep)
	}
	l.clock.advance(2 * time.Minute)
	if rep := l.collect(grace); rep.ReleasedOwners != 1 || rep.ReleasedBytes != g.xorbs[0].StreamLen {
		t.Fatalf("the leftover's owner was not released: %+v", rep)
	}
	if l.usage("bob") != 0 {
		t.Fatalf("bob's usage %d", l.usage("bob"))
	}
	// Its object waits out a grace period from the release.
	if !l.exists(xorbKey(g.xorbs[0].Hash.String())) {
		t.Fatal("the object was deleted at its release")
	}
	l.clock.advance(grace + time.Second)
	if rep := l.collect(grace); rep.DeletedXorbs != 1 {
		t.Fatalf("the released object was not collected: %+v", rep)
	}
	l.mustReadable("alice", f)
	l.checkConsistent("alice", "bob")
}

func TestCASOnlyFilesAreKeptUntilDeleted(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(6))
	l.upload("alice", f)
	l.clock.advance(48 * time.Hour)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedOwners+rep.DeletedXorbs != 0 {
		t.Fatalf("a CAS-only file lost its bytes: %+v", rep)
	}
	l.mustReadable("alice", f)

	if err := l.s.ReleaseFile(ctx, "bob", f.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob released alice's file: %v", err)
	}
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"f": &f})
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrFileInRepo) {
		t.Fatalf("released a file a revision references: %v", err)
	}
	l.mustReadable("alice", f)
	l.commit(r, "main", map[string]*tfile{"f": nil})
	// Still in the first revision.
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrFileInRepo) {
		t.Fatalf("released a file an older revision references: %v", err)
	}
	if _, err := l.s.SquashHistory(ctx, r, "main", ""); err != nil {
		t.Fatal(err)
	}
	// The squash released it (only old revisions referenced it).
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the squash: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedBytes != f.xorbs[0].StreamLen {
		t.Fatalf("a released file's xorb was not released at once: %+v", rep)
	}
	l.checkConsistent("alice")
}

func TestReleaseThenRegisterAgain(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(7))
	l.upload("alice", f)
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	if !l.exists(fileReleaseKey("alice", f.hash().String())) {
		t.Fatal("no release record")
	}
	l.checkConsistent("alice")
	// The same shard again: the file is back, and reindex agrees.
	if err := l.register(l.s, "alice", f); err != nil {
		t.Fatal(err)
	}
	l.mustReadable("alice", f)
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	if rep := l.collect(0); rep.ReleasedOwners != 0 {
		t.Fatalf("registered again, yet released: %+v", rep)
	}
	// Released, collected, and uploaded again from scratch.
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	l.collect(0)
	l.clock.advance(time.Second)
	if rep := l.collect(0); l.usage("alice") != 0 || l.exists(xorbKey(f.xorbs[0].Hash.String())) {
		t.Fatalf("not collected: %+v usage %d", rep, l.usage("alice"))
	}
	l.checkConsistent("alice")
	l.upload("alice", f)
	l.mustReadable("alice", f)
	if l.usage("alice") != f.xorbs[0].StreamLen {
		t.Fatalf("usage %d after the upload again", l.usage("alice"))
	}
	l.checkConsistent("alice")
}

func TestCrossTenantDedupSurvivesOwnerRelease(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(8))
	l.upload("alice", f)
	// Bob registers the same file by dedup: he sends no xorb.
	if err := l.register(l.s, "bob", f); err != nil {
		t.Fatal(err)
	}
	if l.usage("bob") != 0 {
		t.Fatalf("dedup cost bob %d", l.usage("bob"))
	}
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	l.collect(0)
	l.clock.advance(time.Second)
	l.collect(0)
	if l.usage("alice") != 0 {
		t.Fatalf("alice's usage %d after releasing her only file", l.usage("alice"))
	}
	l.mustReadable("bob", f)
	rep, err := l.s.UsageReport(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.UnownedReferencedBytes != f.xorbs[0].StreamLen || rep.UnownedReferencedXorbs != 1 {
		t.Fatalf("usage report: %+v", rep)
	}
	var bob TenantUsage
	for _, u := range rep.Tenants {
		if u.Tenant == "bob" {
			bob = u
		}
	}
	if bob.ReferencedUnownedBytes != f.xorbs[0].StreamLen || bob.OwnedBytes != 0 {
		t.Fatalf("bob's report: %+v", bob)
	}
	l.checkConsistent("alice", "bob")
	// A file bob registers later over the unowned xorb makes him its owner.
	g := buildFile(chunkSet(8), chunkSet(9))
	l.putXorbs(l.s, "bob", tfile{xorbs: g.xorbs[1:], bodies: g.bodies[1:]})
	if err := l.register(l.s, "bob", g); err != nil {
		t.Fatal(err)
	}
	if want := g.xorbs[0].StreamLen + g.xorbs[1].StreamLen; l.usage("bob") != want {
		t.Fatalf("bob's usage %d, want %d (the unowned xorb adopted)", l.usage("bob"), want)
	}
	l.mustReadable("bob", g)
	l.checkConsistent("alice", "bob")
}

func TestSquashDeleteBranchAndTag(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	v1, v2, dev, tagged := buildFile(chunkSet(10)), buildFile(chunkSet(11)), buildFile(chunkSet(12)), buildFile(chunkSet(13))
	for _, f := range []tfile{v1, v2, dev, tagged} {
		l.upload("alice", f)
	}
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"w.bin": &v1})
	l.commit(r, "main", map[string]*tfile{"w.bin": &v2})
	head, _ := l.s.Resolve(ctx, r, "main")
	if err := l.s.CreateBranch(ctx, r, "dev", head); err != nil {
		t.Fatal(err)
	}
	l.commit(r, "dev", map[string]*tfile{"dev.bin": &dev})
	l.commit(r, "main", map[string]*tfile{"t.bin": &tagged})
	tagAt, _ := l.s.Resolve(ctx, r, "main")
	if err := l.s.CreateTag(ctx, r, "v1.0", tagAt); err != nil {
		t.Fatal(err)
	}
	if err := l.s.CreateTag(ctx, r, "v1.0", tagAt); !errors.Is(err, ErrRefExists) {
		t.Fatalf("tag twice: %v", err)
	}
	if c, err := l.s.Resolve(ctx, r, "v1.0"); err != nil || c.SHA != tagAt.SHA {
		t.Fatalf("resolve the tag: %v %v", c.SHA, err)
	}
	l.commit(r, "main", map[string]*tfile{"t.bin": nil})

	// Squashing main drops only main's last commit (the others are
	// ancestors of dev and of the tag): nothing is released yet.
	if _, err := l.s.SquashHistory(ctx, r, "main", "squash"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.s.SquashHistory(ctx, r, TagRef("v1.0"), ""); !errors.Is(err, ErrNotBranch) {
		t.Fatalf("squash a tag: %v", err)
	}
	retained := func(f tfile) bool { _, err := l.s.File(ctx, "alice", f.hash()); return err == nil }
	state := func() string {
		return fmt.Sprintf("v1 %v v2 %v dev %v tagged %v", retained(v1), retained(v2), retained(dev), retained(tagged))
	}
	if got := state(); got != "v1 true v2 true dev true tagged true" {
		t.Fatalf("after the squash: %s", got)
	}
	refs, _ := l.s.Refs(ctx, r)
	main, _ := l.s.Resolve(ctx, r, "main")
	if len(refs) != 3 || main.Parent != "" || len(main.Tree) != 1 {
		t.Fatalf("after the squash: refs %v, main %+v", refs, main)
	}
	l.checkConsistent("alice")
	if err := l.s.DeleteRef(ctx, r, "main"); !errors.Is(err, ErrNotBranch) {
		t.Fatalf("delete main: %v", err)
	}
	if err := l.s.DeleteRef(ctx, r, "dev"); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "v1 true v2 true dev false tagged true" {
		t.Fatalf("after deleting dev: %s", got)
	}
	if err := l.s.DeleteRef(ctx, r, TagRef("v1.0")); err != nil {
		t.Fatal(err)
	}
	// The old history is gone with the tag; main's squashed commit keeps v2.
	if got := state(); got != "v1 false v2 true dev false tagged false" {
		t.Fatalf("after deleting the tag: %s", got)
	}
	if _, err := l.s.Resolve(ctx, r, head.SHA); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a dropped commit still resolves: %v", err)
	}
	if err := l.s.DeleteRef(ctx, r, "dev"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete dev twice: %v", err)
	}
	l.checkConsistent("alice")
	l.clock.advance(time.Second)
	rep := l.collect(DefaultGCGrace)
	want := v1.xorbs[0].StreamLen + dev.xorbs[0].StreamLen + tagged.xorbs[0].StreamLen
	if rep.ReleasedBytes != want || l.usage("alice") != v2.xorbs[0].StreamLen {
		t.Fatalf("released %d, want %d; usage %d", rep.ReleasedBytes, want, l.usage("alice"))
	}
	l.mustReadable("alice", v2)
	l.checkConsistent("alice")
}

func TestDeleteTenant(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	shared, own := buildFile(chunkSet(14)), buildFile(chunkSet(15))
	l.upload("alice", shared)
	l.upload("alice", own)
	l.s.CreateCredential(ctx, "alice", []string{ScopeWrite})
	l.s.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":100000000}`), ptr(int64(100000000)))
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"s": &shared})
	if err := l.register(l.s, "bob", shared); err != nil { // by dedup
		t.Fatal(err)
	}
	del, err := l.s.DeleteTenant(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if del.Credentials != 1 || len(del.Repos) != 1 || del.ReleasedFiles != 2 || !del.LimitsRemoved || del.OwnedBytes == 0 {
		t.Fatalf("deletion %+v", del)
	}
	if cs, _ := l.s.Credentials(ctx, "alice"); len(cs) != 0 {
		t.Fatalf("credentials left: %v", cs)
	}
	l.checkConsistent("alice", "bob")
	l.clock.advance(time.Second)
	l.collect(DefaultGCGrace)
	if l.usage("alice") != 0 {
		t.Fatalf("usage %d after the deletion and a pass", l.usage("alice"))
	}
	l.mustReadable("bob", shared)
	ts, _ := l.s.Tenants(ctx)
	for _, tn := range ts {
		if tn.Name == "alice" {
			t.Fatal("alice still has a tenant row")
		}
	}
	l.checkConsistent("alice", "bob")
	if _, err := l.s.DeleteTenant(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete an unknown tenant: %v", err)
	}
	if _, err := l.s.DeleteTenant(ctx, "Bad/Name"); !errors.Is(err, ErrBadTenant) {
		t.Fatalf("delete a malformed tenant: %v", err)
	}
}

// TestSweepRacesUploads drives the classic race deterministically: at
// each step of a pass before the sweep condemns (the reads of its mark
// included), an upload dedups
// against a xorb nobody owns or references (registers a shard naming it)
// or uploads it again. The pass must not delete it; a retained file never
// loses a byte.
func TestSweepRacesUploads(t *testing.T) { onEngines(t, testSweepRacesUploads) }

func testSweepRacesUploads(t *testing.T, newLC func(testing.TB) *lc) {
	for _, tc := range []struct {
		name string
		race func(l *lc, f tfile) error
	}{
		{"shard registered over the xorb", func(l *lc, f tfile) error { return l.register(l.s, "bob", f) }},
		{"xorb uploaded again", func(l *lc, f tfile) error {
			_, err := l.s.PutXorb(context.Background(), "bob", f.xorbs[0], f.bodies[0], Unlimited)
			return err
		}},
		{"xorb uploaded again, then the shard", func(l *lc, f tfile) error {
			if _, err := l.s.PutXorb(context.Background(), "bob", f.xorbs[0], f.bodies[0], Unlimited); err != nil {
				return err
			}
			return l.register(l.s, "bob", f)
		}},
	} {
		// Up to the sweep's condemnation: from then on the upload waits or
		// stores the xorb afresh (TestDoomedObjectsMakeUploadsWait).
		for _, step := range passSteps[:slices.Index(passSteps, "doomed")] {
			t.Run(tc.name+" at "+step, func(t *testing.T) { sweepRacesUpload(t, newLC, tc.name, tc.race, step) })
		}
	}
}

func sweepRacesUpload(t *testing.T, newLC func(testing.TB) *lc, name string, race func(l *lc, f tfile) error, step string) {
	{
		{
			l := newLC(t)
			ctx := context.Background()
			f := buildFile(chunkSet(16))
			l.upload("alice", f)
			if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
				t.Fatal(err)
			}
			l.clock.advance(time.Second)
			l.collect(time.Hour) // releases alice's owner: the xorb is unowned, unreferenced
			l.clock.advance(2 * time.Hour)
			raced := false
			rep, err := l.s.Collect(ctx, GCConfig{Grace: time.Hour, Hook: func(s string) error {
				if s == step && !raced {
					raced = true
					l.clock.advance(time.Second)
					if err := race(l, f); err != nil {
						t.Errorf("the racing upload failed: %v", err)
					}
				}
				return nil
			}})
			if err != nil {
				t.Fatalf("pass: %v", err)
			}
			if !raced {
				t.Skipf("the pass has no step %q here", step)
			}
			if rep.DeletedXorbs != 0 {
				t.Fatalf("the pass deleted a xorb an upload touched after it started: %+v", rep)
			}
			if !l.exists(xorbKey(f.xorbs[0].Hash.String())) {
				t.Fatal("xorb object gone")
			}
			if name != "xorb uploaded again" {
				l.mustReadable("bob", f)
			}
			// Later passes keep what the upload made retained or owned.
			l.clock.advance(time.Second)
			l.collect(0)
			if name != "xorb uploaded again" {
				l.mustReadable("bob", f)
			}
			l.checkConsistent("alice", "bob")
		}
	}
}

// TestDoomedObjectsMakeUploadsWait: between the transaction that condemns
// an object and the one that forgets it, uploads and shards naming it are
// refused with ErrCollecting (retryable), and after the pass an upload
// stores it afresh.
func TestDoomedObjectsMakeUploadsWait(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(17))
	l.putXorbs(l.s, "alice", f) // never registered
	l.clock.advance(2 * time.Hour)
	l.collect(time.Hour) // releases the owner
	l.clock.advance(2 * time.Hour)
	steps := map[string]bool{}
	rep, err := l.s.Collect(ctx, GCConfig{Grace: time.Hour, Hook: func(step string) error {
		if step != "doomed" && step != "objects deleted" {
			return nil
		}
		steps[step] = true
		if _, err := l.s.PutXorb(ctx, "bob", f.xorbs[0], f.bodies[0], Unlimited); !errors.Is(err, ErrCollecting) {
			t.Errorf("%s: upload of a condemned xorb: %v", step, err)
		}
		// The index forgot it in the condemning transaction: a shard
		// naming it is refused (hf_xet then uploads it again).
		if err := l.register(l.s, "bob", f); !errors.Is(err, ErrMissingXorb) && !errors.Is(err, ErrCollecting) {
			t.Errorf("%s: shard naming a condemned xorb: %v", step, err)
		}
		return nil
	}})
	if err != nil || rep.DeletedXorbs != 1 || !steps["doomed"] || !steps["objects deleted"] {
		t.Fatalf("pass %+v %v, steps %v", rep, err, steps)
	}
	if err := l.register(l.s, "bob", f); !errors.Is(err, ErrMissingXorb) {
		t.Fatalf("shard naming a collected xorb: %v", err)
	}
	l.upload("bob", f)
	l.mustReadable("bob", f)
	l.checkConsistent("alice", "bob")
}

// TestCollectorCrashAtEveryStep stops a pass after each of its steps (as a
// crash would: no clean-up, lease held), then checks that no retained file
// lost a byte, that reindex rebuilds usage equal to the owned sizes, and
// that the next pass finishes the job with a clean reindex --check.
func TestCollectorCrashAtEveryStep(t *testing.T) {
	steps := []string{"resumed", "marked", "owners indexed", "owners released", "shard owners indexed", "shard owners released",
		"dedup recomputed", "doomed", "objects deleted", "swept", "tenants tidied"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			l := newLC(t)
			ctx := context.Background()
			keep, drop, shared := buildFile(chunkSet(20)), buildFile(chunkSet(21)), buildFile(chunkSet(22), chunkSet(23))
			l.upload("alice", keep)
			l.upload("alice", drop)
			l.upload("alice", shared)
			if err := l.register(l.s, "bob", shared); err != nil {
				t.Fatal(err)
			}
			leftover := buildFile(chunkSet(24))
			l.putXorbs(l.s, "bob", leftover)
			r := l.repo("alice", "m")
			l.commit(r, "main", map[string]*tfile{"d": &drop, "s": &shared})
			l.clock.advance(time.Second)
			if err := l.s.DeleteRepo(ctx, r); err != nil {
				t.Fatal(err)
			}
			if _, err := l.s.DeleteTenant(ctx, "bob"); err != nil {
				t.Fatal(err)
			}
			l.clock.advance(time.Second)
			crash := errors.New("crash")
			hit := false
			_, err := l.s.Collect(ctx, GCConfig{Hook: func(s string) error {
				if s == step {
					hit = true
					return crash
				}
				return nil
			}})
			if !errors.Is(err, crash) || !hit {
				t.Fatalf("the pass did not stop at %q: %v", step, err)
			}
			l.mustReadable("alice", keep)
			// Whatever the crash left, a rebuilt index has usage = owned sizes.
			diffs, err := CheckIndex(ctx, l.cfg())
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				// Only the bucket ahead of the index: an owner released
				// (or an object forgotten) in the index before the bucket
				// followed, and dedup rows still to recompute.
				ahead := d.Index == "" && (d.Table == "xorb_owners" || d.Table == "shard_owners" || d.Table == "xorbs" || d.Table == "dedup")
				if d.Table == "tenants" {
					iu, _, _ := strings.Cut(d.Index, " ")
					bu, _, _ := strings.Cut(d.Bucket, " ")
					i, _ := strconv.ParseInt(iu, 10, 64)
					b, _ := strconv.ParseInt(bu, 10, 64)
					ahead = i < b || d.Index == ""
				}
				if !ahead {
					t.Errorf("after a crash at %q: %v", step, d)
				}
			}
			// Another process may not collect until the lease expires.
			if _, err := l.s.Collect(ctx, GCConfig{}); !errors.Is(err, ErrCollectorBusy) {
				t.Fatalf("a second collector ran under a live lease: %v", err)
			}
			l.clock.advance(DefaultGCLeaseTTL + time.Second)
			l.collect(0)
			l.clock.advance(time.Second)
			l.collect(0)
			l.mustReadable("alice", keep)
			l.checkConsistent("alice", "bob")
			if l.usage("alice") != keep.xorbs[0].StreamLen || l.usage("bob") != 0 {
				t.Fatalf("usage alice %d bob %d", l.usage("alice"), l.usage("bob"))
			}
		})
	}
}

// TestOneCollectorAtATime: two stores on one index; while one pass holds
// the lease the other store's pass is refused and it keeps serving.
func TestOneCollectorAtATime(t *testing.T) { onEngines(t, testOneCollectorAtATime) }

func testOneCollectorAtATime(t *testing.T, newLC func(testing.TB) *lc) {
	l := newLC(t)
	ctx := context.Background()
	other := l.open()
	inPass := make(chan struct{})
	resume := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := l.s.Collect(ctx, GCConfig{Hook: func(step string) error {
			if step == "marked" {
				close(inPass)
				<-resume
			}
			return nil
		}})
		done <- err
	}()
	<-inPass
	if _, err := other.Collect(ctx, GCConfig{}); !errors.Is(err, ErrCollectorBusy) {
		t.Fatalf("second collector: %v", err)
	}
	f := buildFile(chunkSet(25))
	l.putXorbs(other, "carol", f)
	if err := l.register(other, "carol", f); err != nil {
		t.Fatalf("the other store stopped serving: %v", err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := other.Collect(ctx, GCConfig{}); err != nil {
		t.Fatalf("after the first pass: %v", err)
	}
	l.mustReadable("carol", f)
}

func TestUsageNeverNegative(t *testing.T) {
	l := newLC(t)
	f := buildFile(chunkSet(26))
	l.putXorbs(l.s, "alice", f)
	// A damaged index whose counter is below an owned xorb's size.
	if _, err := l.s.db.Exec(`UPDATE tenants SET usage_bytes = 1 WHERE name = 'alice'`); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	_, err := l.s.Collect(context.Background(), GCConfig{})
	if err == nil || !strings.Contains(err.Error(), "reindex") {
		t.Fatalf("release below zero: %v", err)
	}
	if u := l.usage("alice"); u != 1 {
		t.Fatalf("usage %d", u)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(27))
	l.upload("alice", f)
	if err := l.s.ReleaseFile(ctx, "alice", f.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	before := dump(t, l.s)
	rep, err := l.s.Collect(ctx, GCConfig{DryRun: true})
	if err != nil || rep.ReleasedBytes != f.xorbs[0].StreamLen || !rep.DryRun {
		t.Fatalf("dry run %+v %v", rep, err)
	}
	if diff := cmp.Diff(before, dump(t, l.s)); diff != "" {
		t.Fatalf("a dry run changed the index:\n%s", diff)
	}
}

func TestReindexAfterLifecycle(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	a, b := buildFile(chunkSet(30)), buildFile(chunkSet(31))
	l.upload("alice", a)
	l.upload("alice", b)
	r := l.repo("alice", "m")
	l.commit(r, "main", map[string]*tfile{"a": &a})
	l.commit(r, "main", map[string]*tfile{"a": nil, "b": &b})
	if _, err := l.s.SquashHistory(ctx, r, "main", ""); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	l.collect(0)
	before := dump(t, l.s)
	l.s.Close()
	if err := Reindex(ctx, l.cfg()); err != nil {
		t.Fatal(err)
	}
	l.s = l.open()
	if diff := cmp.Diff(before, dump(t, l.s)); diff != "" {
		t.Fatalf("rebuilt index differs (-live +rebuilt):\n%s", diff)
	}
	l.mustReadable("alice", b)
	refs, _ := l.s.Refs(ctx, r)
	if len(refs) != 1 {
		t.Fatalf("refs %v", refs)
	}
	var shas []string
	l.s.db.QueryRow(`SELECT COUNT(*) FROM commits`).Scan(new(int))
	rows, _ := l.s.db.Query(`SELECT sha FROM commits`)
	for rows.Next() {
		var s string
		rows.Scan(&s)
		shas = append(shas, s)
	}
	rows.Close()
	sort.Strings(shas)
	if len(shas) != 1 || shas[0] != refs[0].Commit {
		t.Fatalf("commits after the squash and a reindex: %v", shas)
	}
}

// TestShardReleaseRecomputesDedup: when a tenant's shard is released, its
// dedup rows that another shard of the tenant also provides come back from
// that shard, as reindex would build them.
func TestShardReleaseRecomputesDedup(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	x := chunkSet(40)
	a, b := buildFile(x), buildFile(x, chunkSet(41))
	l.putXorbs(l.s, "bob", a) // bob owns the shared xorb
	if err := l.register(l.s, "alice", a); err != nil {
		t.Fatal(err)
	}
	l.putXorbs(l.s, "alice", tfile{xorbs: b.xorbs[1:], bodies: b.bodies[1:]})
	if err := l.register(l.s, "alice", b); err != nil {
		t.Fatal(err)
	}
	first := xet.Hash(b.xorbs[0].Chunks[0].Hash).String()
	var before string
	l.s.db.QueryRow(`SELECT shard FROM dedup WHERE chunk = ? AND tenant = 'alice'`, first).Scan(&before)
	if before != ShardHash(a.shard) {
		t.Fatalf("the chunk's row comes from %s, not from the shard to release (%s): pick other seeds", before, ShardHash(a.shard))
	}
	if err := l.s.ReleaseFile(ctx, "alice", a.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	rep := l.collect(0)
	if rep.ReleasedShardOwners != 1 {
		t.Fatalf("pass %+v", rep)
	}
	var after string
	if err := l.s.db.QueryRow(`SELECT shard FROM dedup WHERE chunk = ? AND tenant = 'alice'`, first).Scan(&after); err != nil {
		t.Fatalf("alice lost the dedup row of a chunk her remaining file starts with: %v", err)
	}
	if after != ShardHash(b.shard) {
		t.Fatalf("dedup row from shard %s, want %s (was %s)", after, ShardHash(b.shard), before)
	}
	l.mustReadable("alice", b)
	l.checkConsistent("alice", "bob")
}

// TestOwnerGraceCapsAbandonedUploads: under the default (long) grace
// period, an upload abandoned before its shard stops counting against the
// quota after OwnerGrace; its bytes stay for the whole grace period, and a
// shard that comes late adopts them again.
func TestOwnerGraceCapsAbandonedUploads(t *testing.T) {
	l := newLC(t)
	f := buildFile(chunkSet(50))
	l.putXorbs(l.s, "alice", f)
	l.clock.advance(OwnerGrace - time.Minute)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedOwners != 0 {
		t.Fatalf("released within OwnerGrace: %+v", rep)
	}
	l.clock.advance(2 * time.Minute)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedBytes != f.xorbs[0].StreamLen || rep.DeletedXorbs != 0 {
		t.Fatalf("after OwnerGrace: %+v", rep)
	}
	if l.usage("alice") != 0 {
		t.Fatalf("usage %d", l.usage("alice"))
	}
	if err := l.register(l.s, "alice", f); err != nil {
		t.Fatalf("the late shard: %v", err)
	}
	if l.usage("alice") != f.xorbs[0].StreamLen {
		t.Fatalf("the late shard did not adopt the xorb: usage %d", l.usage("alice"))
	}
	l.mustReadable("alice", f)
	l.checkConsistent("alice")
}

// TestReleaseHintsDoNotLinger: a hint left by a file deletion whose xorb
// another retained file still needs is forgotten by the next pass, so
// serve's loop does not run a pass every minute for ever.
func TestReleaseHintsDoNotLinger(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	x := chunkSet(60)
	a, b := buildFile(x), buildFile(x, chunkSet(61))
	l.upload("alice", a)
	l.upload("alice", b)
	if err := l.s.ReleaseFile(ctx, "alice", a.hash()); err != nil {
		t.Fatal(err)
	}
	if waiting, _ := l.s.ReleasesWaiting(ctx); !waiting {
		t.Fatal("no release waiting after a deletion")
	}
	l.clock.advance(time.Second)
	if rep := l.collect(DefaultGCGrace); rep.ReleasedOwners != 0 {
		t.Fatalf("released a xorb another file needs: %+v", rep)
	}
	if waiting, _ := l.s.ReleasesWaiting(ctx); waiting {
		t.Fatal("the hint of a settled release lingers")
	}
	l.mustReadable("alice", b)
}

// TestPartialShardDeletionFreesDisk: a shard that registered two files
// stays owned while one of them is retained; the other's xorbs are still
// collected, and the dedup rows the shard gave for them go as reindex
// would drop them.
func TestPartialShardDeletionFreesDisk(t *testing.T) {
	l := newLC(t)
	ctx := context.Background()
	a, b := buildFile(chunkSet(70)), buildFile(chunkSet(71))
	both := (&xet.Shard{Files: []xet.FileInfo{a.info, b.info},
		Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(a.xorbs[0]), xet.CASInfoFromXorb(b.xorbs[0])}}).MarshalUpload()
	l.putXorbs(l.s, "alice", a)
	l.putXorbs(l.s, "alice", b)
	if err := l.register(l.s, "alice", tfile{shard: both}); err != nil {
		t.Fatal(err)
	}
	if err := l.s.ReleaseFile(ctx, "alice", a.hash()); err != nil {
		t.Fatal(err)
	}
	l.clock.advance(time.Second)
	rep := l.collect(0)
	if rep.ReleasedBytes != a.xorbs[0].StreamLen || rep.DeletedXorbs != 1 || rep.ReleasedShardOwners != 0 {
		t.Fatalf("pass %+v", rep)
	}
	if l.exists(xorbKey(a.xorbs[0].Hash.String())) || !l.exists(shardKey(ShardHash(both))) {
		t.Fatal("the released file's xorb is stored, or the shared shard is gone")
	}
	l.mustReadable("alice", b)
	l.checkConsistent("alice")
	// A dedup query for the deleted file's first chunk finds nothing.
	if _, err := l.s.DedupAnswer(ctx, "alice", a.xorbs[0].Chunks[0].Hash, true, 8); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dedup of a collected xorb's chunk: %v", err)
	}
	if _, err := l.s.DedupAnswer(ctx, "alice", b.xorbs[0].Chunks[0].Hash, true, 8); err != nil {
		t.Fatalf("dedup of the kept file: %v", err)
	}
}
