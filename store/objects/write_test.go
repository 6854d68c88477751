package objects

import (
	"errors"
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
