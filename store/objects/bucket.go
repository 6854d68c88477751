package objects

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/memblob"  // mem:// buckets (tests)
	_ "gocloud.dev/blob/s3blob"   // s3:// buckets
)

// Bucket is an open gocloud.dev/blob bucket with what openxet does
// differently for its schemes: one PutObject per S3 write (s3.go), direct
// I/O for large file:// objects (direct_linux.go), its own listing and
// range reads of file:// buckets (list.go, fileread.go), and a
// cross-process lock for create-if-absent file:// writes (Write). It is
// safe for concurrent use; several processes may open the same bucket.
// Close closes it.
//
// Errors of the methods that mirror gocloud's (ReadAll, Exists, Delete,
// WriteAll, NewReader, NewRangeReader, List, IsAccessible) are gocloud's, as
// they are: the caller tells an absent object with IsNotFound and marks
// the others with Err. The methods of its own (Write, Same, ListObjects,
// ListKeys, OpenFileRange) return errors marked already.
type Bucket struct {
	b *blob.Bucket
	// dir is the directory of a file:// bucket that the package lists and
	// reads itself (fileBucketDir), "" for other buckets.
	dir string
	s3  *s3Writer // writes of s3:// buckets (s3.go); nil for others

	// lock serializes create-if-absent object writes in file:// buckets
	// across processes (see Write); nil for other buckets.
	lock   *os.File
	lockMu sync.Mutex
	closed atomic.Bool
}

// FileBucketURL is the URL of the file:// bucket in dir: created when
// absent, no metadata sidecar files, temporary files beside their targets
// (so a write is a rename within one file system).
func FileBucketURL(dir string) string {
	return "file://" + dir + "?create_dir=1&metadata=skip&no_tmp_dir=1"
}

// Open opens a gocloud.dev/blob bucket URL (file://, mem://, s3://). For a
// file:// bucket, lockPath is the file (created when absent) whose lock
// makes create-if-absent writes atomic across the processes that open the
// bucket with the same lockPath; "" means none. Other buckets ignore it.
func Open(ctx context.Context, bucketURL, lockPath string) (*Bucket, error) {
	u, err := url.Parse(bucketURL)
	if err != nil {
		return nil, fmt.Errorf("bucket %q: %w", bucketURL, err)
	}
	bk := &Bucket{dir: fileBucketDir(bucketURL)}
	if u.Scheme == "file" && lockPath != "" {
		if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
			return nil, fmt.Errorf("object lock: %w", err)
		}
		if bk.lock, err = os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644); err != nil {
			return nil, fmt.Errorf("object lock: %w", err)
		}
	}
	open := bucketURL
	if u.Scheme == "s3" {
		open = withS3Defaults(u) // s3.go
	}
	if bk.b, err = blob.OpenBucket(ctx, open); err != nil {
		bk.Close()
		return nil, fmt.Errorf("open bucket %q: %w", bucketURL, err)
	}
	if bk.s3, err = newS3Writer(bk.b, bucketURL); err != nil {
		bk.Close()
		return nil, err
	}
	return bk, nil
}

// Close closes the bucket and its lock file. It is safe to call twice, and
// while other calls are under way: those and later ones fail with
// gocloud's closed-bucket error (or the closed lock file's), never panic.
func (bk *Bucket) Close() error {
	if bk.closed.Swap(true) {
		return nil
	}
	var errs []error
	if bk.b != nil {
		errs = append(errs, bk.b.Close())
	}
	if bk.lock != nil {
		bk.lockMu.Lock()
		errs = append(errs, bk.lock.Close())
		bk.lockMu.Unlock()
	}
	return errors.Join(errs...)
}

// ReadAll reads the object under key, as gocloud's Bucket.ReadAll.
func (bk *Bucket) ReadAll(ctx context.Context, key string) ([]byte, error) {
	return bk.b.ReadAll(ctx, key)
}

// Exists reports whether an object is under key, as gocloud's Bucket.Exists.
func (bk *Bucket) Exists(ctx context.Context, key string) (bool, error) {
	return bk.b.Exists(ctx, key)
}

// Delete deletes the object under key, as gocloud's Bucket.Delete (an
// absent object is an error IsNotFound reports).
func (bk *Bucket) Delete(ctx context.Context, key string) error {
	return bk.b.Delete(ctx, key)
}

// WriteAll writes data under key through gocloud's Bucket.WriteAll, which
// with nil opts sniffs the content type and hashes the body; Write is the
// store's way to write an object.
func (bk *Bucket) WriteAll(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	return bk.b.WriteAll(ctx, key, data, opts)
}

// NewReader opens the object under key, as gocloud's Bucket.NewReader. The
// caller closes it.
func (bk *Bucket) NewReader(ctx context.Context, key string, opts *blob.ReaderOptions) (*blob.Reader, error) {
	return bk.b.NewReader(ctx, key, opts)
}

// NewRangeReader opens length bytes from offset of the object under key
// (length < 0: to the end), as gocloud's Bucket.NewRangeReader. The caller
// closes it.
func (bk *Bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, opts *blob.ReaderOptions) (*blob.Reader, error) {
	return bk.b.NewRangeReader(ctx, key, offset, length, opts)
}

// List iterates over the objects gocloud lists (for tools and tests;
// ListObjects and ListKeys are the store's listings).
func (bk *Bucket) List(opts *blob.ListOptions) *blob.ListIterator { return bk.b.List(opts) }

// IsAccessible reports whether the bucket answers, as gocloud's
// Bucket.IsAccessible.
func (bk *Bucket) IsAccessible(ctx context.Context) (bool, error) { return bk.b.IsAccessible(ctx) }
