package xet

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestParseRange(t *testing.T) {
	const max = math.MaxUint64
	tests := []struct {
		header     string
		size       uint64
		start, end uint64
		err        error
	}{
		{"", 100, 0, 100, nil},
		{"", 0, 0, 0, nil},
		{"bytes=0-99", 100, 0, 100, nil},
		{"bytes=0-0", 100, 0, 1, nil},
		{"bytes=10-19", 100, 10, 20, nil},
		{"bytes=99-99", 100, 99, 100, nil},
		{"bytes=10-", 100, 10, 100, nil},
		{"bytes=0-1000", 100, 0, 100, nil},
		{"bytes=50-18446744073709551614", 100, 50, 100, nil}, // 2^64-2: client's "whole file"
		{"bytes=0-18446744073709551615", 100, 0, 100, nil},   // 2^64-1
		{"bytes=0-99999999999999999999999", 100, 0, 100, nil},
		{"bytes=0-18446744073709551615", max, 0, max, nil},
		{"bytes=0-18446744073709551614", max, 0, max, nil},
		{"bytes=-10", 100, 90, 100, nil},
		{"bytes=-100", 100, 0, 100, nil},
		{"bytes=-1000", 100, 0, 100, nil},
		{"bytes=-99999999999999999999999", 100, 0, 100, nil},
		{"BYTES=1-2", 100, 1, 3, nil},
		{"bytes= 1 - 2 ", 100, 1, 3, nil},
		{"bytes=0-", 0, 0, 0, nil},
		{"bytes=0-10", 0, 0, 0, nil},
		{"bytes=-5", 0, 0, 0, nil},
		{"bytes=-0", 0, 0, 0, nil},
		// 416: start at or past the end.
		{"bytes=100-", 100, 0, 0, ErrRangeNotSatisfiable},
		{"bytes=100-200", 100, 0, 0, ErrRangeNotSatisfiable},
		{"bytes=18446744073709551615-", 100, 0, 0, ErrRangeNotSatisfiable},
		{"bytes=99999999999999999999999-", 100, 0, 0, ErrRangeNotSatisfiable},
		{"bytes=1-", 0, 0, 0, ErrRangeNotSatisfiable},
		{"bytes=-0", 100, 0, 0, ErrRangeNotSatisfiable},
		// 400: malformed.
		{"bytes=", 100, 0, 0, ErrBadRange},
		{"bytes=-", 100, 0, 0, ErrBadRange},
		{"bytes=5", 100, 0, 0, ErrBadRange},
		{"bytes=a-b", 100, 0, 0, ErrBadRange},
		{"bytes=1-a", 100, 0, 0, ErrBadRange},
		{"bytes=--5", 100, 0, 0, ErrBadRange},
		{"bytes=+1-2", 100, 0, 0, ErrBadRange},
		{"bytes=1-2-3", 100, 0, 0, ErrBadRange},
		{"bytes=0x10-20", 100, 0, 0, ErrBadRange},
		{"bytes=5-4", 100, 0, 0, ErrBadRange},
		{"bytes=200-100", 100, 0, 0, ErrBadRange},
		{"bytes=0-1,5-6", 100, 0, 0, ErrBadRange},
		{"bytes=0-1, 5-6", 100, 0, 0, ErrBadRange},
		{"bytes=0-1,", 100, 0, 0, ErrBadRange},
		{"items=0-1", 100, 0, 0, ErrBadRange},
		{"bytes 0-1", 100, 0, 0, ErrBadRange},
		{"0-1", 100, 0, 0, ErrBadRange},
		{" bytes=0-1", 100, 0, 0, ErrBadRange},
		{"bytes=1 2-3", 100, 0, 0, ErrBadRange},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%d", tt.header, tt.size), func(t *testing.T) {
			start, end, err := ParseRange(tt.header, tt.size)
			if tt.err != nil {
				wantKind(t, err, tt.err)
				if start != 0 || end != 0 {
					t.Errorf("got [%d, %d) with error", start, end)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRange: %v", err)
			}
			if start != tt.start || end != tt.end {
				t.Errorf("got [%d, %d), want [%d, %d)", start, end, tt.start, tt.end)
			}
		})
	}
}

// specChunks returns a chunk list of n chunks with the given sizes (cycled)
// and a serialized length of size+8 each (scheme 0).
func specChunks(n int, sizes ...uint32) []XorbChunk {
	cl := make([]XorbChunk, n)
	var ser uint32
	var unc uint64
	for i := range cl {
		s := sizes[i%len(sizes)]
		ser += s + 8
		unc += uint64(s)
		cl[i] = XorbChunk{Hash: Hash{byte(i), byte(i >> 8), 0xcc}, Size: s, SerializedEnd: ser, UncompressedEnd: unc}
	}
	return cl
}

// sumSizes returns the uncompressed size of cl[a:b].
func sumSizes(cl []XorbChunk, a, b uint32) uint32 {
	var n uint32
	for _, c := range cl[a:b] {
		n += c.Size
	}
	return n
}

// The worked example of docs/protocol.md §8: terms X1[1,4), X2[0,3), X1[3,43).
func TestReconstructSpecExample(t *testing.T) {
	x1, x2 := Hash{1}, Hash{2}
	lists := map[Hash][]XorbChunk{x1: specChunks(43, 1000), x2: specChunks(3, 500)}
	terms := []Term{
		{Xorb: x1, UnpackedBytes: 3000, ChunkStart: 1, ChunkEnd: 4},
		{Xorb: x2, UnpackedBytes: 1500, ChunkStart: 0, ChunkEnd: 3},
		{Xorb: x1, UnpackedBytes: 40000, ChunkStart: 3, ChunkEnd: 43},
	}
	got, err := Reconstruct(terms, 0, math.MaxUint64, lookupIn(lists))
	if err != nil {
		t.Fatal(err)
	}
	want := Reconstruction{
		Terms: []ReconTerm{
			{Xorb: x1, UnpackedLength: 3000, ChunkStart: 1, ChunkEnd: 4},
			{Xorb: x2, UnpackedLength: 1500, ChunkStart: 0, ChunkEnd: 3},
			{Xorb: x1, UnpackedLength: 40000, ChunkStart: 3, ChunkEnd: 43},
		},
		Fetch: map[Hash][]FetchRange{
			x1: {{ChunkStart: 1, ChunkEnd: 43, ByteStart: 1008, ByteEnd: 43*1008 - 1}},
			x2: {{ChunkStart: 0, ChunkEnd: 3, ByteStart: 0, ByteEnd: 3*508 - 1}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestReconstructWindows(t *testing.T) {
	x1, x2 := Hash{1}, Hash{2}
	// x1: chunks of 100, 200, 300, 400 bytes (x1 repeats), x2: 50-byte chunks.
	lists := map[Hash][]XorbChunk{x1: specChunks(8, 100, 200, 300, 400), x2: specChunks(4, 50)}
	l1, l2 := lists[x1], lists[x2]
	terms := []Term{
		{Xorb: x1, UnpackedBytes: sumSizes(l1, 0, 4), ChunkStart: 0, ChunkEnd: 4}, // file [0,1000)
		{Xorb: x2, UnpackedBytes: sumSizes(l2, 1, 3), ChunkStart: 1, ChunkEnd: 3}, // file [1000,1100)
		{Xorb: x1, UnpackedBytes: sumSizes(l1, 6, 8), ChunkStart: 6, ChunkEnd: 8}, // file [1100,1800)
	}
	fetch1 := func(cs, ce uint32) FetchRange {
		fr := FetchRange{ChunkStart: cs, ChunkEnd: ce, ByteEnd: uint64(l1[ce-1].SerializedEnd) - 1}
		if cs > 0 {
			fr.ByteStart = uint64(l1[cs-1].SerializedEnd)
		}
		return fr
	}
	fetch2 := func(cs, ce uint32) FetchRange {
		return FetchRange{ChunkStart: cs, ChunkEnd: ce, ByteStart: uint64(cs) * 58, ByteEnd: uint64(ce)*58 - 1}
	}
	tests := []struct {
		name       string
		start, end uint64
		want       Reconstruction
	}{
		{"whole file", 0, 1800, Reconstruction{0,
			[]ReconTerm{{x1, 1000, 0, 4}, {x2, 100, 1, 3}, {x1, 700, 6, 8}},
			map[Hash][]FetchRange{x1: {fetch1(0, 4), fetch1(6, 8)}, x2: {fetch2(1, 3)}}}},
		{"start mid chunk", 150, 1800, Reconstruction{50,
			[]ReconTerm{{x1, 900, 1, 4}, {x2, 100, 1, 3}, {x1, 700, 6, 8}},
			map[Hash][]FetchRange{x1: {fetch1(1, 4), fetch1(6, 8)}, x2: {fetch2(1, 3)}}}},
		{"start on chunk boundary", 300, 1800, Reconstruction{0,
			[]ReconTerm{{x1, 700, 2, 4}, {x2, 100, 1, 3}, {x1, 700, 6, 8}},
			map[Hash][]FetchRange{x1: {fetch1(2, 4), fetch1(6, 8)}, x2: {fetch2(1, 3)}}}},
		{"end mid chunk", 0, 250, Reconstruction{0,
			[]ReconTerm{{x1, 300, 0, 2}},
			map[Hash][]FetchRange{x1: {fetch1(0, 2)}}}},
		{"end on chunk boundary", 0, 300, Reconstruction{0,
			[]ReconTerm{{x1, 300, 0, 2}},
			map[Hash][]FetchRange{x1: {fetch1(0, 2)}}}},
		{"inside one chunk", 310, 320, Reconstruction{10,
			[]ReconTerm{{x1, 300, 2, 3}},
			map[Hash][]FetchRange{x1: {fetch1(2, 3)}}}},
		{"one byte at a term start", 1000, 1001, Reconstruction{0,
			[]ReconTerm{{x2, 50, 1, 2}},
			map[Hash][]FetchRange{x2: {fetch2(1, 2)}}}},
		{"last byte", 1799, 1800, Reconstruction{399,
			[]ReconTerm{{x1, 400, 7, 8}},
			map[Hash][]FetchRange{x1: {fetch1(7, 8)}}}},
		{"across terms", 950, 1150, Reconstruction{350,
			[]ReconTerm{{x1, 400, 3, 4}, {x2, 100, 1, 3}, {x1, 300, 6, 7}},
			// x1 chunks 3 and 6 do not touch: two ranges.
			map[Hash][]FetchRange{x1: {fetch1(3, 4), fetch1(6, 7)}, x2: {fetch2(1, 3)}}}},
		{"end past EOF", 1700, math.MaxUint64, Reconstruction{300,
			[]ReconTerm{{x1, 400, 7, 8}},
			map[Hash][]FetchRange{x1: {fetch1(7, 8)}}}},
		{"empty window", 500, 500, Reconstruction{0, []ReconTerm{}, map[Hash][]FetchRange{}}},
		{"start past EOF", 1800, 2000, Reconstruction{0, []ReconTerm{}, map[Hash][]FetchRange{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Reconstruct(terms, tt.start, tt.end, lookupIn(lists))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if n := TermsInRange(terms, tt.start, tt.end); n != len(got.Terms) {
				t.Errorf("TermsInRange = %d, Reconstruct gave %d terms", n, len(got.Terms))
			}
		})
	}
}

func TestReconstructMerge(t *testing.T) {
	x := Hash{9}
	lists := map[Hash][]XorbChunk{x: specChunks(10, 10)}
	tests := []struct {
		name   string
		ranges [][2]uint32
		want   [][2]uint32
	}{
		{"touching", [][2]uint32{{0, 2}, {2, 4}}, [][2]uint32{{0, 4}}},
		{"overlapping, out of order", [][2]uint32{{5, 8}, {0, 6}}, [][2]uint32{{0, 8}}},
		{"contained", [][2]uint32{{0, 9}, {3, 4}, {4, 5}}, [][2]uint32{{0, 9}}},
		{"gap", [][2]uint32{{6, 7}, {0, 1}, {3, 5}}, [][2]uint32{{0, 1}, {3, 5}, {6, 7}}},
		{"same range twice", [][2]uint32{{1, 3}, {1, 3}}, [][2]uint32{{1, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var terms []Term
			for _, r := range tt.ranges {
				terms = append(terms, Term{Xorb: x, UnpackedBytes: 10 * (r[1] - r[0]), ChunkStart: r[0], ChunkEnd: r[1]})
			}
			got, err := Reconstruct(terms, 0, math.MaxUint64, lookupIn(lists))
			if err != nil {
				t.Fatal(err)
			}
			var gotR [][2]uint32
			for _, fr := range got.Fetch[x] {
				gotR = append(gotR, [2]uint32{fr.ChunkStart, fr.ChunkEnd})
				if fr.ByteStart != uint64(fr.ChunkStart)*18 || fr.ByteEnd != uint64(fr.ChunkEnd)*18-1 {
					t.Errorf("byte range of %+v", fr)
				}
			}
			if diff := cmp.Diff(tt.want, gotR); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconstructErrors(t *testing.T) {
	x := Hash{9}
	lists := map[Hash][]XorbChunk{x: specChunks(4, 10)}
	tests := []struct {
		name  string
		terms []Term
		want  error
	}{
		{"chunk end past xorb", []Term{{Xorb: x, UnpackedBytes: 50, ChunkStart: 0, ChunkEnd: 5}}, ErrInvalidShard},
		{"empty chunk range", []Term{{Xorb: x, UnpackedBytes: 10, ChunkStart: 2, ChunkEnd: 2}}, ErrInvalidShard},
		{"unpacked bytes disagree", []Term{{Xorb: x, UnpackedBytes: 25, ChunkStart: 0, ChunkEnd: 2}}, ErrInvalidShard},
		{"unknown xorb", []Term{{Xorb: Hash{1}, UnpackedBytes: 10, ChunkStart: 0, ChunkEnd: 1}}, errNoXorb},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := Reconstruct(tt.terms, 0, 100, lookupIn(lists))
			if tt.want == errNoXorb {
				if !errors.Is(err, errNoXorb) {
					t.Fatalf("got %v, want the lookup's error", err)
				}
			} else {
				wantKind(t, err, tt.want)
			}
			if rec.Terms != nil || rec.Fetch != nil {
				t.Errorf("non-zero result with error: %+v", rec)
			}
		})
	}
	// Terms outside the window are not looked up, so a broken one there is not reported.
	terms := []Term{{Xorb: x, UnpackedBytes: 10, ChunkStart: 0, ChunkEnd: 1}, {Xorb: Hash{1}, UnpackedBytes: 10, ChunkStart: 0, ChunkEnd: 1}}
	if _, err := Reconstruct(terms, 0, 10, lookupIn(lists)); err != nil {
		t.Errorf("window before the bad term: %v", err)
	}
}

// Random files over real xorbs: for random windows the client's assembly of
// the answer gives exactly the window's bytes.
func TestReconstructDownload(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 42))
	bodies := map[Hash][]byte{}
	var data [][][]byte // per xorb, per chunk
	var hashes []Hash
	for x := range 3 {
		var chunks [][]byte
		for range 5 + r.IntN(10) {
			n := 1 + r.IntN(3000)
			if r.IntN(2) == 0 {
				chunks = append(chunks, textBytes(r.Uint64(), n))
			} else {
				chunks = append(chunks, randBytes(r.Uint64(), n))
			}
		}
		body, info := BuildXorb(chunks, x != 1)
		bodies[info.Hash] = body
		data = append(data, chunks)
		hashes = append(hashes, info.Hash)
	}
	lists, streams := storedStreams(t, bodies)
	for iter := range 200 {
		var terms []Term
		var file []byte
		for range 1 + r.IntN(6) {
			xi := r.IntN(len(hashes))
			n := uint32(len(data[xi]))
			cs := r.Uint32N(n)
			ce := cs + 1 + r.Uint32N(n-cs)
			var size uint32
			for _, c := range data[xi][cs:ce] {
				file = append(file, c...)
				size += uint32(len(c))
			}
			terms = append(terms, Term{Xorb: hashes[xi], UnpackedBytes: size, ChunkStart: cs, ChunkEnd: ce})
		}
		size := uint64(len(file))
		header := ""
		switch iter % 4 {
		case 1:
			header = fmt.Sprintf("bytes=%d-", r.Uint64N(size))
		case 2:
			header = fmt.Sprintf("bytes=%d-%d", r.Uint64N(size), r.Uint64N(size+10))
		case 3:
			header = fmt.Sprintf("bytes=-%d", 1+r.Uint64N(size+5))
		}
		start, end, err := ParseRange(header, size)
		if errors.Is(err, ErrBadRange) {
			continue // E < S
		}
		if err != nil {
			t.Fatalf("ParseRange(%q, %d): %v", header, size, err)
		}
		rec, err := Reconstruct(terms, start, end, lookupIn(lists))
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		got := download(t, rec, streams, end-start)
		if !bytes.Equal(got, file[start:end]) {
			t.Fatalf("iteration %d (%q of %d bytes): downloaded bytes differ", iter, header, size)
		}
		again, _ := Reconstruct(terms, start, end, lookupIn(lists))
		if diff := cmp.Diff(rec, again); diff != "" {
			t.Fatalf("iteration %d: not deterministic:\n%s", iter, diff)
		}
	}
}

func TestTermsInRange(t *testing.T) {
	terms := []Term{{UnpackedBytes: 10}, {UnpackedBytes: 0}, {UnpackedBytes: 10}, {UnpackedBytes: 10}}
	tests := []struct {
		start, end uint64
		want       int
	}{
		{0, 30, 3}, {0, 10, 1}, {0, 11, 2}, {9, 11, 2}, {10, 20, 1}, {25, math.MaxUint64, 1}, {30, 40, 0}, {5, 5, 0},
	}
	for _, tt := range tests {
		if got := TermsInRange(terms, tt.start, tt.end); got != tt.want {
			t.Errorf("TermsInRange(%d, %d) = %d, want %d", tt.start, tt.end, got, tt.want)
		}
	}
	if FileSize(terms) != 30 {
		t.Errorf("FileSize = %d", FileSize(terms))
	}
}

// Reconstruction answers for the captured files, as golden text
// (testdata/reconstruct.golden; rewrite with -update and review the diff).
func TestReconstructGolden(t *testing.T) {
	var out strings.Builder
	for _, name := range fixtureNames(t) {
		fx := loadFixture(t, name)
		lists, _ := storedStreams(t, fx.xorbs)
		names := map[Hash]string{}
		for _, f := range fx.files {
			names[mustHash(t, f.XetHash)] = f.Path
		}
		shardNames := slices.Sorted(mapsKeys(fx.shards))
		for _, sn := range shardNames {
			s, err := ParseShard(fx.shards[sn])
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range s.Files {
				size := f.Size()
				for _, h := range []string{"", "bytes=0-18446744073709551614", "bytes=1000-70000", "bytes=-1"} {
					start, end, err := ParseRange(h, size)
					fmt.Fprintf(&out, "%s/%s %s (%d bytes) Range %q:", name, sn, names[f.Hash], size, h)
					if err != nil {
						fmt.Fprintf(&out, " %v\n", errors.Unwrap(err))
						continue
					}
					rec, err := Reconstruct(f.Terms, start, end, lookupIn(lists))
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&out, " [%d,%d) offset %d\n", start, end, rec.OffsetIntoFirstRange)
					for _, tm := range rec.Terms {
						fmt.Fprintf(&out, "  term %s [%d,%d) %d bytes\n", tm.Xorb.String()[:12], tm.ChunkStart, tm.ChunkEnd, tm.UnpackedLength)
					}
					for _, x := range slices.SortedFunc(mapsKeys(rec.Fetch), func(a, b Hash) int { return bytes.Compare(a[:], b[:]) }) {
						for _, fr := range rec.Fetch[x] {
							fmt.Fprintf(&out, "  fetch %s [%d,%d) bytes %d-%d\n", x.String()[:12], fr.ChunkStart, fr.ChunkEnd, fr.ByteStart, fr.ByteEnd)
						}
					}
				}
			}
		}
	}
	path := filepath.Join("testdata", "reconstruct.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestReconstructGolden -update)", err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("golden differs (-file +now); rerun with -update if intended:\n%s", diff)
	}
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
