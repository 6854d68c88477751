package accounts

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"openxet/store/index"
	"openxet/store/objects"
	"openxet/store/pgtest"
)

// engines runs fn once on SQLite and once on PostgreSQL (a throwaway
// cluster; skipped without one unless OPENXET_REQUIRE_PG=1), with newIndex
// making a fresh index location of that engine.
func engines(t *testing.T, fn func(t *testing.T, newIndex func() string)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, func() string { return filepath.Join(t.TempDir(), "index.db") })
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Start(t)
		fn(t, func() string { return srv.NewIndex(t) })
	})
}

// fileBucket is a file:// bucket in dir.
func fileBucket(dir string) string { return objects.FileBucketURL(filepath.Join(dir, "bucket")) }

// openAt opens the accounts of the index at loc and the bucket, closed
// when tb ends; now is the clock (nil: time.Now).
func openAt(tb testing.TB, loc, bucket string, now func() time.Time) (*Accounts, *index.DB, *objects.Bucket) {
	tb.Helper()
	ctx := context.Background()
	idx, err := index.Open(ctx, index.Config{Location: loc, LockCheck: -1})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := objects.Open(ctx, bucket, "")
	if err != nil {
		idx.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close(); idx.Close() })
	if now == nil {
		now = time.Now
	}
	return New(idx, b, now), idx, b
}

// mustOpen opens accounts on a SQLite index in dir and bucket.
func mustOpen(tb testing.TB, dir, bucket string) *Accounts {
	tb.Helper()
	a, _, _ := openAt(tb, filepath.Join(dir, "index.db"), bucket, nil)
	return a
}
