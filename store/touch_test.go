package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPutXorbWaitsForCollection: while a pass releases a tenant's owner
// record of a xorb (gc_pending) that tenant's upload of the xorb is
// refused with ErrCollecting, and while a pass deletes the xorb
// (gc_objects.doomed) every tenant's is; a refused upload touches nothing
// and records no owner. On PostgreSQL these checks and the touch are one
// statement (pgTouchXorb), on SQLite a transaction of three (touchXorb).
func TestPutXorbWaitsForCollection(t *testing.T) { onEngines(t, testPutXorbWaitsForCollection) }

func testPutXorbWaitsForCollection(t *testing.T, newLC func(testing.TB) *lc) {
	l := newLC(t)
	ctx := context.Background()
	f := buildFile(chunkSet(23))
	key := xorbKey(f.xorbs[0].Hash.String())
	l.putXorbs(l.s, "alice", f) // never registered
	touched := func() int64 {
		t.Helper()
		var v int64
		if err := l.s.db.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, key).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	refused := func(step, tenant string) {
		t.Helper()
		before, usage := touched(), l.usage(tenant)
		l.clock.advance(time.Minute) // a touch now would be later than before
		_, err := l.s.PutXorb(ctx, tenant, f.xorbs[0], f.bodies[0], Unlimited)
		if !errors.Is(err, ErrCollecting) {
			t.Errorf("%s: %s's upload: %v, want ErrCollecting", step, tenant, err)
		}
		if got := touched(); got != before {
			t.Errorf("%s: %s's refused upload touched the xorb: %d, want %d", step, tenant, got, before)
		}
		if owned, err := l.s.OwnsXorb(ctx, tenant, f.xorbs[0].Hash); err != nil || owned {
			t.Errorf("%s: %s owns the xorb after a refused upload: %v %v", step, tenant, owned, err)
		}
		if got := l.usage(tenant); got != usage {
			t.Errorf("%s: %s's usage %d after a refused upload, want %d", step, tenant, got, usage)
		}
	}
	// The first pass releases alice's owner (nothing of hers needs it);
	// between the transaction that does and the deletion of her owner
	// record, her upload waits. Bob's does not: he has no record to lose.
	l.clock.advance(2 * time.Hour)
	steps := 0
	rep, err := l.s.Collect(ctx, GCConfig{Grace: time.Hour, Hook: func(step string) error {
		if step == "owners indexed" {
			steps++
			refused(step, "alice")
		}
		return nil
	}})
	if err != nil || steps != 1 || rep.DeletedXorbs != 0 {
		t.Fatalf("release pass: %+v %v, %d hooks at owners indexed", rep, err, steps)
	}
	// The second pass deletes the xorb: nobody's upload may store it
	// until it is gone.
	l.clock.advance(2 * time.Hour)
	steps = 0
	rep, err = l.s.Collect(ctx, GCConfig{Grace: time.Hour, Hook: func(step string) error {
		if step == "doomed" {
			steps++
			refused(step, "alice")
			refused(step, "bob")
		}
		return nil
	}})
	if err != nil || steps != 1 || rep.DeletedXorbs != 1 {
		t.Fatalf("deleting pass: %+v %v, %d hooks at doomed", rep, err, steps)
	}
	// After the pass an upload stores it afresh, and its touch is after
	// the pass's start.
	l.upload("bob", f)
	l.mustReadable("bob", f)
	var floor int64
	if err := l.s.db.QueryRowContext(ctx, `SELECT value FROM gc_state WHERE name = 'touch_floor'`).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	if got := touched(); got <= floor {
		t.Fatalf("touch after the pass %d, want more than its start %d", got, floor)
	}
	l.checkConsistent("alice", "bob")
}
