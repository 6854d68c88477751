package xet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pierrec/lz4/v4"
)

func TestXorbRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		chunks [][]byte
	}{
		{"one byte", [][]byte{{42}}},
		{"empty chunk among others", [][]byte{[]byte("head"), {}, []byte("tail")}},
		{"random 64k x 5", [][]byte{randBytes(1, 64<<10), randBytes(2, 64<<10), randBytes(3, 64<<10), randBytes(4, 64<<10), randBytes(5, 1000)}},
		{"max chunk", [][]byte{randBytes(6, MaxChunkBytes)}},
		{"compressible max chunk", [][]byte{textBytes(7, MaxChunkBytes)}},
		{"mixed", [][]byte{textBytes(8, 100_000), randBytes(9, 70_000), textBytes(10, 8192), make([]byte, 65537)}},
	}
	for _, tt := range tests {
		for _, compress := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: "/none", true: "/lz4"}[compress], func(t *testing.T) {
				body, info := BuildXorb(tt.chunks, compress)
				got, err := ParseXorb(body, info.Hash)
				if err != nil {
					t.Fatalf("ParseXorb: %v", err)
				}
				if diff := cmp.Diff(info, got); diff != "" {
					t.Errorf("info (-built +parsed):\n%s", diff)
				}
				var leaves []Leaf
				var total uint64
				for i, c := range tt.chunks {
					if got.Chunks[i].Hash != ChunkHash(c) {
						t.Errorf("chunk %d hash %s, want ChunkHash %s", i, got.Chunks[i].Hash, ChunkHash(c))
					}
					leaves = append(leaves, Leaf{ChunkHash(c), uint64(len(c))})
					total += uint64(len(c))
				}
				if got.Hash != AggregatedHash(leaves) {
					t.Errorf("xorb hash %s, want %s", got.Hash, AggregatedHash(leaves))
				}
				if got.UncompressedSize() != total || got.StreamLen != int64(len(body)) || got.HadFooter {
					t.Errorf("UncompressedSize %d (want %d), StreamLen %d (want %d), HadFooter %v",
						got.UncompressedSize(), total, got.StreamLen, len(body), got.HadFooter)
				}
				schemes := schemeCounts(body)
				if !compress && schemes[SchemeNone] != len(tt.chunks) {
					t.Errorf("uncompressed build used schemes %v", schemes)
				}
				if compress && bytes.Contains(tt.chunks[0], []byte("alpha")) && schemes[SchemeLZ4] == 0 {
					t.Errorf("compressible text not compressed: schemes %v", schemes)
				}
				var chunksBack [][]byte
				if _, err := parseXorb(body, func(_ int, d []byte) { chunksBack = append(chunksBack, slices.Clone(d)) }); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.chunks, chunksBack, cmp.Comparer(bytes.Equal)); diff != "" {
					t.Errorf("decoded chunk data differs:\n%s", diff)
				}
			})
		}
	}
}

func TestBuildXorbEdges(t *testing.T) {
	body, info := BuildXorb(nil, true)
	if len(body) != 0 || info.Chunks != nil || !info.Hash.IsZero() {
		t.Errorf("BuildXorb(nil) = %d bytes, %+v", len(body), info)
	}
	// An oversized chunk is split, never a panic or an invalid xorb.
	big := randBytes(11, MaxChunkBytes*2+5)
	body, info = BuildXorb([][]byte{big}, false)
	if len(info.Chunks) != 3 || info.Chunks[2].Size != 5 {
		t.Fatalf("split into %+v", info.Chunks)
	}
	if _, err := ParseXorb(body, info.Hash); err != nil {
		t.Fatal(err)
	}
}

func TestParseXorbFooter(t *testing.T) {
	chunks := [][]byte{textBytes(1, 9000), randBytes(2, 20000), {7}}
	stream, info := BuildXorb(chunks, true)
	tests := []struct {
		name    string
		body    []byte
		wantErr bool
	}{
		{"V1", appendV1Footer(slices.Clone(stream), info), false},
		{"V0", appendV0Footer(slices.Clone(stream), info), false},
		{"V1 wrong trailing length", func() []byte {
			b := appendV1Footer(slices.Clone(stream), info)
			b[len(b)-4]++
			return b
		}(), true},
		{"V1 missing trailing length", func() []byte {
			b := appendV1Footer(slices.Clone(stream), info)
			return b[:len(b)-4]
		}(), true},
		{"V1 chunk count off by one", func() []byte {
			short := info
			short.Chunks = info.Chunks[:2]
			return appendV1Footer(slices.Clone(stream), short)
		}(), true},
		{"V1 bad section ident", func() []byte {
			b := appendV1Footer(slices.Clone(stream), info)
			b[len(stream)+40] = 'Y'
			return b
		}(), true},
		{"V1 bad section offset", func() []byte {
			b := appendV1Footer(slices.Clone(stream), info)
			b[len(b)-4-16-8]++
			return b
		}(), true},
		{"V0 chunk count off by one", func() []byte {
			short := info
			short.Chunks = info.Chunks[1:]
			return appendV0Footer(slices.Clone(stream), short)
		}(), true},
		{"version 2", func() []byte {
			b := appendV1Footer(slices.Clone(stream), info)
			b[len(stream)+7] = 2
			return b
		}(), true},
		{"ident only", append(slices.Clone(stream), "XETBLOB"...), true},
		{"footer only", appendV1Footer(nil, XorbInfo{}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseXorb(tt.body, info.Hash)
			if tt.wantErr {
				wantKind(t, err, ErrInvalidXorb)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := info
			want.HadFooter = true
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// lz4FrameOf compresses data with pierrec's stream writer and the given options.
func lz4FrameOf(tb testing.TB, data []byte, opts ...lz4.Option) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(opts...); err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// xorbOf wraps one pre-encoded chunk payload in a header.
func xorbOf(payload []byte, scheme byte, usize int) []byte {
	return append(chunkHeader(0, len(payload), scheme, usize), payload...)
}

func TestParseXorbErrors(t *testing.T) {
	good, goodInfo := BuildXorb([][]byte{textBytes(1, 50_000), randBytes(2, 30_000)}, true)
	text := textBytes(3, 100_000)
	frame := appendLZ4Frame(nil, text, &lz4.Compressor{})
	withCRC := lz4FrameOf(t, text, lz4.ChecksumOption(true), lz4.BlockChecksumOption(true))
	// 4 MiB of zeros in one 4 MiB block: a few KiB that expand 1000-fold.
	bomb := lz4FrameOf(t, make([]byte, 4<<20), lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false))
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb frame is %d bytes", len(bomb))
	}
	mutate := func(b []byte, f func([]byte)) []byte {
		b = slices.Clone(b)
		f(b)
		return b
	}
	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"empty body", nil, ErrInvalidXorb},
		{"too large", make([]byte, MaxXorbBytes+1), ErrTooLarge},
		{"truncated header", good[:5], ErrInvalidXorb},
		{"truncated data", good[:len(good)-1], ErrInvalidXorb},
		{"truncated after first chunk header", good[:goodInfo.Chunks[0].SerializedEnd+3], ErrInvalidXorb},
		{"bad version", mutate(good, func(b []byte) { b[0] = 1 }), ErrInvalidXorb},
		{"scheme 3", mutate(good, func(b []byte) { b[4] = 3 }), ErrInvalidXorb},
		{"scheme 99 (Auto)", mutate(good, func(b []byte) { b[4] = 99 }), ErrInvalidXorb},
		{"compressed size past end", mutate(good, func(b []byte) { b[3] = 0x03 }), ErrInvalidXorb},
		{"uncompressed size over 128 KiB", xorbOf(make([]byte, MaxChunkBytes+1), SchemeNone, MaxChunkBytes+1), ErrInvalidXorb},
		{"header claims 16 MiB", xorbOf(frame, SchemeLZ4, 1<<24-1), ErrInvalidXorb},
		{"compressed size over 256 KiB", xorbOf(make([]byte, MaxCompressedChunkBytes+1), SchemeLZ4, 100), ErrInvalidXorb},
		{"scheme 0 sizes differ", append(chunkHeader(0, 10, SchemeNone, 11), make([]byte, 10)...), ErrInvalidXorb},
		{"LZ4 bomb, header says 128 KiB", xorbOf(bomb, SchemeLZ4, MaxChunkBytes), ErrInvalidXorb},
		{"LZ4 bomb, BG4", xorbOf(bomb, SchemeBG4LZ4, MaxChunkBytes), ErrInvalidXorb},
		{"decompresses to less than header", xorbOf(frame, SchemeLZ4, len(text)+1), ErrInvalidXorb},
		{"decompresses to more than header", xorbOf(frame, SchemeLZ4, len(text)-1), ErrInvalidXorb},
		{"not an LZ4 frame", xorbOf(textBytes(4, 100), SchemeLZ4, 200), ErrInvalidXorb},
		{"LZ4 header checksum", xorbOf(mutate(frame, func(b []byte) { b[6]++ }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 reserved bit", xorbOf(mutate(frame, func(b []byte) { b[4] |= 2 }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 block past end", xorbOf(mutate(frame, func(b []byte) { b[7] = 0xff; b[8] = 0xff }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 no end mark", xorbOf(frame[:len(frame)-4], SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 trailing bytes", xorbOf(append(slices.Clone(frame), 0), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 two frames", xorbOf(slices.Concat(frame, frame), SchemeLZ4, 2*len(text)), ErrInvalidXorb},
		{"LZ4 corrupt block", xorbOf(mutate(frame, func(b []byte) { b[12] = 0xff; b[13] = 0xff; b[14] = 0xff }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 content checksum", xorbOf(mutate(withCRC, func(b []byte) { b[len(b)-1]++ }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"LZ4 block checksum", xorbOf(mutate(withCRC, func(b []byte) { b[len(b)-9]++ }), SchemeLZ4, len(text)), ErrInvalidXorb},
		{"no chunks, footer only", appendV1Footer(nil, XorbInfo{}), ErrInvalidXorb},
		{"wrong want hash", good, ErrHashMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := goodInfo.Hash
			if tt.want == ErrHashMismatch {
				want[0] ^= 1
			}
			info, err := ParseXorb(tt.body, want)
			wantKind(t, err, tt.want)
			if tt.want == ErrHashMismatch && errors.Is(err, ErrInvalidXorb) {
				t.Errorf("hash mismatch also reported as ErrInvalidXorb")
			}
			if diff := cmp.Diff(XorbInfo{}, info); diff != "" {
				t.Errorf("info not zero on error:\n%s", diff)
			}
		})
	}
}

// An LZ4 bomb must fail without allocating anywhere near its expanded size.
func TestParseXorbBombAllocations(t *testing.T) {
	bomb := lz4FrameOf(t, make([]byte, 4<<20), lz4.BlockSizeOption(lz4.Block4Mb), lz4.ChecksumOption(false))
	body := xorbOf(bomb, SchemeLZ4, MaxChunkBytes)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseXorb(body, Hash{})
	runtime.ReadMemStats(&after)
	wantKind(t, err, ErrInvalidXorb)
	if n := after.TotalAlloc - before.TotalAlloc; n > 512<<10 {
		t.Errorf("ParseXorb allocated %d bytes on a %d-byte bomb", n, len(body))
	}
}

// Frames from another encoder (pierrec/lz4's stream writer) with every
// option lz4_flex could also produce decode; frames we write decode with it.
func TestLZ4FrameInterop(t *testing.T) {
	data := slices.Concat(textBytes(1, 60_000), randBytes(2, 20_000), textBytes(3, 51_072))
	if len(data) != MaxChunkBytes {
		t.Fatalf("len %d", len(data))
	}
	tests := []struct {
		name string
		opts func(n int) []lz4.Option
	}{
		{"64k blocks", func(int) []lz4.Option {
			return []lz4.Option{lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)}
		}},
		{"256k blocks", func(int) []lz4.Option {
			return []lz4.Option{lz4.BlockSizeOption(lz4.Block256Kb), lz4.ChecksumOption(false)}
		}},
		{"1m blocks", func(int) []lz4.Option { return []lz4.Option{lz4.BlockSizeOption(lz4.Block1Mb)} }},
		{"4m blocks with checksums", func(int) []lz4.Option {
			return []lz4.Option{lz4.BlockSizeOption(lz4.Block4Mb), lz4.BlockChecksumOption(true), lz4.ChecksumOption(true)}
		}},
		{"content size", func(n int) []lz4.Option { return []lz4.Option{lz4.SizeOption(uint64(n))} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, in := range [][]byte{data, randBytes(4, 1000), {1}} {
				frame := lz4FrameOf(t, in, tt.opts(len(in))...)
				out := make([]byte, MaxChunkBytes)
				n, off, reason := decodeLZ4Frame(frame, out[:len(in)])
				if reason != "" {
					t.Fatalf("%d bytes: %s at %d", len(in), reason, off)
				}
				if !bytes.Equal(out[:n], in) {
					t.Fatalf("%d bytes: decoded data differs", len(in))
				}
				body := xorbOf(frame, SchemeLZ4, len(in))
				if _, err := ParseXorb(body, ChunkHash(in)); err != nil {
					t.Fatalf("as xorb: %v", err)
				}
			}
		})
	}
	t.Run("our frames", func(t *testing.T) {
		for _, in := range [][]byte{data, data[:65536], data[:65537], randBytes(5, 70_000), {9}} {
			frame := appendLZ4Frame(nil, in, &lz4.Compressor{})
			got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(frame)))
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("%d bytes: pierrec reader got %d bytes, %v", len(in), len(got), err)
			}
		}
	})
}

// Linked blocks (FLG bit 5 clear) may refer to the previous block's output.
func TestLZ4LinkedBlocks(t *testing.T) {
	first := randBytes(1, 64<<10)
	// Block 2, written by hand as LZ4 sequences: no literals and a match of
	// 39995 bytes at offset 65535 (reaching byte 1 of block 1), then the 5
	// literals every block must end with.
	tail := []byte("tail!")
	const matchLen = 39_995
	blk := []byte{0x0F} // 0 literals; match length 4 + 15 + extension bytes
	blk = binary.LittleEndian.AppendUint16(blk, 0xFFFF)
	for rest := matchLen - 4 - 15; ; rest -= 255 {
		if rest < 255 {
			blk = append(blk, byte(rest))
			break
		}
		blk = append(blk, 255)
	}
	blk = append(blk, 0x50) // 5 literals, no match
	blk = append(blk, tail...)
	want := slices.Clone(first)
	from := len(first) - 0xFFFF
	for i := range matchLen {
		want = append(want, want[from+i])
	}
	want = append(want, tail...)

	flg, bd := byte(lz4FlgVersion), byte(0x40) // linked, 64 KiB blocks
	frame := binary.LittleEndian.AppendUint32(nil, lz4FrameMagic)
	frame = append(frame, flg, bd, byte(xxh32([]byte{flg, bd}, 0)>>8))
	frame = binary.LittleEndian.AppendUint32(frame, uint32(len(first))|lz4BlockRawFlag)
	frame = append(frame, first...)
	frame = binary.LittleEndian.AppendUint32(frame, uint32(len(blk)))
	frame = append(frame, blk...)
	frame = binary.LittleEndian.AppendUint32(frame, 0)

	out := make([]byte, len(want))
	n, off, reason := decodeLZ4Frame(frame, out)
	if reason != "" {
		t.Fatalf("%s at %d", reason, off)
	}
	if !bytes.Equal(out[:n], want) {
		t.Fatal("linked block decoded wrongly")
	}
	// The same frame marked independent must fail: the match reaches
	// before the block.
	frame[4] |= lz4FlgIndep
	frame[6] = byte(xxh32(frame[4:6], 0) >> 8)
	if _, _, reason := decodeLZ4Frame(frame, out); reason == "" {
		t.Fatal("independent block with a back reference decoded")
	}
}

func TestBG4(t *testing.T) {
	// Every length up to a few 64-byte SSE2 blocks (each remainder for
	// each path), and large ones, with and without assembly.
	var lengths []int
	for n := range 300 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1001, 4099, MaxChunkBytes-1, MaxChunkBytes)
	for _, n := range lengths {
		data := randBytes(uint64(n), n)
		g := bg4Split(data)
		for _, simd := range []bool{true, false} {
			out := make([]byte, n)
			regroupBG4(g, out, simd)
			if !bytes.Equal(out, data) {
				t.Fatalf("n=%d, simd %v: regroup(split(x)) != x", n, simd)
			}
		}
	}
	// A scheme-2 chunk built by hand parses and hashes to its data.
	data := textBytes(5, 10_001)
	frame := appendLZ4Frame(nil, bg4Split(data), &lz4.Compressor{})
	body := xorbOf(frame, SchemeBG4LZ4, len(data))
	info, err := ParseXorb(body, ChunkHash(data))
	if err != nil {
		t.Fatal(err)
	}
	if info.Chunks[0].Size != uint32(len(data)) {
		t.Errorf("size %d", info.Chunks[0].Size)
	}
}
