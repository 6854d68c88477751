package index

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// ReadConns is the size of the pool of SQLite connections that reads use.
// Writes have one connection of their own, so a writer waiting for the
// index's write lock never holds a connection a read needs.
const ReadConns = 8

// OpenWriter opens the write pool of the index at loc (creating a SQLite
// file when absent) and runs the migrations on it, without the lock, the
// read pool or the background work of a DB: for reindex, which builds a
// scratch index and compares it with the live one. The caller closes it.
func OpenWriter(ctx context.Context, loc string) (*sql.DB, error) {
	return openPool(ctx, loc, DefaultBusyTimeout, true, 0)
}

// openPool opens the index at loc (a SQLite file or a postgres:// URL):
// for writes, on SQLite one connection whose transactions take the write
// lock when they begin (and the migrations run on it); else a pool of
// ReadConns for reads.
//
// autoCheckpoint is SQLite's wal_autocheckpoint of every connection: the
// pages of write-ahead log past which a commit checkpoints before it
// returns; 0 keeps SQLite's default (1000).
func openPool(ctx context.Context, loc string, busy time.Duration, writes bool, autoCheckpoint int) (*sql.DB, error) {
	if IsPostgres(loc) {
		return openPostgres(ctx, loc, busy, writes)
	}
	if err := os.MkdirAll(filepath.Dir(loc), 0o755); err != nil {
		return nil, fmt.Errorf("index directory: %w", err)
	}
	q := url.Values{}
	// The pragmas run in this order when a connection opens: busy_timeout
	// first, so that switching to WAL, which locks the file, waits for
	// another process opening it at the same time instead of failing at
	// once with SQLITE_BUSY.
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", max(busy.Milliseconds(), 1)))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	if autoCheckpoint > 0 {
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", autoCheckpoint))
	}
	if writes {
		q.Set("_txlock", "immediate")
	}
	dsn := "file:" + loc + "?" + q.Encode()
	db, err := OpenSQLite(dsn)
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", loc, err)
	}
	if !writes {
		db.SetMaxOpenConns(ReadConns)
		return db, nil
	}
	db.SetMaxOpenConns(1)
	if err := migrateSQLite(ctx, db, busy); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate index %s: %w", loc, Err(err))
	}
	return db, nil
}

// migrateSQLite runs the migrations on a new SQLite write pool, again
// while SQLite answers SQLITE_BUSY, within the busy timeout. Opening a
// connection answers that at once, without waiting in the busy handler,
// while another process's last connection to the file is closing (it holds
// the file exclusively to checkpoint and remove the WAL) or while a
// connection recovers the WAL after a crash: a server starting as another
// process stops.
func migrateSQLite(ctx context.Context, db *sql.DB, busy time.Duration) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := Migrate(ctx, db, "")
		if !sqliteBusy(err) || time.Since(start) > busy {
			return err
		}
		if err := backOff(ctx, attempt); err != nil {
			return err
		}
	}
}
