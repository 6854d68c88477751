package objects

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// TestObjectLockAcrossStores: the lock that makes create-if-absent atomic
// in file:// buckets is exclusive across stores (processes) sharing the
// index, not only within one: two buckets opened with the same lock path.
func TestObjectLockAcrossStores(t *testing.T) {
	dir := t.TempDir()
	p1, p2 := mustOpen(t, fileBucket(dir), lockBeside(dir)), mustOpen(t, fileBucket(dir), lockBeside(dir))
	unlock, err := p1.lockObjects()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(p2.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("second process took the object lock while the first held it: %v", err)
	}
	unlock()
	unlock2, err := p2.lockObjects()
	if err != nil {
		t.Fatal(err)
	}
	unlock2()
	mem := mustOpen(t, "mem://", lockBeside(t.TempDir()))
	if mem.lock != nil {
		t.Fatal("a mem:// store opened an object lock file")
	}
}

// TestClosedBucketFails: a call on a bucket closed under it (a background
// pull outliving its server) is an error, never a panic, and Close twice
// is fine.
func TestClosedBucketFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bk, err := Open(ctx, FileBucketURL(dir), filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bk.Write(ctx, "a", []byte("x"), "", true); err != nil {
		t.Fatal(err)
	}
	if err := bk.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bk.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := bk.Write(ctx, "b", []byte("x"), "", true); err == nil {
		t.Error("Write on a closed bucket succeeded")
	}
	if _, err := bk.Write(ctx, "c", []byte("x"), "", false); err == nil {
		t.Error("overwriting Write on a closed bucket succeeded")
	}
	if _, err := bk.ReadAll(ctx, "a"); err == nil {
		t.Error("ReadAll on a closed bucket succeeded")
	}
	if _, err := bk.Exists(ctx, "a"); err == nil {
		t.Error("Exists on a closed bucket succeeded")
	}
}
