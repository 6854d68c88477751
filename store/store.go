package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"openxet/store/index"
	"openxet/store/objects"
)

// Config says where the index and the bucket are.
type Config struct {
	// IndexPath is the index: a SQLite file, or a postgres:// URL
	// (engine.go).
	IndexPath string
	// BucketURL is a gocloud.dev/blob URL (file://, mem://, s3://).
	BucketURL string
	// BusyTimeout bounds how long a call waits for the index: for SQLite's
	// write lock (held by another process) and for this process's write
	// connection. Past it the call fails with ErrUnavailable. Zero means
	// DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
	// LockCheck is how often a server checks that it still holds its
	// shared lock on a PostgreSQL index, and takes it again when its
	// session was lost (engine.go: checkIndexLock). Zero means
	// DefaultLockCheck; negative, never (tests run the check by hand).
	// SQLite's lock cannot be lost: nothing runs.
	LockCheck time.Duration
	// CheckpointEvery is how often a background checkpoint folds a SQLite
	// index's write-ahead log into the index file, on a connection of its
	// own, so that no request waits for one (engine.go). Zero means
	// DefaultCheckpointEvery; negative, none: a commit that finds the log
	// past SQLite's wal_autocheckpoint (1000 pages) checkpoints before it
	// returns, as SQLite does by default. PostgreSQL has nothing to do.
	CheckpointEvery time.Duration
	// Log receives what the store finds on its own, outside any call (a
	// lost index lock); nil discards it.
	Log *slog.Logger
}

// DefaultBusyTimeout is Config.BusyTimeout's default.
const DefaultBusyTimeout = 5 * time.Second

// readConns is the size of the pool of index connections that reads use.
// Writes have one connection of their own, so a writer waiting for the
// index's write lock never holds a connection a read needs.
const readConns = 8

// Store is the bucket plus the index. It is safe for concurrent use; several
// processes may open the same index file and bucket.
type Store struct {
	cfg    Config
	now    func() time.Time
	busy   time.Duration
	db     *sql.DB // reads
	wdb    *sql.DB // writes: one connection, transactions BEGIN IMMEDIATE
	bucket *objects.Bucket
	lock   indexLock
	pg     bool // the index is PostgreSQL (engine.go)
	log    *slog.Logger

	// lockHeld is whether this process holds its shared lock on the index;
	// writes fail while it does not (writable). lockLosses counts the
	// times it found it lost. lockCheck is Config.LockCheck with its
	// default; stopLock ends the check loop, which closes lockDone.
	lockHeld   atomic.Bool
	lockLosses atomic.Uint64
	lockCheck  time.Duration
	stopLock   context.CancelFunc
	lockDone   chan struct{}
	lockHook   func(lockState) // tests: called after each check

	// checkpointEvery is Config.CheckpointEvery with its default; cdb is
	// the checkpoints' connection (SQLite, when checkpointEvery > 0);
	// stopCheckpoints ends their loop, which closes checkpointsDone.
	// checkpointsByHand (tests) opens cdb but starts no loop.
	checkpointEvery   time.Duration
	cdb               *sql.DB
	stopCheckpoints   context.CancelFunc
	checkpointsDone   chan struct{}
	checkpointsByHand bool
	checkpoints       checkpointCounts

	xorbLocks [64]sync.Mutex
	layouts   *layoutCache

	deployment string // the deployment id (deployment.go)

	// hook, when set (by tests only), is called between the steps of a
	// write with the name of the step just done; an error stops the write
	// there, as a crash would, without any cleanup.
	hook func(step string) error

	closeOnce sync.Once
	closeErr  error
}

// New returns a Store that is not open yet; it does no I/O.
func New(cfg Config) *Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	lockCheck := cfg.LockCheck
	if lockCheck == 0 {
		lockCheck = DefaultLockCheck
	}
	checkpointEvery := cfg.CheckpointEvery
	if checkpointEvery == 0 {
		checkpointEvery = DefaultCheckpointEvery
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, now: now, busy: busy, pg: IsPostgres(cfg.IndexPath), log: log, lockCheck: lockCheck, checkpointEvery: checkpointEvery,
		layouts: newLayoutCache(4096)}
}

// Open opens (creating when absent) the index and the bucket and runs the
// index migrations. The process holds a shared lock on the index so that
// reindex can tell that a server is using it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s := New(cfg)
	if err := s.Open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open opens the index and the bucket; see the package function Open.
func (s *Store) Open(ctx context.Context) error {
	lock, err := lockIndex(ctx, s.cfg.IndexPath, false)
	if err != nil {
		return err
	}
	s.lock = lock
	s.lockHeld.Store(true)
	fail := func(err error) error {
		for _, db := range []*sql.DB{s.db, s.wdb, s.cdb} {
			if db != nil {
				db.Close()
			}
		}
		if s.bucket != nil {
			s.bucket.Close()
		}
		s.db, s.wdb, s.cdb, s.bucket = nil, nil, nil, nil
		s.unlock()
		return err
	}
	auto := 0
	if s.checkpointEvery > 0 {
		auto = walBackstopPages // checkpoints run in the background (engine.go)
	}
	if s.wdb, err = openDB(ctx, s.cfg.IndexPath, s.busy, true, auto); err != nil {
		return fail(err)
	}
	if s.db, err = openDB(ctx, s.cfg.IndexPath, s.busy, false, auto); err != nil {
		return fail(err)
	}
	if err := s.openLifecycle(ctx); err != nil {
		return fail(err)
	}
	lockPath, _ := objectLockPath(s.cfg)
	if s.bucket, err = objects.Open(ctx, s.cfg.BucketURL, lockPath); err != nil {
		return fail(err)
	}
	if err := s.openDeployment(ctx); err != nil {
		return fail(err)
	}
	if err := s.startCheckpoints(ctx); err != nil {
		return fail(err)
	}
	if _, ok := s.lock.(*pgLock); ok && s.lockCheck > 0 {
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		s.stopLock, s.lockDone = stop, make(chan struct{})
		go s.watchIndexLock(lctx, s.lockCheck, s.lockDone)
	}
	return nil
}

// IndexLockHeld reports whether this process holds its shared lock on the
// index, without which it refuses writes (ErrIndexLockLost). It is true
// from Open to Close, except on a PostgreSQL index between the check that
// found the lock lost and the one that took it again.
func (s *Store) IndexLockHeld() bool { return s.lockHeld.Load() }

// IndexLockLosses is how many times this process found its shared lock on
// a PostgreSQL index lost (its session ended), whether or not it could take
// it again at once.
func (s *Store) IndexLockLosses() uint64 { return s.lockLosses.Load() }

// writable is nil when this process may write: it holds its shared lock
// on the index, so no reindex is rebuilding the index beside it.
func (s *Store) writable() error {
	if s.lockHeld.Load() {
		return nil
	}
	return fmt.Errorf("%w (%w): this node refuses writes until it holds its shared lock on the index again", ErrIndexLockLost, ErrUnavailable)
}

// FileBucketURL is the URL of the file:// bucket in dir: created when
// absent, no metadata sidecar files, temporary files beside their targets
// (so a write is a rename within one file system). It is
// objects.FileBucketURL.
func FileBucketURL(dir string) string { return objects.FileBucketURL(dir) }

// DirConfig is the layout of a data directory: the index at dir/index.db,
// the bucket at dir/bucket.
func DirConfig(dir string) Config {
	return Config{IndexPath: filepath.Join(dir, "index.db"), BucketURL: FileBucketURL(filepath.Join(dir, "bucket"))}
}

// OpenBucket opens a gocloud.dev/blob bucket URL (for reindex and tools),
// without the cross-process lock of create-if-absent file:// writes. The
// caller closes it.
func OpenBucket(ctx context.Context, bucketURL string) (*objects.Bucket, error) {
	return objects.Open(ctx, bucketURL, "")
}

// openDB opens the index at path (a SQLite file or a postgres:// URL): for
// writes, on SQLite one connection whose transactions take the write lock
// when they begin (and the migrations run on it); else a pool of readConns
// for reads.
//
// autoCheckpoint is SQLite's wal_autocheckpoint of every connection: the
// pages of write-ahead log past which a commit checkpoints before it
// returns; 0 keeps SQLite's default (1000).
func openDB(ctx context.Context, path string, busy time.Duration, writes bool, autoCheckpoint int) (*sql.DB, error) {
	if IsPostgres(path) {
		return openPostgres(ctx, path, busy, writes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
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
	dsn := "file:" + path + "?" + q.Encode()
	db, err := index.OpenSQLite(dsn)
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	if !writes {
		db.SetMaxOpenConns(readConns)
		return db, nil
	}
	db.SetMaxOpenConns(1)
	if err := migrateSQLite(ctx, db, busy); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate index %s: %w", path, dbErr(err))
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
		err := index.Migrate(ctx, db, "")
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Since(start) > busy {
			return err
		}
		if err := backOff(ctx, attempt); err != nil {
			return err
		}
	}
}

// lockIndex takes a shared (servers) or exclusive (reindex) advisory lock on
// the index: on SQLite's lock file, or in PostgreSQL.
func lockIndex(ctx context.Context, indexPath string, exclusive bool) (indexLock, error) {
	if IsPostgres(indexPath) {
		return lockPostgres(ctx, indexPath, exclusive)
	}
	if err := os.MkdirAll(filepath.Dir(indexPath), 0o755); err != nil {
		return nil, fmt.Errorf("index directory: %w", err)
	}
	f, err := os.OpenFile(indexPath+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("index lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", indexPath, ErrIndexInUse)
		}
		return nil, fmt.Errorf("index lock: %w", err)
	}
	return fileLock{f}, nil
}

func (s *Store) unlock() {
	if s.lock != nil {
		s.lock.release()
		s.lock = nil
	}
}

// Close closes the index and the bucket. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.stopLock != nil {
			s.stopLock()
			<-s.lockDone
		}
		if s.stopCheckpoints != nil {
			s.stopCheckpoints()
			<-s.checkpointsDone
		}
		if s.cdb != nil {
			errs = append(errs, s.cdb.Close())
		}
		if s.db != nil {
			errs = append(errs, s.db.Close())
		}
		if s.wdb != nil {
			checkpoint(context.Background(), s.cfg.IndexPath, s.wdb)
			errs = append(errs, s.wdb.Close())
		}
		if s.bucket != nil {
			errs = append(errs, s.bucket.Close())
		}
		s.unlock()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// Ping checks that the index and the bucket answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("index: %w", dbErr(err))
	}
	var one int
	if err := s.queryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if ok, err := s.bucket.IsAccessible(ctx); err != nil || !ok {
		if err == nil {
			err = errors.New("not accessible")
		}
		return fmt.Errorf("bucket: %w", bucketErr(err))
	}
	return nil
}

// Bucket returns the underlying bucket (for reindex and tools).
func (s *Store) Bucket() *objects.Bucket { return s.bucket }

// step reports a finished step of a write to the test hook.
func (s *Store) step(name string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(name)
}

// isNotFound reports whether err is a bucket's "no object under the key".
func isNotFound(err error) bool { return objects.IsNotFound(err) }

// inTx runs fn in one immediate transaction on the write connection.
// Writers of this process queue for that connection, at most the busy
// timeout, then for SQLite's write lock, at most the busy timeout again;
// past either wait the error is ErrUnavailable.
//
// On PostgreSQL the transaction is SERIALIZABLE and runs again when a
// concurrent one wins (pgTx): fn must start from scratch each time.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.writable(); err != nil {
		return err
	}
	if s.pg {
		return s.pgTx(ctx, fn)
	}
	return s.txOnce(ctx, fn)
}

// exec runs one write statement as its own transaction (inTx): on
// PostgreSQL it runs again when a concurrent transaction wins, as every
// write must (two nodes starting at once both write the lifecycle epoch).
func (s *Store) exec(ctx context.Context, q string, args ...any) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	})
}

// txOnce runs fn in one transaction on a connection of the write pool,
// waiting for that connection at most the busy timeout.
func (s *Store) txOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	wait, cancel := context.WithTimeout(ctx, s.busy)
	conn, err := s.wdb.Conn(wait)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: index busy: no write connection within %v", ErrUnavailable, s.busy)
		}
		return fmt.Errorf("begin: %w", dbErr(err))
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", dbErr(err))
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return dbErr(err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", dbErr(err))
	}
	return nil
}

// inSnapshot runs fn in one read-only transaction on the read pool: every
// read in it sees the index as of one moment (on SQLite the WAL snapshot of
// its first read, on PostgreSQL REPEATABLE READ), whatever commits
// meanwhile. The transaction is rolled back; errors of fn come back
// through dbErr.
func (s *Store) inSnapshot(ctx context.Context, fn func(tx *sql.Tx) error) error {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.pg {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", dbErr(err))
	}
	defer tx.Rollback()
	return dbErr(fn(tx))
}

// row is a query's one row; its Scan marks errors that mean "the index
// cannot be read right now" with ErrUnavailable.
type row struct{ r *sql.Row }

func (r row) Scan(dest ...any) error { return dbErr(r.r.Scan(dest...)) }

// queryRow runs a read on the read pool.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) row {
	return row{s.db.QueryRowContext(ctx, query, args...)}
}

// lookupCtx is the context for a read of a few rows by key on a request's
// path (a file, its terms, a xorb's layout, a dedup entry): on SQLite, ctx
// without its cancellation. For a statement under a context that can end,
// database/sql and the SQLite driver each start a goroutine that watches
// it; on the one CPU of a pinned server those two goroutines made a lookup
// cost 26-32 µs instead of 17-20 (measured in commit 28c1bab), to be
// able to interrupt a read that ends in microseconds anyway. A context
// that has already ended is kept, so the read does not start. PostgreSQL
// keeps the context: its reads cross a network that can stall. Never for
// scans or aggregates, which can run long.
func (s *Store) lookupCtx(ctx context.Context) context.Context {
	if s.pg || ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// query runs a read on the read pool; the caller passes the errors of
// rows.Scan and rows.Err through dbErr.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	return rows, dbErr(err)
}
