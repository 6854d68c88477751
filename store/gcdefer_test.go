package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPassRightAfterADelete (issue 34 item 1): a repo deleted (or its
// history squashed) and a pass at once, on a clock that does not move in
// between (a coarse clock, or a fast operator): the touches the uploads
// and the commit made before the pass started defer nothing, the pass
// gives the usage back, and its report defers nothing.
func TestPassRightAfterADelete(t *testing.T) { onEngines(t, testPassRightAfterADelete) }

func testPassRightAfterADelete(t *testing.T, newLC func(testing.TB) *lc) {
	for _, tc := range []struct {
		name string
		drop func(l *lc, id RepoID) error
	}{
		{"delete the repo", func(l *lc, id RepoID) error { return l.s.DeleteRepo(context.Background(), id) }},
		{"squash after deleting the file", func(l *lc, id RepoID) error {
			l.commit(id, "main", map[string]*tfile{"w.bin": nil})
			_, err := l.s.SquashHistory(context.Background(), id, "main", "")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLC(t)
			f := buildFile(chunkSet(40))
			l.upload("alice", f)
			id := l.repo("alice", "m")
			l.commit(id, "main", map[string]*tfile{"w.bin": &f})
			if err := tc.drop(l, id); err != nil {
				t.Fatal(err)
			}
			rep := l.collect(DefaultGCGrace) // same instant: the clock did not move
			if rep.Deferred != 0 || rep.ReleasedOwners != 1 || l.usage("alice") != 0 {
				t.Fatalf("pass right after: %+v, usage %d; want the owner released, nothing deferred", rep, l.usage("alice"))
			}
			l.checkConsistent("alice")
		})
	}
}

// TestDeferredCountsOnlyRaces: a pass's Deferred counts the candidates a
// write touched after the pass started, and nothing else. Just before the
// pass (same instant) an honest upload sends a xorb whose shard has not
// come yet and another registers a file; during it another tenant
// uploads a new file, and bob uploads the xorb of the file alice deleted
// (the one candidate a write touched). Deferred is 1, alice keeps the
// owner for this pass, and the next pass, at the same instant, releases
// it with nothing deferred.
func TestDeferredCountsOnlyRaces(t *testing.T) { onEngines(t, testDeferredCountsOnlyRaces) }

func testDeferredCountsOnlyRaces(t *testing.T, newLC func(testing.TB) *lc) {
	l := newLC(t)
	ctx := context.Background()
	gone := buildFile(chunkSet(41))
	l.upload("alice", gone)
	if err := l.s.ReleaseFile(ctx, "alice", gone.hash()); err != nil {
		t.Fatal(err)
	}
	l.putXorbs(l.s, "dave", buildFile(chunkSet(42))) // its shard is still to come
	l.upload("erin", buildFile(chunkSet(43)))
	raced := false
	rep, err := l.s.Collect(ctx, GCConfig{Grace: DefaultGCGrace, Hook: func(step string) error {
		if step == "marked" && !raced {
			raced = true
			l.upload("carol", buildFile(chunkSet(44)))
			l.putXorbs(l.s, "bob", gone)
		}
		return nil
	}})
	if err != nil || !raced {
		t.Fatalf("pass: %v (raced %v)", err, raced)
	}
	if rep.Deferred != 1 || rep.ReleasedOwners != 0 || l.usage("alice") != gone.xorbs[0].StreamLen {
		t.Fatalf("pass %+v, alice's usage %d: want exactly the raced owner deferred", rep, l.usage("alice"))
	}
	rep = l.collect(DefaultGCGrace)
	if rep.Deferred != 0 || rep.ReleasedOwners != 1 || l.usage("alice") != 0 {
		t.Fatalf("next pass %+v, alice's usage %d: want alice's owner released", rep, l.usage("alice"))
	}
	l.checkConsistent("alice", "bob", "carol", "dave", "erin")
}

// TestTouchStraddlingAPassStart (PostgreSQL, where writers do not queue
// for one write lock): a touching transaction that read the touch floor
// before a pass's start committed cannot commit after it with a time at
// or before T0 (the pass would count it as before its start, and its mark
// might not see the write). SERIALIZABLE refuses one of the two, and the
// touch, run again, is after T0.
func TestTouchStraddlingAPassStart(t *testing.T) {
	indexes := pgIndexes(t)
	dir := t.TempDir()
	l := newLCOn(t, dir, indexes(dir))
	ctx := context.Background()
	key := xorbKey(strings.Repeat("ab", 32))
	w, err := l.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback()
	if err := touchTx(ctx, w, l.clock.Now().Unix(), key); err != nil {
		t.Fatal(err)
	}
	p := &pass{s: l.s, cfg: GCConfig{LeaseTTL: time.Minute}, holder: "test"}
	leaseErr := p.lease(ctx, true)
	commitErr := w.Commit()
	t.Logf("lease: %v; touch commit: %v", leaseErr, commitErr)
	if leaseErr == nil && commitErr == nil {
		var touched int64
		if err := l.s.db.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, key).Scan(&touched); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("both committed: touched %d, T0 %d", touched, p.t0)
	}
	if leaseErr != nil {
		return // the pass did not start; the touch stands before any pass
	}
	if err := l.s.touch(ctx, key); err != nil {
		t.Fatal(err)
	}
	var touched int64
	if err := l.s.db.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, key).Scan(&touched); err != nil || touched <= p.t0 {
		t.Fatalf("the touch run again: touched %d (%v), want > T0 %d", touched, err, p.t0)
	}
}
