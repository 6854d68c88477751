package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// TestFileTermsWindow: File reads what the index knows of a file, with its
// term list only when that is short (inlineTerms); FileTerms and FileWindow
// return exactly the terms that overlap a byte window, with the file offset
// of the first, for a short list and for a long one.
func TestFileTermsWindow(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		s := newLC(t).s
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
		for _, n := range []int{inlineTerms, inlineTerms + 8} {
			t.Run(fmt.Sprintf("%d terms", n), func(t *testing.T) {
				// n one-chunk terms cycling through the chunks.
				var f xet.FileInfo
				for i := range n {
					c := uint32(i % len(sizes))
					f.Terms = append(f.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(sizes[c]), ChunkStart: c, ChunkEnd: c + 1})
				}
				f.Hash = xet.Hash{9, byte(n)}
				checkFileWindows(t, s, f)
			})
		}
	})
	if FileTermListBytes(inlineTerms) > 8<<10 {
		t.Fatalf("File reads up to %d bytes of terms before the caller reserves memory for them", FileTermListBytes(inlineTerms))
	}
}

// checkFileWindows registers f for alice and checks what File, FileTerms
// and FileWindow return for it.
func checkFileWindows(t *testing.T, s *Store, f xet.FileInfo) {
	ctx := context.Background()
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
	if got.Hash != f.Hash || got.SizeBytes != f.Size() || got.SHA256 != "" || got.TermCount != len(f.Terms) {
		t.Fatalf("File = %+v, want hash %s, size %d, %d terms", got, f.Hash, f.Size(), len(f.Terms))
	}
	if inline := got.terms != nil; inline != (len(f.Terms) <= inlineTerms) {
		t.Fatalf("File read the list of %d terms with the row: %v", len(f.Terms), inline)
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
	reads := map[string]func(start, end uint64) ([]xet.Term, uint64, error){
		"FileTerms": func(start, end uint64) ([]xet.Term, uint64, error) {
			return s.FileTerms(ctx, "alice", f.Hash, start, end)
		},
		"FileWindow": func(start, end uint64) ([]xet.Term, uint64, error) {
			return s.FileWindow(ctx, "alice", got, start, end)
		},
	}
	for _, w := range windows {
		for name, read := range reads {
			terms, off, err := read(w[0], w[1])
			if err != nil {
				t.Fatalf("%s %d-%d: %v", name, w[0], w[1], err)
			}
			wantTerms, wantOff := want(w[0], w[1])
			if diff := cmp.Diff(wantTerms, terms); diff != "" || off != wantOff {
				t.Fatalf("%s %d-%d: offset %d, want %d; terms (-want +got):\n%s", name, w[0], w[1], off, wantOff, diff)
			}
		}
	}
	if FileTermListBytes(len(f.Terms)) < int64(len(f.Terms))*termRecordBytes {
		t.Fatal("FileTermListBytes is less than the stored list")
	}
}
