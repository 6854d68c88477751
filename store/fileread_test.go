package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"openxet/xet"
)

// storedXorb puts one xorb of n random chunks and returns its hash and
// stored bytes.
func storedXorb(tb testing.TB, s *Store, n int) (xet.Hash, []byte) {
	tb.Helper()
	body, info := xet.BuildXorb(chunksOf(7, n, 64<<10), false)
	if _, err := s.PutXorb(context.Background(), "t", info, body[:info.StreamLen], 1<<40); err != nil {
		tb.Fatal(err)
	}
	return info.Hash, body[:info.StreamLen]
}

// A range of a file:// object read from its file is what fileblob reads:
// the same bytes for every offset and length (to the end with a negative
// length, short past the end), the same section for sendfile, and
// ErrNotFound for a missing object.
func TestFileRangeReadsAsFileblob(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	if s.dir == "" {
		t.Fatal("the store does not read its file:// bucket itself")
	}
	ctx := context.Background()
	h, stored := storedXorb(t, s, 6)
	size := int64(len(stored))
	for _, rg := range [][2]int64{{0, size}, {0, -1}, {1000, 200 << 10}, {size - 10, 10}, {size - 10, 100}, {size, 10}, {size + 5, 10}, {0, 0}} {
		r, err := s.OpenXorbRange(ctx, h, rg[0], rg[1])
		if err != nil {
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
		want := fileblobRange(t, s, xorbKey(h.String()), rg[0], rg[1])
		if !bytes.Equal(got, want) {
			t.Fatalf("range %v: %d bytes, fileblob reads %d", rg, len(got), len(want))
		}
	}

	r, err := s.OpenXorbRange(ctx, h, 1000, 4096)
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

	var missing xet.Hash
	missing[0] = 1
	if _, err := s.OpenXorbRange(ctx, missing, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing xorb: %v, want ErrNotFound", err)
	}
}

// fileblobRange reads a range through the bucket, as OpenXorbRange did.
func fileblobRange(tb testing.TB, s *Store, key string, offset, length int64) []byte {
	tb.Helper()
	r, err := s.bucket.NewRangeReader(context.Background(), key, offset, length, nil)
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
	s := mustOpen(t, dir, fileBucket(dir))
	h, stored := storedXorb(t, s, 2)
	path := filepath.Join(s.dir, filepath.FromSlash(xorbKey(h.String())))
	if err := os.WriteFile(path+".attrs", []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.bucket.NewRangeReader(context.Background(), xorbKey(h.String()), 0, 10, nil); err == nil {
		t.Fatal("fileblob read past a sidecar it cannot parse: the test no longer shows that the sidecar is skipped")
	}
	r, err := s.OpenXorbRange(context.Background(), h, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, stored) {
		t.Fatalf("read %d bytes (%v), want the %d stored", len(got), err, len(stored))
	}
}

// BenchmarkOpenXorbRange opens and closes a 64 KiB range of a stored
// file:// xorb, from its file (direct) and through fileblob.
func BenchmarkOpenXorbRange(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, dir, fileBucket(dir))
	h, _ := storedXorb(b, s, 4)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			r, err := s.OpenXorbRange(ctx, h, 4096, 64<<10)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
	b.Run("fileblob", func(b *testing.B) {
		for b.Loop() {
			r, err := s.bucket.NewRangeReader(ctx, xorbKey(h.String()), 4096, 64<<10, nil)
			if err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
}
