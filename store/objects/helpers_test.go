package objects

import (
	"context"
	"path/filepath"
	"testing"
)

// What the store writes, as its tests name it.
const (
	typeBinary       = "application/octet-stream"
	typeJSON         = "application/json"
	prefixXorbs      = "xorbs/default/"
	prefixShards     = "shards/"
	prefixXorbOwners = "xorb-owners/"
)

// mustOpen opens the bucket at bucketURL (lockPath as Open takes it), closed
// when the test ends.
func mustOpen(tb testing.TB, bucketURL, lockPath string) *Bucket {
	tb.Helper()
	b, err := Open(context.Background(), bucketURL, lockPath)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// fileBucket is the URL of the file:// bucket dir/bucket, the layout of a
// data directory.
func fileBucket(dir string) string { return FileBucketURL(filepath.Join(dir, "bucket")) }

// lockBeside is the object lock path of the data directory dir, as store
// passes it for an index dir/index.db.
func lockBeside(dir string) string { return filepath.Join(dir, "index.db.objects.lock") }
