package objects

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// storedObject writes n random chunks' worth of bytes (as a xorb of n
// chunks of 64 KiB) and returns its key and bytes.
func storedObject(tb testing.TB, s *Bucket, n int) (string, []byte) {
	tb.Helper()
	r := rand.New(rand.NewPCG(7, uint64(n)))
	data := make([]byte, n*(64<<10)+8*n)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	key := prefixXorbs + "stored"
	if _, err := s.Write(context.Background(), key, data, typeBinary, true); err != nil {
		tb.Fatal(err)
	}
	return key, data
}

// A range of a file:// object read from its file is what fileblob reads:
// the same bytes for every offset and length (to the end with a negative
// length, short past the end), the same section for sendfile, and
// ErrNotFound for a missing object.
func TestFileRangeReadsAsFileblob(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, fileBucket(dir), lockBeside(dir))
	if s.dir == "" {
		t.Fatal("the store does not read its file:// bucket itself")
	}
	key, stored := storedObject(t, s, 6)
	size := int64(len(stored))
	for _, rg := range [][2]int64{{0, size}, {0, -1}, {1000, 200 << 10}, {size - 10, 10}, {size - 10, 100}, {size, 10}, {size + 5, 10}, {0, 0}} {
		r, ok, err := s.OpenFileRange(key, rg[0], rg[1])
		if !ok || err != nil {
			t.Fatalf("range %v: %v", rg, err)
		}
		if _, ok := r.(*fileRange); !ok {
			t.Fatalf("range %v read through %T, not the file", rg, r)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("range %v: %v", rg, err)
		}
		want := fileblobRange(t, s, key, rg[0], rg[1])
		if !bytes.Equal(got, want) {
			t.Fatalf("range %v: %d bytes, fileblob reads %d", rg, len(got), len(want))
		}
	}

	r, _, err := s.OpenFileRange(key, 1000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var under io.Reader
	if a, ok := r.(interface{ As(any) bool }); !ok || !a.As(&under) {
		t.Fatal("the range does not expose its section")
	}
	lr, ok := under.(*io.LimitedReader)
	if !ok || lr.N != 4096 {
		t.Fatalf("section %T %+v, want an io.LimitedReader of 4096 bytes", under, under)
	}
	if _, ok := lr.R.(*os.File); !ok {
		t.Fatalf("section over %T, want the *os.File", lr.R)
	}
	if a := r.(interface{ As(any) bool }); a.As(new(int)) {
		t.Error("As answered for a type it does not have")
	}

	if _, _, err := s.OpenFileRange(prefixXorbs+"missing", 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing xorb: %v, want ErrNotFound", err)
	}
}

// fileblobRange reads a range through the bucket, as OpenXorbRange did.
func fileblobRange(tb testing.TB, s *Bucket, key string, offset, length int64) []byte {
	tb.Helper()
	r, err := s.NewRangeReader(context.Background(), key, offset, length, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// A read opens nothing but the object: a metadata sidecar beside it (which
// the store never writes) is not read, even one fileblob cannot parse.
func TestFileRangeIgnoresSidecar(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, fileBucket(dir), lockBeside(dir))
	key, stored := storedObject(t, s, 2)
	path := filepath.Join(s.dir, filepath.FromSlash(key))
	if err := os.WriteFile(path+".attrs", []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewRangeReader(context.Background(), key, 0, 10, nil); err == nil {
		t.Fatal("fileblob read past a sidecar it cannot parse: the test no longer shows that the sidecar is skipped")
	}
	r, _, err := s.OpenFileRange(key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("read %d bytes (%v), want the %d stored", len(got), err, len(stored))
	}
}

// BenchmarkOpenFileRange opens and closes a 64 KiB range of a stored
// file:// xorb, from its file (direct) and through fileblob.
func BenchmarkOpenFileRange(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, fileBucket(dir), lockBeside(dir))
	key, _ := storedObject(b, s, 4)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			r, _, err := s.OpenFileRange(key, 4096, 64<<10)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
	b.Run("fileblob", func(b *testing.B) {
		for b.Loop() {
			r, err := s.NewRangeReader(ctx, key, 4096, 64<<10, nil)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
}
