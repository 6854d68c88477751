package objects

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Reading ranges of file:// objects: OpenFileRange (and so store's
// OpenXorbRange) opens the object's file itself instead of asking fileblob. fileblob's NewRangeReader stats the
// path, then opens the key's .attrs sidecar, which our buckets never write
// (FileBucketURL skips it), and only then opens the file: three path
// lookups for one read, one of them a failing one. On tmpfs a failing
// lookup is never cached, and each one waits for the directory's lock
// behind the uploads renaming objects into that directory. 320 reads
// opened at once spent 24 ms of the server's one CPU in those sidecar
// lookups (the trace is in commit 28bb4f0; BENCHMARKS.md, "Downloads").
// Here a read is one open and one seek.
//
// The key's path is the one listFileObjects walks (list.go): keys the
// store makes are plain, and for anything else (or a bucket URL with a
// prefix) the read goes through fileblob.

// fileRange is a range of a file:// object: the file, seeked to the range's
// start, read through an io.LimitedReader of its length. As exposes that
// LimitedReader, as fileblob's reader does, so that the server can hand the
// section to the socket with sendfile.
type fileRange struct {
	lr io.LimitedReader
	f  *os.File
}

func (r *fileRange) Read(p []byte) (int, error) { return r.lr.Read(p) }

func (r *fileRange) Close() error { return r.f.Close() }

// As sets *i to the section's *io.LimitedReader when i is an *io.Reader.
func (r *fileRange) As(i any) bool {
	p, ok := i.(*io.Reader)
	if ok {
		*p = &r.lr
	}
	return ok
}

// OpenFileRange opens length bytes from offset of the object under key in
// a file:// bucket (length < 0: to the end), or returns ok false when the
// bucket or the key is not one this package reads itself (the caller then
// reads through NewRangeReader). A missing object is ErrNotFound, a file
// that fails to open ErrUnavailable. As with fileblob, a range past the
// object's end reads short. The caller closes r.
func (bk *Bucket) OpenFileRange(key string, offset, length int64) (r io.ReadCloser, ok bool, err error) {
	if bk.dir == "" || !plainKey(key) {
		return nil, false, nil
	}
	f, err := os.Open(filepath.Join(bk.dir, filepath.FromSlash(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w: %w", key, ErrUnavailable, err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, true, fmt.Errorf("read %s: %w: %w", key, ErrUnavailable, err)
		}
	}
	if length < 0 {
		length = 1<<63 - 1
	}
	return &fileRange{lr: io.LimitedReader{R: f, N: length}, f: f}, true, nil
}
