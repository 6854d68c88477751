package index

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"openxet/store/fault"
	"openxet/store/pgtest"
)

// TestLockSurvivesAHang (issue 45 item 3b): PostgreSQL hangs (every
// process stopped, no session ended) under a serving node. The lock check
// finds no answer: writes are refused at once (503, not a wait), but the
// check query is left in flight rather than cancelled, which would end the
// session and the lock with it. Once PostgreSQL answers, the same session
// still holds the lock: writes resume at the next check, with no loss
// counted and no new session, and a reindex is still refused meanwhile.
func TestLockSurvivesAHang(t *testing.T) {
	srv := pgtest.Start(t)
	loc := srv.NewIndex(t)
	ctx := context.Background()
	var states []LockState
	d, err := Open(ctx, Config{Location: loc, LockCheck: -1, Busy: 500 * time.Millisecond, LockHook: func(s LockState) { states = append(states, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	d.CheckLock(ctx)
	if len(states) != 1 || states[0] != LockUnanswered {
		t.Fatalf("check under a hang: %v, want [LockUnanswered]", states)
	}
	err = d.Tx(ctx, func(tx *sql.Tx) error { return nil })
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, fault.ErrUnavailable) || d.LockHeld() {
		t.Fatalf("a write under the hang: %v (held %v), want ErrLockLost and ErrUnavailable at once", err, d.LockHeld())
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	// A loaded machine may take more than a check's interval to answer
	// the query that waited out the hang: each check waits for it again.
	for range 30 {
		d.CheckLock(ctx)
		if states[len(states)-1] != LockUnanswered {
			break
		}
	}
	if last := states[len(states)-1]; last != LockKept || !d.LockHeld() || d.LockLosses() != 0 {
		t.Fatalf("checks after the hang: %v, held %v, losses %d; want LockKept on the same session, held, no loss", states, d.LockHeld(), d.LockLosses())
	}
	if err := d.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES ('alice')`)
		return err
	}); err != nil {
		t.Fatalf("a write after the hang: %v", err)
	}
	if l, err := LockExclusive(ctx, loc); !errors.Is(err, ErrInUse) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("a reindex after the hang: %v, want ErrInUse (the node's session kept its lock)", err)
	}
}

// TestCloseDuringAHang: a DB closed while PostgreSQL hangs and its lock
// check's query is in flight does not wait for PostgreSQL: Release ends
// the query (the session goes, as closing means), whatever its limit.
func TestCloseDuringAHang(t *testing.T) {
	srv := pgtest.Start(t)
	loc := srv.NewIndex(t)
	ctx := context.Background()
	d, err := Open(ctx, Config{Location: loc, LockCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	l := d.lock.(*pgLock)
	l.limit = time.Hour // only Release may end the probe while frozen
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	var states []LockState
	d.cfg.LockHook = func(s LockState) { states = append(states, s) }
	d.CheckLock(ctx)
	if len(states) != 1 || states[0] != LockUnanswered {
		t.Fatalf("check under a hang: %v, want [LockUnanswered]", states)
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Minute): // a watchdog: only a Close that waits for the thaw gets here
		t.Fatal("Close waited for the frozen PostgreSQL")
	}
}
