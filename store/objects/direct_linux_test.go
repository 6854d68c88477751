//go:build linux

package objects

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLargeObjectsBypassThePageCache: a file:// object of directMinBytes
// or more is written with O_DIRECT, from the caller's memory to the file
// without a copy into the page cache (on a VM every new page-cache page
// is memory the host must back on first touch, which cost the server more
// CPU per uploaded GiB than hashing it). After the write none of its
// aligned pages are cached; the object reads back byte for byte, the tail
// that is not a whole page included. A small object is written the
// ordinary way.
func TestLargeObjectsBypassThePageCache(t *testing.T) {
	dir := t.TempDir()
	if !supportsDirect(t, dir) {
		t.Skipf("the file system of %s refuses O_DIRECT", dir)
	}
	s := mustOpen(t, FileBucketURL(filepath.Join(dir, "bucket")), lockBeside(dir))
	ctx := context.Background()
	// A page-aligned buffer, as the server's pooled body buffers are.
	data := alignedBytes(directMinBytes + 3*directAlign + 100)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, tc := range []struct {
		name        string
		data        []byte
		wantCached  func(cached, pages int) bool
		description string
	}{
		{"large", data, func(cached, pages int) bool { return cached <= 1 }, "at most the tail's page"},
		{"small", data[:directMinBytes-directAlign], func(cached, pages int) bool { return cached == pages }, "every page (written through the cache)"},
	} {
		key := "xorbs/default/" + tc.name
		if _, err := s.Write(ctx, key, tc.data, typeBinary, true); err != nil {
			t.Fatal(err)
		}
		cached, pages := residentPages(t, filepath.Join(dir, "bucket", key))
		if !tc.wantCached(cached, pages) {
			t.Errorf("%s object: %d of its %d pages are in the page cache right after the write; want %s", tc.name, cached, pages, tc.description)
		}
		got, err := s.ReadAll(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tc.data) {
			t.Fatalf("%s: read back %d bytes that differ from the %d written", tc.name, len(got), len(tc.data))
		}
	}
}

// supportsDirect reports whether dir's file system takes O_DIRECT.
func supportsDirect(t *testing.T, dir string) bool {
	fd, err := unix.Open(filepath.Join(dir, "direct-probe"), unix.O_CREAT|unix.O_WRONLY|unix.O_DIRECT, 0o600)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// alignedBytes is n bytes starting at a page boundary.
func alignedBytes(n int) []byte {
	b := make([]byte, n+directAlign)
	off := 0
	if m := int(uintptr(unsafePointer(b)) % directAlign); m != 0 {
		off = directAlign - m
	}
	return b[off : off+n]
}

// residentPages counts the pages of the file at path that are in the page
// cache (mincore over a mapping of it), and its pages in all.
func residentPages(t *testing.T, path string) (cached, pages int) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pages = (len(m) + os.Getpagesize() - 1) / os.Getpagesize()
	vec := make([]byte, pages)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafePointer(m)), uintptr(len(m)), uintptr(unsafePointer(vec))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		cached += int(v & 1)
	}
	return cached, pages
}
