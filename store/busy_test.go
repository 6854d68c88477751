package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// holdWriteLock: another connection (as another process's
// writer would) takes the index's write lock until release is called.
func holdWriteLock(t *testing.T, indexPath string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+indexPath)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

func openWithBusyTimeout(t *testing.T, dir string, busy time.Duration) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir), BusyTimeout: busy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestBusyIndex: while another process holds the index's write lock,
// writers of this process wait without taking the connections reads need,
// so reads still answer; a writer that waits past the busy timeout fails
// with ErrUnavailable and changes nothing in the index.
func TestBusyIndex(t *testing.T) {
	sqliteOnly(t) // PostgreSQL: TestPostgresDownIsUnavailable, lock_timeout
	dir := t.TempDir()
	ctx := context.Background()
	patient := openWithBusyTimeout(t, dir, time.Hour)
	impatient := openWithBusyTimeout(t, dir, time.Millisecond)
	f := putFile(t, patient, "alice", Unlimited, chunksOf(5, 2, 3000))
	before := dump(t, patient)

	release := holdWriteLock(t, testIndex(t, dir))
	const writers = 2 * readConns
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			errs <- patient.PutTenantLimits(ctx, fmt.Sprintf("waiter%d", i), []byte(`{}`), nil)
		}()
	}
	// Wait until every writer waits: for SQLite's lock or for a connection.
	for {
		st := patient.wdb.Stats()
		if st.InUse == st.MaxOpenConnections && st.WaitCount >= int64(writers-st.MaxOpenConnections) {
			break
		}
		runtime.Gosched()
	}

	// Reads answer. The deadline only keeps a starved read from hanging
	// the test; a read that works takes milliseconds.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range 2 * readConns {
		if u, err := patient.Usage(rctx, "alice"); err != nil || u == 0 {
			t.Fatalf("read %d while writers wait: usage %d, %v", i, u, err)
		}
	}
	if _, err := patient.File(rctx, "alice", f.Hash); err != nil {
		t.Fatalf("file while writers wait: %v", err)
	}
	if err := patient.Ping(rctx); err != nil {
		t.Fatalf("ping while writers wait: %v", err)
	}

	// A write past its busy timeout: ErrUnavailable, nothing changed.
	err := impatient.PutTenantLimits(ctx, "bob", []byte(`{"quota_bytes":5}`), ptr(int64(5)))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write past the busy timeout: %v, want ErrUnavailable", err)
	}
	body, info := xet.BuildXorb(chunksOf(6, 2, 3000), false)
	_, err = impatient.PutXorb(ctx, "bob", info, body[:info.StreamLen], Unlimited)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("xorb write past the busy timeout: %v, want ErrUnavailable", err)
	}
	if ok, _ := impatient.Bucket().Exists(ctx, xorbOwnerKey(info.Hash.String(), "bob")); ok {
		t.Fatal("a xorb write that failed its transaction left its owner record")
	}

	release()
	for range writers {
		if err := <-errs; err != nil {
			t.Fatalf("waiting writer: %v", err)
		}
	}
	after := dump(t, patient)
	if len(after["tenants"]) != len(before["tenants"])+writers {
		t.Fatalf("tenants after the lock: %d, want %d", len(after["tenants"]), len(before["tenants"])+writers)
	}
	for _, row := range after["tenants"] {
		if strings.HasPrefix(row, "name=bob ") {
			t.Fatalf("a refused write changed the index: %s", row)
		}
	}
}

// TestBucketFailureIsUnavailable: a bucket that fails under a write or a
// read (here a file:// bucket whose xorb directory is a regular file) is
// ErrUnavailable, and the failed write changed nothing in the index.
func TestBucketFailureIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := mustOpen(t, dir, fileBucket(dir))
	body, info := xet.BuildXorb(chunksOf(7, 2, 3000), false)
	if err := os.MkdirAll(filepath.Join(dir, "bucket", "xorbs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bucket", "xorbs", "default"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write into a failing bucket: %v, want ErrUnavailable", err)
	}
	if diff := cmp.Diff(before, dump(t, s)); diff != "" {
		t.Fatalf("a failed write changed the index:\n%s", diff)
	}
	if _, err := s.OpenXorbRange(ctx, info.Hash, 0, 10); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read from a failing bucket: %v, want ErrUnavailable", err)
	}
}
