package store

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

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
				ahead := d.Leftover()
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
