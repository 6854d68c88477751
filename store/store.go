package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"openxet/store/accounts"
	"openxet/store/index"
	"openxet/store/objects"
)

// Config says where the index and the bucket are.
type Config struct {
	// IndexPath is the index: a SQLite file, or a postgres:// URL
	// (package store/index).
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
	// session was lost (index.DB.CheckLock). Zero means
	// DefaultLockCheck; negative, never (tests run the check by hand).
	// SQLite's lock cannot be lost: nothing runs.
	LockCheck time.Duration
	// CheckpointEvery is how often a background checkpoint folds a SQLite
	// index's write-ahead log into the index file, on a connection of its
	// own, so that no request waits for one (package store/index). Zero means
	// DefaultCheckpointEvery; negative, none: a commit that finds the log
	// past SQLite's wal_autocheckpoint (1000 pages) checkpoints before it
	// returns, as SQLite does by default. PostgreSQL has nothing to do.
	CheckpointEvery time.Duration
	// Log receives what the store finds on its own, outside any call (a
	// lost index lock); nil discards it.
	Log *slog.Logger
}

// DefaultBusyTimeout is Config.BusyTimeout's default (index.DefaultBusyTimeout).
const DefaultBusyTimeout = index.DefaultBusyTimeout

// readConns is the size of the pool of SQLite index connections that reads
// use (index.DB.Reads); writes have one connection of their own.
const readConns = index.ReadConns

// Store is the bucket plus the index. It is safe for concurrent use; several
// processes may open the same index file and bucket.
type Store struct {
	// Accounts is the accounts layer (tenants, credentials, the signing
	// key): its methods are the Store's. Set by Open.
	*accounts.Accounts

	cfg    Config
	now    func() time.Time
	idx    *index.DB // the index's engine: pools, transactions, lock, checkpoints
	db     *sql.DB   // idx.Reads()
	wdb    *sql.DB   // idx.Writes()
	bucket *objects.Bucket
	pg     bool // the index is PostgreSQL
	log    *slog.Logger

	// checkpointsByHand and lockHook are index.Config's test hooks
	// (CheckpointsByHand, LockHook), set by tests between New and Open.
	checkpointsByHand bool
	lockHook          func(index.LockState)

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
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, now: now, pg: IsPostgres(cfg.IndexPath), log: log, layouts: newLayoutCache(4096)}
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
	idx, err := index.Open(ctx, index.Config{Location: s.cfg.IndexPath, Busy: s.cfg.BusyTimeout, LockCheck: s.cfg.LockCheck,
		CheckpointEvery: s.cfg.CheckpointEvery, Log: s.log, CheckpointsByHand: s.checkpointsByHand, LockHook: s.lockHook})
	if err != nil {
		return err
	}
	s.idx, s.db, s.wdb = idx, idx.Reads(), idx.Writes()
	fail := func(err error) error {
		if s.bucket != nil {
			s.bucket.Close()
		}
		idx.Close()
		s.idx, s.db, s.wdb, s.bucket, s.Accounts = nil, nil, nil, nil, nil
		return err
	}
	if err := s.openLifecycle(ctx); err != nil {
		return fail(err)
	}
	lockPath, _ := objectLockPath(s.cfg)
	if s.bucket, err = objects.Open(ctx, s.cfg.BucketURL, lockPath); err != nil {
		return fail(err)
	}
	s.Accounts = accounts.New(idx, s.bucket, s.now)
	if err := s.openDeployment(ctx); err != nil {
		return fail(err)
	}
	if err := s.runUpgrades(ctx); err != nil {
		return fail(fmt.Errorf("upgrade the index: %w", err))
	}
	return nil
}

// IndexLockHeld reports whether this process holds its shared lock on the
// index, without which it refuses writes (ErrIndexLockLost): index.DB's
// LockHeld.
func (s *Store) IndexLockHeld() bool { return s.idx.LockHeld() }

// IndexLockLosses is how many times this process found its shared lock on
// a PostgreSQL index lost: index.DB's LockLosses.
func (s *Store) IndexLockLosses() uint64 { return s.idx.LockLosses() }

// writable is nil when this process may write: it holds its shared lock
// on the index (index.DB.Writable).
func (s *Store) writable() error { return s.idx.Writable() }

// CheckpointStats reports the background checkpoints of a SQLite index so
// far: index.DB's CheckpointStats.
func (s *Store) CheckpointStats() CheckpointStats { return s.idx.CheckpointStats() }

// objectLockPath is the file that serializes create-if-absent writes to
// a file:// bucket across processes: beside a SQLite index, or beside the
// bucket's directory when the index is elsewhere.
func objectLockPath(cfg Config) (string, bool) {
	u, err := url.Parse(cfg.BucketURL)
	if err != nil || u.Scheme != "file" {
		return "", false
	}
	if !IsPostgres(cfg.IndexPath) {
		return cfg.IndexPath + ".objects.lock", true
	}
	return filepath.Clean(u.Path) + ".objects.lock", true
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

// Close closes the index and the bucket. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.idx != nil {
			errs = append(errs, s.idx.Close())
		}
		if s.bucket != nil {
			errs = append(errs, s.bucket.Close())
		}
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

// inTx runs fn in one write transaction of the index (index.DB.Tx: on
// PostgreSQL SERIALIZABLE and run again when a concurrent one wins, so fn
// must start from scratch each time); errors come back through dbErr.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return dbErr(s.idx.Tx(ctx, fn))
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

// inSnapshot runs fn in one read-only transaction that sees the index as
// of one moment (index.DB.Snapshot).
func (s *Store) inSnapshot(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return dbErr(s.idx.Snapshot(ctx, fn))
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
// path (index.DB.LookupCtx: on SQLite, ctx without its cancellation).
func (s *Store) lookupCtx(ctx context.Context) context.Context { return s.idx.LookupCtx(ctx) }

// query runs a read on the read pool; the caller passes the errors of
// rows.Scan and rows.Err through dbErr.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	return rows, dbErr(err)
}
