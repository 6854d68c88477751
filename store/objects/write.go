package objects

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// directMinBytes is the size from which Write writes a file://
// object with O_DIRECT (writeDirect): xorbs, not records.
const directMinBytes = 1 << 20

// Write is the one way the store writes an object: data under key,
// replacing any object there, or with ifAbsent only when the key is free
// (written reports which; an object already there is left as it is).
//
// It writes through a Writer with the content type given, so gocloud
// neither sniffs the type nor hashes the body: Bucket.WriteAll would
// MD5-hash it to set ContentMD5 and the Writer would hash it again to
// check it, and fileblob would hash it a third time for its .attrs
// sidecar (our file:// URL skips the sidecar, see FileBucketURL). What
// each bucket does for integrity instead:
//   - file://: nothing to check in flight; the object appears by rename
//     only when complete.
//   - s3://: written with one PutObject reading data in place (s3.go; keys
//     gocloud would escape go through its writer); the AWS SDK's default
//     request checksum (CRC32, unless the bucket URL sets
//     request_checksum_calculation=when_required) is checked by the
//     service.
//   - mem:// (tests): memblob computes its own MD5 at close.
//
// ifAbsent is atomic in S3 (If-None-Match: *; a 409 from a concurrent
// conditional write is retried) and in memblob. fileblob
// checks and renames under a lock of its own process only, so for file://
// buckets the check and the rename also hold an exclusive lock on the file
// Open was given (package store: IndexPath+".objects.lock", which every
// process opening the index opens).
func (bk *Bucket) Write(ctx context.Context, key string, data []byte, contentType string, ifAbsent bool) (written bool, err error) {
	return bk.WriteCRC(ctx, key, data, contentType, ifAbsent, nil)
}

// WriteCRC is Write for data whose CRC-32 (IEEE) the caller
// already has (crc nil: it has not): an S3 write sends it as the request
// checksum instead of the SDK computing it in a pass of its own. Other
// buckets ignore it.
func (bk *Bucket) WriteCRC(ctx context.Context, key string, data []byte, contentType string, ifAbsent bool, crc *uint32) (written bool, err error) {
	if bk.s3 != nil && plainKey(key) {
		return bk.s3.put(ctx, key, data, contentType, ifAbsent, crc) // s3.go: one PutObject, no copy
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := &blob.WriterOptions{ContentType: contentType, IfNotExist: ifAbsent}
	var f *os.File // file:// buckets: the temporary file the object is written to
	if len(data) >= directMinBytes {
		opts.BeforeWrite = func(as func(any) bool) error {
			as(&f)
			return nil
		}
	}
	w, err := bk.b.NewWriter(ctx, key, opts)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", key, Err(err))
	}
	direct := false
	if f != nil {
		direct, err = writeDirect(f, data)
	}
	if !direct {
		_, err = w.Write(data)
	}
	if err != nil {
		cancel() // abort: Close must not store a partial object
		w.Close()
		return false, fmt.Errorf("write %s: %w", key, Err(err))
	}
	if ifAbsent {
		unlock, err := bk.lockObjects()
		if err != nil {
			cancel()
			w.Close()
			return false, err
		}
		defer unlock()
	}
	if err := w.Close(); err != nil {
		if ifAbsent && gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return false, nil
		}
		return false, fmt.Errorf("write %s: %w", key, Err(err))
	}
	return true, nil
}

// lockObjects takes the cross-process lock of file:// buckets (a no-op for
// other buckets). It is held for a check and a rename, microseconds.
func (bk *Bucket) lockObjects() (unlock func(), err error) {
	if bk.lock == nil {
		return func() {}, nil
	}
	// flock is per open file: the mutex keeps two goroutines of this
	// process from sharing it.
	bk.lockMu.Lock()
	fd := int(bk.lock.Fd())
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		bk.lockMu.Unlock()
		return nil, fmt.Errorf("%w: object lock: %w", ErrUnavailable, err)
	}
	return func() {
		syscall.Flock(fd, syscall.LOCK_UN)
		bk.lockMu.Unlock()
	}, nil
}

// Same reports whether the object at key holds exactly data, reading
// it in pieces.
func (bk *Bucket) Same(ctx context.Context, key string, data []byte) (bool, error) {
	r, err := bk.b.NewReader(ctx, key, nil)
	if err != nil {
		return false, Err(err)
	}
	defer r.Close()
	if r.Size() != int64(len(data)) {
		return false, nil
	}
	buf := make([]byte, 256<<10)
	for off := 0; off < len(data); {
		n, err := io.ReadFull(r, buf[:min(len(buf), len(data)-off)])
		if err != nil {
			return false, Err(err)
		}
		if !bytes.Equal(buf[:n], data[off:off+n]) {
			return false, nil
		}
		off += n
	}
	return true, nil
}
