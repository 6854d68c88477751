package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	indexpkg "openxet/store/index"
	"openxet/store/pgtest"
	"openxet/xet"

	"openxet/store/accounts"
)

// TestPostgresQuotaExactAcrossNodes: three stores (nodes) on one
// PostgreSQL index and one bucket upload distinct xorbs of one tenant at
// once. The quota admits exactly k of them: usage never passes it, the
// counter equals the owned sizes, and a rebuild agrees.
func TestPostgresQuotaExactAcrossNodes(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	dir := t.TempDir()
	bucket := fileBucket(dir)
	const nodes, each, admitted = 3, 8, 7
	var stores []*Store
	for range nodes {
		stores = append(stores, mustOpenIndex(t, index, bucket))
	}
	var xorbs []xet.XorbInfo
	var bodies [][]byte
	for i := range nodes * each {
		body, info := xet.BuildXorb(chunksOf(uint64(100+i), 2, 1000), false)
		xorbs, bodies = append(xorbs, info), append(bodies, body[:info.StreamLen])
	}
	size := xorbs[0].StreamLen
	for _, x := range xorbs {
		if x.StreamLen != size {
			t.Fatalf("xorb sizes differ: %d and %d", x.StreamLen, size)
		}
	}
	quota := admitted*size + size/2
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for n, s := range stores {
		for i := range each {
			k := n*each + i
			wg.Go(func() {
				_, err := s.PutXorb(ctx, "alice", xorbs[k], bodies[k], quota)
				var oq *OverQuotaError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &oq):
					over.Add(1)
				default:
					t.Errorf("node %d xorb %d: %v", n, k, err)
				}
			})
		}
	}
	wg.Wait()
	if ok.Load() != admitted || over.Load() != nodes*each-admitted {
		t.Fatalf("%d admitted, %d over quota; want %d and %d", ok.Load(), over.Load(), admitted, nodes*each-admitted)
	}
	for n, s := range stores {
		if u, err := s.Usage(ctx, "alice"); err != nil || u != admitted*size {
			t.Fatalf("node %d: usage %d %v, want %d", n, u, err, admitted*size)
		}
	}
	diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: index, BucketURL: bucket})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("check: %v %v", diffs, err)
	}
}

// TestPostgresNodesStartTogether: nodes opening a new index at once
// migrate it once and agree on the deployment.
func TestPostgresNodesStartTogether(t *testing.T) {
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	bucket := fileBucket(t.TempDir())
	stores := make([]*Store, 4)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() {
			s, err := Open(context.Background(), Config{IndexPath: index, BucketURL: bucket})
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range stores {
		defer s.Close()
		if s.Deployment() != stores[0].Deployment() {
			t.Fatalf("deployments %s and %s", s.Deployment(), stores[0].Deployment())
		}
	}
}

// TestPostgresReindex: reindex refuses while a server holds the index,
// rebuilds it (a new schema swapped in) once none does, and leaves no
// scratch schema behind.
func TestPostgresReindex(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	dir := t.TempDir()
	s := mustOpenIndex(t, index, fileBucket(dir))
	populate(t, s)
	before := dump(t, s)
	cfg := ReindexConfig{IndexPath: index, BucketURL: fileBucket(dir)}
	if err := Reindex(ctx, cfg); !errors.Is(err, ErrIndexInUse) {
		t.Fatalf("reindex under a server: %v", err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE tenants SET usage_bytes = usage_bytes + 1`); err != nil {
		t.Fatal(err)
	}
	if diffs, err := CheckIndex(ctx, cfg); err != nil || len(diffs) == 0 {
		t.Fatalf("check of a tampered counter: %v %v", diffs, err)
	}
	s.Close()
	if err := Reindex(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s = mustOpenIndex(t, index, fileBucket(dir))
	if diff := cmp.Diff(before, dump(t, s)); diff != "" {
		t.Fatalf("rebuilt index differs:\n%s", diff)
	}
	var schemas []string
	rows, err := s.db.QueryContext(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'openxet%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		schemas = append(schemas, n)
	}
	rows.Close()
	if len(schemas) != 1 || schemas[0] != DefaultPostgresSchema {
		t.Fatalf("schemas after reindex and check: %v", schemas)
	}
}

// TestPostgresDownIsUnavailable: with the index server gone, reads and
// writes fail with ErrUnavailable (503), not as bad requests.
func TestPostgresDownIsUnavailable(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	dir := t.TempDir()
	s, err := Open(ctx, Config{IndexPath: index, BucketURL: fileBucket(filepath.Join(dir, "b")), BusyTimeout: 2e9})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Kill()
	if _, err := s.Usage(ctx, "alice"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read with the index down: %v", err)
	}
	body, info := xet.BuildXorb(chunksOf(7, 2, 1000), false)
	if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write with the index down: %v", err)
	}
}

// A closed store's shared lock is gone when Close returns, so a reindex
// started right behind it is not refused. PostgreSQL drops a session's
// locks only when the backend of a closed connection exits, which can be
// after Close has returned; a connection opened beforehand looks at once.
func TestPostgresCloseReleasesTheLockAtOnce(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	bucket := fileBucket(t.TempDir())
	watch := mustOpenIndex(t, index, bucket)
	held := func() (n int) {
		if err := watch.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := held() // watch's own lock is on a connection of its own
	for i := range 30 {
		s := mustOpenIndex(t, index, bucket)
		s.Close()
		if n := held(); n != base {
			t.Fatalf("round %d: %d advisory locks held right after Close, want %d", i, n, base)
		}
	}
}

// TestPostgresRestartUnderServingNodes: PostgreSQL restarts under two
// serving nodes, which drops the sessions holding their shared locks. Each
// node's lock check notices and takes its lock again, so a reindex tried
// next is refused while they serve, and both nodes write again.
func TestPostgresRestartUnderServingNodes(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	bucket := fileBucket(t.TempDir())
	var nodes [2]*Store
	var found [2]chan indexpkg.LockState
	for i := range nodes {
		s := New(Config{IndexPath: index, BucketURL: bucket, LockCheck: 10 * time.Millisecond})
		found[i] = make(chan indexpkg.LockState, 64)
		s.lockHook = func(st indexpkg.LockState) {
			if st != indexpkg.LockKept {
				select {
				case found[i] <- st:
				default:
				}
			}
		}
		if err := s.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		nodes[i] = s
	}
	put := func(step string, node int, seed uint64) {
		t.Helper()
		body, info := xet.BuildXorb(chunksOf(seed, 2, 1000), false)
		if _, err := nodes[node].PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
			t.Fatalf("%s: node %d: put xorb: %v", step, node, err)
		}
	}
	put("before the restart", 0, 1)
	put("before the restart", 1, 2)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		// Checks while PostgreSQL is down find it unreachable (indexpkg.LockFailed);
		// the first once it is back takes the lock again.
		for st := indexpkg.LockFailed; st != indexpkg.LockRetaken; {
			select {
			case st = <-found[i]:
				if st == indexpkg.LockRefused {
					t.Fatalf("node %d: a check after the restart found the lock held by another", i)
				}
			case <-time.After(time.Minute): // a hung test, not a timed assertion
				t.Fatalf("node %d: no lock check took the lock again after the restart", i)
			}
		}
		if !nodes[i].IndexLockHeld() || nodes[i].IndexLockLosses() != 1 {
			t.Fatalf("node %d: held %v, losses %d; want true and 1", i, nodes[i].IndexLockHeld(), nodes[i].IndexLockLosses())
		}
	}
	if err := Reindex(ctx, ReindexConfig{IndexPath: index, BucketURL: bucket}); !errors.Is(err, ErrIndexInUse) {
		t.Fatalf("reindex under two nodes after the restart: %v, want ErrIndexInUse", err)
	}
	put("after the restart", 0, 3)
	put("after the restart", 1, 4)
}

// TestPostgresLockLostToReindexRefusesWrites: a reindex that takes the
// exclusive lock after PostgreSQL restarted, before the node's check,
// makes the node refuse every write (ErrIndexLockLost, 503) without
// writing anything, while reads go on; once the reindex lets go, the next
// check takes the lock again and writes resume.
func TestPostgresLockLostToReindexRefusesWrites(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	index := srv.NewIndex(t)
	bucket := fileBucket(t.TempDir())
	s, err := Open(ctx, Config{IndexPath: index, BucketURL: bucket, LockCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.idx.CheckLock(ctx)
	if !s.IndexLockHeld() || s.IndexLockLosses() != 0 {
		t.Fatalf("a check of a held lock: held %v, losses %d", s.IndexLockHeld(), s.IndexLockLosses())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	reindex, err := indexpkg.LockExclusive(ctx, index) // what Reindex takes first
	if err != nil {
		t.Fatalf("the exclusive lock right after the restart: %v (the node's lock should be gone)", err)
	}
	s.idx.CheckLock(ctx)
	if s.IndexLockHeld() || s.IndexLockLosses() != 1 {
		t.Fatalf("after the restart under a reindex: held %v, losses %d; want false and 1", s.IndexLockHeld(), s.IndexLockLosses())
	}
	body, info := xet.BuildXorb(chunksOf(9, 2, 1000), false)
	_, err = s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited)
	if !errors.Is(err, ErrIndexLockLost) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a write without the lock: %v, want ErrIndexLockLost and ErrUnavailable", err)
	}
	if ok, err := s.bucket.Exists(ctx, xorbKey(info.Hash.String())); err != nil || ok {
		t.Fatalf("a refused write left its xorb object: %v %v", ok, err)
	}
	if _, _, err := s.CreateCredential(ctx, "alice", []string{accounts.ScopeWrite}); !errors.Is(err, ErrIndexLockLost) {
		t.Fatalf("an index write without the lock: %v", err)
	}
	if _, err := s.Usage(ctx, "alice"); err != nil {
		t.Fatalf("a read without the lock: %v", err)
	}
	s.idx.CheckLock(ctx) // the reindex still holds it
	if s.IndexLockHeld() || s.IndexLockLosses() != 1 {
		t.Fatalf("a second check under the reindex: held %v, losses %d; want false and 1", s.IndexLockHeld(), s.IndexLockLosses())
	}
	reindex.Release()
	s.idx.CheckLock(ctx)
	if !s.IndexLockHeld() || s.IndexLockLosses() != 1 {
		t.Fatalf("after the reindex: held %v, losses %d; want true and 1", s.IndexLockHeld(), s.IndexLockLosses())
	}
	if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
		t.Fatalf("a write with the lock again: %v", err)
	}
	if _, err := indexpkg.LockExclusive(ctx, index); !errors.Is(err, ErrIndexInUse) {
		t.Fatalf("reindex beside the node holding its lock again: %v", err)
	}
}

// TestXorbOwnerOutcomesOnBothEngines: the owner transaction, which is one
// statement on PostgreSQL (pgRecordUpload) and several on SQLite, gives
// the same outcomes on both: a new tenant within the default quota is
// charged; one past it is refused with the default quota and no usage,
// and nothing is recorded; an override above the default admits; a second
// upload is not charged; a refusal reports the usage before it.
func TestXorbOwnerOutcomesOnBothEngines(t *testing.T) {
	ctx := context.Background()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dir := t.TempDir()
			index := filepath.Join(dir, "index.db")
			if engine == "postgres" {
				index = pgtest.Start(t).NewIndex(t)
			}
			s := mustOpenIndex(t, index, fileBucket(dir))
			xorb := func(seed uint64) (xet.XorbInfo, []byte) {
				body, info := xet.BuildXorb(chunksOf(seed, 2, 1000), false)
				return info, body[:info.StreamLen]
			}
			a, abody := xorb(1)
			size := a.StreamLen
			big := 10 * size
			if err := s.PutTenantLimits(ctx, "carol", []byte(`{}`), &big); err != nil {
				t.Fatal(err)
			}
			usage := func(tenant string) int64 {
				u, err := s.Usage(ctx, tenant)
				if err != nil {
					t.Fatal(err)
				}
				return u
			}
			for _, step := range []struct {
				name     string
				tenant   string
				info     xet.XorbInfo
				body     []byte
				quota    int64
				inserted bool
				refused  *OverQuotaError
				usage    int64
			}{
				{"a new tenant within the default", "alice", a, abody, size, true, nil, size},
				{"the same xorb again", "alice", a, abody, size, false, nil, size},
				{"an existing tenant past the default", "alice", func() xet.XorbInfo { i, _ := xorb(2); return i }(), func() []byte { _, b := xorb(2); return b }(), size,
					false, &OverQuotaError{Tenant: "alice", QuotaBytes: size, UsageBytes: size, SizeBytes: size}, size},
				{"a new tenant past the default", "bob", a, abody, size - 1, false, &OverQuotaError{Tenant: "bob", QuotaBytes: size - 1, UsageBytes: 0, SizeBytes: size}, 0},
				{"an override above the default", "carol", a, abody, size - 1, true, nil, size},
				{"unlimited", "dave", a, abody, Unlimited, true, nil, size},
			} {
				inserted, err := s.PutXorb(ctx, step.tenant, step.info, step.body, step.quota)
				var oq *OverQuotaError
				switch {
				case step.refused != nil:
					if !errors.As(err, &oq) || *oq != *step.refused {
						t.Fatalf("%s: %v, want %+v", step.name, err, step.refused)
					}
				case err != nil || inserted != step.inserted:
					t.Fatalf("%s: inserted %v, %v; want %v", step.name, inserted, err, step.inserted)
				}
				if u := usage(step.tenant); u != step.usage {
					t.Fatalf("%s: usage of %s %d, want %d", step.name, step.tenant, u, step.usage)
				}
			}
			if owned, err := s.OwnsXorb(ctx, "bob", a.Hash); err != nil || owned {
				t.Fatalf("a refused new tenant owns the xorb: %v %v", owned, err)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM tenants WHERE name = 'bob'`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("a refused new tenant has %d rows (%v)", n, err)
			}
			if diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: index, BucketURL: fileBucket(dir)}); err != nil || len(diffs) != 0 {
				t.Fatalf("check: %v %v", diffs, err)
			}
		})
	}
}
