package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/memblob"  // mem:// buckets (tests)
	_ "gocloud.dev/blob/s3blob"   // s3:// buckets
	"gocloud.dev/gcerrors"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// Config says where the index and the bucket are.
type Config struct {
	// IndexPath is the SQLite file of the index.
	IndexPath string
	// BucketURL is a gocloud.dev/blob URL (file://, mem://, s3://).
	BucketURL string
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
}

// Store is the bucket plus the index. It is safe for concurrent use; several
// processes may open the same index file and bucket.
type Store struct {
	cfg    Config
	now    func() time.Time
	db     *sql.DB
	bucket *blob.Bucket
	lock   *os.File

	xorbLocks [64]sync.Mutex
	layouts   *layoutCache

	closeOnce sync.Once
	closeErr  error
}

// New returns a Store that is not open yet; it does no I/O.
func New(cfg Config) *Store {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Store{cfg: cfg, now: now, layouts: newLayoutCache(4096)}
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
	lock, err := lockIndex(s.cfg.IndexPath, false)
	if err != nil {
		return err
	}
	s.lock = lock
	db, err := openDB(ctx, s.cfg.IndexPath)
	if err != nil {
		s.unlock()
		return err
	}
	s.db = db
	if err := s.openLifecycle(ctx); err != nil {
		db.Close()
		s.unlock()
		return err
	}
	b, err := OpenBucket(ctx, s.cfg.BucketURL)
	if err != nil {
		db.Close()
		s.unlock()
		return err
	}
	s.bucket = b
	return nil
}

// FileBucketURL is the URL of the file:// bucket in dir: created when
// absent, no metadata sidecar files, temporary files beside their targets
// (so a write is a rename within one file system).
func FileBucketURL(dir string) string {
	return "file://" + dir + "?create_dir=1&metadata=skip&no_tmp_dir=1"
}

// DirConfig is the layout of a data directory: the index at dir/index.db,
// the bucket at dir/bucket.
func DirConfig(dir string) Config {
	return Config{IndexPath: filepath.Join(dir, "index.db"), BucketURL: FileBucketURL(filepath.Join(dir, "bucket"))}
}

// OpenBucket opens a gocloud.dev/blob bucket URL.
func OpenBucket(ctx context.Context, bucketURL string) (*blob.Bucket, error) {
	if _, err := url.Parse(bucketURL); err != nil {
		return nil, fmt.Errorf("bucket %q: %w", bucketURL, err)
	}
	b, err := blob.OpenBucket(ctx, bucketURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket %q: %w", bucketURL, err)
	}
	return b, nil
}

func openDB(ctx context.Context, path string) (*sql.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("index directory: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate index %s: %w", path, err)
	}
	return db, nil
}

// lockIndex takes a shared (servers) or exclusive (reindex) advisory lock on
// the index's lock file.
func lockIndex(indexPath string, exclusive bool) (*os.File, error) {
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
	return f, nil
}

func (s *Store) unlock() {
	if s.lock != nil {
		syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		s.lock.Close()
		s.lock = nil
	}
}

// Close closes the index and the bucket. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.db != nil {
			// Fold the WAL back so the file is complete on its own.
			s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
			errs = append(errs, s.db.Close())
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
		return fmt.Errorf("index: %w", err)
	}
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if ok, err := s.bucket.IsAccessible(ctx); err != nil || !ok {
		if err == nil {
			err = errors.New("not accessible")
		}
		return fmt.Errorf("bucket: %w", err)
	}
	return nil
}

// Bucket returns the underlying bucket (for reindex and tools).
func (s *Store) Bucket() *blob.Bucket { return s.bucket }

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

// inTx runs fn in one immediate transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// listKeys returns every key under prefix, skipping temporary files.
func listKeys(ctx context.Context, b *blob.Bucket, prefix string) ([]string, error) {
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		if obj.IsDir || strings.HasSuffix(obj.Key, ".tmp") {
			continue
		}
		keys = append(keys, obj.Key)
	}
	return keys, nil
}
