package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"openxet/store/fault"
)

// Config says where an index is and how a DB waits for it.
type Config struct {
	// Location is a SQLite file or a postgres:// URL.
	Location string
	// Busy bounds how long a call waits for the index: for SQLite's write
	// lock (held by another process), for this process's write connection
	// and for a PostgreSQL row lock. Past it the call fails with
	// fault.ErrUnavailable. Zero means DefaultBusyTimeout.
	Busy time.Duration
	// LockCheck is how often a server checks that it still holds its
	// shared lock on a PostgreSQL index, and takes it again when its
	// session was lost (CheckLock). Zero means DefaultLockCheck; negative,
	// never (tests run the check by hand). SQLite's lock cannot be lost:
	// nothing runs.
	LockCheck time.Duration
	// CheckpointEvery is how often a background checkpoint folds a SQLite
	// index's write-ahead log into the index file, on a connection of its
	// own, so that no request waits for one (checkpoint.go). Zero means
	// DefaultCheckpointEvery; negative, none: a commit that finds the log
	// past SQLite's wal_autocheckpoint (1000 pages) checkpoints before it
	// returns, as SQLite does by default. PostgreSQL has nothing to do.
	CheckpointEvery time.Duration
	// Log receives what the DB finds on its own, outside any call (a lost
	// index lock, a slow checkpoint); nil discards it.
	Log *slog.Logger

	// CheckpointsByHand (tests) opens the checkpoint connection but starts
	// no loop: the test calls Checkpoint.
	CheckpointsByHand bool
	// LockHook (tests) is called after each CheckLock with what it found.
	LockHook func(LockState)
}

// DB is an open index: a pool of connections for reads, one of its own for
// writes (one connection on SQLite, whose transactions take the write lock
// when they begin), this process's shared lock on the index and the
// background work that keeps both (checkpoints, the lock check). It is
// safe for concurrent use.
type DB struct {
	cfg             Config
	busy            time.Duration
	lockCheck       time.Duration
	checkpointEvery time.Duration
	pg              bool
	log             *slog.Logger

	read  *sql.DB // reads
	write *sql.DB // writes: on SQLite one connection, transactions BEGIN IMMEDIATE
	cdb   *sql.DB // the background checkpoints' connection (SQLite)
	lock  Lock

	// lockHeld is whether this process holds its shared lock on the index;
	// writes fail while it does not (Writable). lockLosses counts the
	// times it found it lost. stopLock ends the check loop, which closes
	// lockDone.
	lockHeld   atomic.Bool
	lockLosses atomic.Uint64
	unanswered atomic.Bool // the last CheckLock found the lock's session not answering
	stopLock   context.CancelFunc
	lockDone   chan struct{}

	stopCheckpoints context.CancelFunc
	checkpointsDone chan struct{}
	checkpoints     checkpointCounts

	closeOnce sync.Once
	closeErr  error
}

// Open takes this process's shared lock on the index (ErrInUse while a
// reindex holds it), opens the write pool and runs the migrations on it,
// opens the read pool, and starts the background checkpoints (SQLite) and
// the lock check (PostgreSQL). On an error nothing stays open.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	d := &DB{cfg: cfg, busy: cfg.Busy, lockCheck: cfg.LockCheck, checkpointEvery: cfg.CheckpointEvery, pg: IsPostgres(cfg.Location), log: cfg.Log}
	if d.busy <= 0 {
		d.busy = DefaultBusyTimeout
	}
	if d.lockCheck == 0 {
		d.lockCheck = DefaultLockCheck
	}
	if d.checkpointEvery == 0 {
		d.checkpointEvery = DefaultCheckpointEvery
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if err := d.open(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *DB) open(ctx context.Context) error {
	l, err := lock(ctx, d.cfg.Location, false)
	if err != nil {
		return err
	}
	d.lock = l
	d.lockHeld.Store(true)
	auto := 0
	if d.checkpointEvery > 0 {
		auto = walBackstopPages // checkpoints run in the background (checkpoint.go)
	}
	if d.write, err = openPool(ctx, d.cfg.Location, d.busy, true, auto); err != nil {
		return err
	}
	if d.read, err = openPool(ctx, d.cfg.Location, d.busy, false, auto); err != nil {
		return err
	}
	if err := d.startCheckpoints(ctx); err != nil {
		return err
	}
	if _, ok := d.lock.(*pgLock); ok && d.lockCheck > 0 {
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		d.stopLock, d.lockDone = stop, make(chan struct{})
		go every(lctx, d.lockCheck, d.lockDone, func() { d.CheckLock(lctx) })
	}
	return nil
}

// Close stops the background work, closes the pools (folding a SQLite
// index's log into its file first) and releases the lock. It is safe to
// call twice.
func (d *DB) Close() error {
	d.closeOnce.Do(func() {
		var errs []error
		if d.stopLock != nil {
			d.stopLock()
			<-d.lockDone
		}
		if d.stopCheckpoints != nil {
			d.stopCheckpoints()
			<-d.checkpointsDone
		}
		if d.cdb != nil {
			errs = append(errs, d.cdb.Close())
		}
		if d.read != nil {
			errs = append(errs, d.read.Close())
		}
		if d.write != nil {
			Fold(context.Background(), d.cfg.Location, d.write)
			errs = append(errs, d.write.Close())
		}
		if d.lock != nil {
			d.lock.Release()
		}
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// Reads is the pool that reads use.
func (d *DB) Reads() *sql.DB { return d.read }

// Writes is the write pool: on SQLite one connection whose transactions
// take the write lock when they begin. Writes go through Tx; tests and
// tools that must hold it by hand use it directly.
func (d *DB) Writes() *sql.DB { return d.write }

// Postgres reports whether the index is PostgreSQL.
func (d *DB) Postgres() bool { return d.pg }

// LockHeld reports whether this process holds its shared lock on the
// index, without which it refuses writes (ErrLockLost). It is true from
// Open to Close, except on a PostgreSQL index between the check that found
// the lock lost and the one that took it again.
func (d *DB) LockHeld() bool { return d.lockHeld.Load() }

// LockLosses is how many times this process found its shared lock on a
// PostgreSQL index lost (its session ended), whether or not it could take
// it again at once.
func (d *DB) LockLosses() uint64 { return d.lockLosses.Load() }

// Writable is nil when this process may write: it holds its shared lock on
// the index, so no reindex is rebuilding the index beside it.
func (d *DB) Writable() error {
	if d.lockHeld.Load() {
		return nil
	}
	return fmt.Errorf("%w (%w): this node refuses writes until it holds its shared lock on the index again", ErrLockLost, fault.ErrUnavailable)
}

// Tx runs fn in one immediate transaction on the write connection.
// Writers of this process queue for that connection, at most the busy
// timeout, then for SQLite's write lock, at most the busy timeout again;
// past either wait the error is fault.ErrUnavailable. Errors come back
// through Err.
//
// On PostgreSQL the transaction is SERIALIZABLE and runs again when a
// concurrent one wins: fn must start from scratch each time.
func (d *DB) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := d.Writable(); err != nil {
		return err
	}
	if d.pg {
		return d.retrying(ctx, func() error { return d.TxOnce(ctx, fn) })
	}
	return d.TxOnce(ctx, fn)
}

// TxOnce runs fn in one transaction on a connection of the write pool,
// waiting for that connection at most the busy timeout, and never again:
// for callers that retry on their own terms.
func (d *DB) TxOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	conn, err := d.writeConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", Err(err))
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return Err(err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", Err(err))
	}
	return nil
}

// writeConn is a connection of the write pool, waited for at most the busy
// timeout.
func (d *DB) writeConn(ctx context.Context) (*sql.Conn, error) {
	wait, cancel := context.WithTimeout(ctx, d.busy)
	conn, err := d.write.Conn(wait)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: index busy: no write connection within %v", fault.ErrUnavailable, d.busy)
		}
		return nil, fmt.Errorf("begin: %w", Err(err))
	}
	return conn, nil
}

// Statement runs fn, one statement that is its own transaction, on a
// connection of the write pool (waiting for one at most the busy timeout),
// and on PostgreSQL again while a concurrent transaction wins, as Tx does:
// one round trip where Tx makes at least three (BEGIN, the statements,
// COMMIT). fn's error comes back through Err.
func (d *DB) Statement(ctx context.Context, fn func(conn *sql.Conn) error) error {
	if err := d.Writable(); err != nil {
		return err
	}
	once := func() error {
		conn, err := d.writeConn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		return Err(fn(conn))
	}
	if !d.pg {
		return once()
	}
	return d.retrying(ctx, once)
}

// Snapshot runs fn in one read-only transaction on the read pool: every
// read in it sees the index as of one moment (on SQLite the WAL snapshot of
// its first read, on PostgreSQL REPEATABLE READ), whatever commits
// meanwhile. The transaction is rolled back; errors of fn come back
// through Err.
func (d *DB) Snapshot(ctx context.Context, fn func(tx *sql.Tx) error) error {
	opts := &sql.TxOptions{ReadOnly: true}
	if d.pg {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := d.read.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", Err(err))
	}
	defer tx.Rollback()
	return Err(fn(tx))
}

// LookupCtx is the context for a read of a few rows by key on a request's
// path (a file, its terms, a xorb's layout, a dedup entry): on SQLite, ctx
// without its cancellation. For a statement under a context that can end,
// database/sql and the SQLite driver each start a goroutine that watches
// it; on the one CPU of a pinned server those two goroutines made a lookup
// cost 26-32 µs instead of 17-20 (measured in commit 28c1bab), to be
// able to interrupt a read that ends in microseconds anyway. A context
// that has already ended is kept, so the read does not start. PostgreSQL
// keeps the context: its reads cross a network that can stall. Never for
// scans or aggregates, which can run long.
func (d *DB) LookupCtx(ctx context.Context) context.Context {
	if d.pg || ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
