package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// TestFileTermsWindow: File reads what the index knows of a file without its
// term list; FileTerms returns exactly the terms that overlap a byte window,
// with the file offset of the first.
func TestFileTermsWindow(t *testing.T) {
	s := mustOpen(t, t.TempDir(), "mem://")
	ctx := context.Background()
	sizes := []int{100, 1, 5000, 37, 2048, 999}
	chunks := make([][]byte, len(sizes))
	for i, n := range sizes {
		chunks[i] = chunksOf(uint64(i), 1, n)[0]
	}
	body, info := xet.BuildXorb(chunks, false)
	if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], -1); err != nil {
		t.Fatal(err)
	}
	// 40 one-chunk terms cycling through the chunks.
	var f xet.FileInfo
	for i := range 40 {
		c := uint32(i % len(sizes))
		f.Terms = append(f.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(sizes[c]), ChunkStart: c, ChunkEnd: c + 1})
	}
	f.Hash = xet.Hash{9, 9}
	sh := &xet.Shard{Files: []xet.FileInfo{f}}
	parsed, err := xet.ParseShard(sh.MarshalUpload())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutShard(ctx, "alice", sh.MarshalUpload(), parsed); err != nil {
		t.Fatal(err)
	}

	got, err := s.File(ctx, "alice", f.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if want := (File{Hash: f.Hash, SizeBytes: f.Size(), TermCount: len(f.Terms)}); got != want {
		t.Fatalf("File = %+v, want %+v", got, want)
	}
	if _, err := s.File(ctx, "bob", f.Hash); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's file: %v", err)
	}
	if _, _, err := s.FileTerms(ctx, "bob", f.Hash, 0, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant's terms: %v", err)
	}

	// want is the reference: the terms ending after start, up to the first
	// starting at or after end.
	want := func(start, end uint64) ([]xet.Term, uint64) {
		var out []xet.Term
		var pos, off uint64
		for _, tm := range f.Terms {
			tStart, tEnd := pos, pos+uint64(tm.UnpackedBytes)
			pos = tEnd
			if tEnd <= start {
				continue
			}
			if tStart >= end {
				break
			}
			if out == nil {
				off = tStart
			}
			out = append(out, tm)
		}
		return out, off
	}
	size := f.Size()
	windows := [][2]uint64{{0, size}, {0, 1}, {size - 1, size}, {100, 101}, {99, 101}, {101, 5101}, {5101, 5102}}
	for s := uint64(0); s < size; s += 977 {
		windows = append(windows, [2]uint64{s, min(size, s+3000)})
	}
	for _, w := range windows {
		t.Run(fmt.Sprintf("%d-%d", w[0], w[1]), func(t *testing.T) {
			terms, off, err := s.FileTerms(ctx, "alice", f.Hash, w[0], w[1])
			if err != nil {
				t.Fatal(err)
			}
			wantTerms, wantOff := want(w[0], w[1])
			if diff := cmp.Diff(wantTerms, terms); diff != "" || off != wantOff {
				t.Fatalf("offset %d, want %d; terms (-want +got):\n%s", off, wantOff, diff)
			}
		})
	}
	if FileTermListBytes(len(f.Terms)) < int64(len(f.Terms))*termRecordBytes {
		t.Fatal("FileTermListBytes is less than the stored list")
	}
}
