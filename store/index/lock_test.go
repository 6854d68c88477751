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
	d.CheckLock(ctx)
	if len(states) != 2 || states[1] != LockKept || !d.LockHeld() || d.LockLosses() != 0 {
		t.Fatalf("check after the hang: %v, held %v, losses %d; want LockKept on the same session, held, no loss", states, d.LockHeld(), d.LockLosses())
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
