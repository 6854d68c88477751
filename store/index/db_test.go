package index

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"openxet/store/fault"
	"openxet/store/pgtest"
)

// TestDB: on each engine, a DB holds the shared lock from Open to Close (an
// exclusive lock, reindex's, is refused with ErrInUse meanwhile, and taken
// after), a write transaction commits or, when fn fails, leaves nothing, a
// snapshot reads what committed, and a location that does not parse opens
// nothing.
func TestDB(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testDB(t, filepath.Join(t.TempDir(), "index.db")) })
	t.Run("postgres", func(t *testing.T) { testDB(t, pgtest.Start(t).NewIndex(t)) })
}

func testDB(t *testing.T, loc string) {
	ctx := context.Background()
	d, err := Open(ctx, Config{Location: loc, LockCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Postgres() != IsPostgres(loc) || !d.LockHeld() || d.Writable() != nil {
		t.Fatalf("postgres %v held %v writable %v", d.Postgres(), d.LockHeld(), d.Writable())
	}
	if _, err := LockExclusive(ctx, loc); !errors.Is(err, ErrInUse) {
		t.Fatalf("exclusive lock beside an open DB: %v, want ErrInUse", err)
	}
	d2, err := Open(ctx, Config{Location: loc, LockCheck: -1})
	if err != nil {
		t.Fatalf("a second shared holder: %v", err) // servers share the index
	}
	d2.Close()

	insert := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tenants(name, usage_bytes) VALUES (?, ?)`, "alice", 7)
		return err
	}
	boom := errors.New("boom")
	if err := d.Tx(ctx, func(tx *sql.Tx) error {
		if err := insert(tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failing transaction: %v", err)
	}
	count := func() (n int) {
		t.Helper()
		if err := d.Snapshot(ctx, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tenants WHERE name = ?`, "alice").Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("a failed transaction left %d rows", n)
	}
	if err := d.Tx(ctx, insert); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows after a committed transaction, want 1", n)
	}
	var usage int64
	if err := d.Reads().QueryRowContext(d.LookupCtx(ctx), `SELECT usage_bytes FROM tenants WHERE name = ?`, "alice").Scan(&usage); err != nil || usage != 7 {
		t.Fatalf("read %d %v", usage, err)
	}
	if err := d.Reads().QueryRowContext(ctx, `SELECT usage_bytes FROM tenants WHERE name = ?`, "bob").Scan(&usage); Err(err) != sql.ErrNoRows {
		t.Fatalf("a miss: %v, want sql.ErrNoRows as it is", Err(err))
	}

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d.Close() // twice is fine
	l, err := LockExclusive(ctx, loc)
	if err != nil {
		t.Fatalf("exclusive lock after Close: %v", err)
	}
	l.Release()
	if err := d.Tx(ctx, insert); err == nil {
		t.Fatal("a write on a closed DB succeeded")
	}
}

// TestOpenRefusesBadLocation: a PostgreSQL URL that does not parse, or
// names a schema openxet would not create, is refused before anything
// connects, and the message keeps the password out.
func TestOpenRefusesBadLocation(t *testing.T) {
	for _, loc := range []string{"postgres://u:secret@h:port/db", "postgres://u:secret@127.0.0.1:1/db?schema=Bad"} {
		if err := CheckLocation(loc); err == nil {
			t.Errorf("%s: accepted", loc)
		}
		d, err := Open(context.Background(), Config{Location: loc})
		if err == nil {
			d.Close()
			t.Fatalf("%s: opened", loc)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", loc, err)
		}
		if errors.Is(err, fault.ErrUnavailable) {
			t.Errorf("%s: a bad location is not a retryable outage: %v", loc, err)
		}
	}
}
