package xet

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/pierrec/lz4/v4"
)

// wantOneOf checks that a rejection is a *FormatError of one of kinds.
func wantOneOf(t *testing.T, err error, kinds ...error) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("got %T (%v), want *FormatError", err, err)
	}
	for _, k := range kinds {
		if fe.Kind == k && errors.Is(err, k) {
			return
		}
	}
	t.Fatalf("error kind %v not one of %v", fe.Kind, kinds)
}

// xorbSeeds: every captured chunk of at most 16 KiB serialized as a
// one-chunk xorb (the fuzzer slows to a crawl on inputs of megabytes; these
// still cover real LZ4 and BG4 chunks of the client), built xorbs, footers
// and BG4.
func xorbSeeds(f *testing.F) [][]byte {
	captured, _ := testdataSeeds(f)
	var seeds [][]byte
	for _, b := range captured {
		info, err := parseXorb(b, nil)
		if err != nil {
			f.Fatal(err)
		}
		var start uint32
		for _, c := range info.Chunks {
			if c.SerializedEnd-start <= 16<<10 {
				seeds = append(seeds, b[start:c.SerializedEnd])
			}
			start = c.SerializedEnd
		}
	}
	small, info := BuildXorb([][]byte{textBytes(1, 3000), randBytes(2, 100), {}}, true)
	seeds = append(seeds, small, appendV1Footer(slices.Clone(small), info), appendV0Footer(slices.Clone(small), info))
	g := textBytes(3, 999)
	seeds = append(seeds, xorbOf(appendLZ4Frame(nil, bg4Split(g), &lz4.Compressor{}), SchemeBG4LZ4, len(g)))
	seeds = append(seeds, nil, []byte("XETBLOB\x01"), chunkHeader(0, 0, 0, 0))
	return seeds
}

func FuzzParseXorb(f *testing.F) {
	for _, s := range xorbSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(fuzzXorb)
}

func fuzzXorb(t *testing.T, body []byte) {
	{
		var chunks [][]byte
		info, err := parseXorb(body, func(_ int, d []byte) { chunks = append(chunks, slices.Clone(d)) })
		checkDecoders(t, body, chunks, err)
		if err != nil {
			wantOneOf(t, err, ErrInvalidXorb, ErrTooLarge)
			if _, err2 := ParseXorb(body, Hash{}); err2 == nil || errors.Is(err2, ErrHashMismatch) {
				t.Fatalf("parseXorb refused (%v) but ParseXorb says %v", err, err2)
			}
			return
		}
		got, err := ParseXorb(body, info.Hash)
		if err != nil {
			t.Fatalf("ParseXorb with its own hash: %v", err)
		}
		if diff := cmp.Diff(info, got); diff != "" {
			t.Fatalf("ParseXorb differs from parseXorb:\n%s", diff)
		}
		wrong := info.Hash
		wrong[31] ^= 0x80
		if _, err := ParseXorb(body, wrong); !errors.Is(err, ErrHashMismatch) {
			t.Fatalf("wrong hash: %v", err)
		}
		// Invariants.
		if len(chunks) != len(info.Chunks) || len(chunks) == 0 {
			t.Fatalf("%d chunk data, %d chunks", len(chunks), len(info.Chunks))
		}
		if info.StreamLen != int64(info.Chunks[len(info.Chunks)-1].SerializedEnd) || info.StreamLen > int64(len(body)) ||
			info.HadFooter != (info.StreamLen < int64(len(body))) {
			t.Fatalf("StreamLen %d, body %d, HadFooter %v", info.StreamLen, len(body), info.HadFooter)
		}
		if want := crc32.ChecksumIEEE(body[:info.StreamLen]); info.StreamCRC32 != want {
			t.Fatalf("StreamCRC32 %08x, the stream's CRC-32 is %08x", info.StreamCRC32, want)
		}
		var unc uint64
		var prevEnd uint32
		for i, c := range info.Chunks {
			unc += uint64(c.Size)
			if c.UncompressedEnd != unc || c.SerializedEnd < prevEnd+ChunkHeaderBytes || int(c.Size) != len(chunks[i]) ||
				c.Hash != ChunkHash(chunks[i]) || c.Size > MaxChunkBytes {
				t.Fatalf("chunk %d: %+v (data %d bytes)", i, c, len(chunks[i]))
			}
			prevEnd = c.SerializedEnd
		}
		// The stored object (no footer) parses to the same chunks.
		stored, err := ParseXorb(body[:info.StreamLen], info.Hash)
		if err != nil || stored.HadFooter || !slices.Equal(stored.Chunks, info.Chunks) {
			t.Fatalf("stored stream: %v, %+v", err, stored)
		}
		// Rebuilding from the decoded chunks gives the same xorb.
		for _, compress := range []bool{false, true} {
			rebuilt, rinfo := BuildXorb(chunks, compress)
			if rinfo.Hash != info.Hash {
				t.Fatalf("rebuilt (compress=%v) hash %s, want %s", compress, rinfo.Hash, info.Hash)
			}
			if _, err := ParseXorb(rebuilt, info.Hash); err != nil {
				t.Fatalf("rebuilt (compress=%v): %v", compress, err)
			}
		}
	}
}

// checkDecoders: DecodeChunks and AppendChunks, which hash nothing, accept
// exactly the streams parseXorb accepts (err is its answer) and give the
// chunks it gives.
func checkDecoders(t *testing.T, body []byte, chunks [][]byte, err error) {
	t.Helper()
	decoded, derr := DecodeChunks(body)
	prefix := []byte("kept")
	joined, n, aerr := AppendChunks(prefix, body)
	if (derr == nil) != (err == nil) || (aerr == nil) != (err == nil) {
		t.Fatalf("parseXorb: %v; DecodeChunks: %v; AppendChunks: %v", err, derr, aerr)
	}
	if err != nil {
		if !bytes.Equal(joined, prefix) || n != 0 {
			t.Fatalf("a refused AppendChunks gave %q, %d chunks", joined, n)
		}
		return
	}
	if !slices.EqualFunc(chunks, decoded, bytes.Equal) {
		t.Fatalf("DecodeChunks gives %d chunks, not parseXorb's %d", len(decoded), len(chunks))
	}
	if want := append(bytes.Clone(prefix), bytes.Join(chunks, nil)...); !bytes.Equal(joined, want) || n != len(chunks) {
		t.Fatalf("AppendChunks: %d bytes, %d chunks; want %d bytes, %d chunks", len(joined), n, len(want), len(chunks))
	}
}

func FuzzParseShard(f *testing.F) {
	_, captured := testdataSeeds(f)
	for _, s := range captured {
		f.Add(s)
	}
	full, _ := testShard(f)
	f.Add(full.MarshalUpload())
	f.Add(BuildDedupShard(full.Xorbs, [32]byte{1}, time.Unix(100, 0), time.Unix(200, 0)))
	f.Add((&Shard{}).MarshalUpload())
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseShard(body)
		if err != nil {
			wantOneOf(t, err, ErrInvalidShard, ErrTooLarge)
			if s != nil {
				t.Fatal("shard returned with error")
			}
			return
		}
		verified := -1
		for i, fi := range s.Files {
			if (fi.Verification != nil) != (fi.Flags&FileFlagVerification != 0) ||
				(fi.SHA256 != nil) != (fi.Flags&FileFlagMetadataExt != 0) {
				t.Fatalf("file %d: flags %#x disagree with parsed parts", i, fi.Flags)
			}
			if fi.Verification != nil && len(fi.Verification) != len(fi.Terms) {
				t.Fatalf("file %d: %d verification entries for %d terms", i, len(fi.Verification), len(fi.Terms))
			}
			if v := boolInt(fi.Verification != nil); verified >= 0 && v != verified {
				t.Fatal("mixed verification accepted")
			} else {
				verified = v
			}
			for _, tm := range fi.Terms {
				if tm.ChunkStart >= tm.ChunkEnd {
					t.Fatalf("empty term accepted: %+v", tm)
				}
			}
		}
		// Round trip through the upload form (footer dropped).
		re := s.MarshalUpload()
		s2, err := ParseShard(re)
		if err != nil {
			t.Fatalf("re-parse of MarshalUpload: %v", err)
		}
		want := *s
		want.Footer = nil
		if diff := cmp.Diff(&want, s2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		if s.Footer == nil && len(re) != len(body) {
			t.Fatalf("MarshalUpload is %d bytes, input %d", len(re), len(body))
		}
		// Its CAS blocks make a valid dedup shard.
		d, err := ParseShard(BuildDedupShard(s.Xorbs, [32]byte{}, time.Unix(1, 0), time.Unix(2, 0)))
		if err != nil || d.Footer == nil || len(d.Xorbs) != len(s.Xorbs) {
			t.Fatalf("dedup shard of the CAS blocks: %v", err)
		}
	})
}

func FuzzParseRange(f *testing.F) {
	for _, h := range []string{"", "bytes=0-99", "bytes=10-", "bytes=-5", "bytes=0-18446744073709551614",
		"bytes=5-4", "bytes=0-1,2-3", "BYTES= 1 - 2", "bytes=-0", "bytes=99999999999999999999-"} {
		for _, size := range []uint64{0, 1, 100, 1 << 40, 1<<64 - 1} {
			f.Add(h, size)
		}
	}
	f.Fuzz(func(t *testing.T, header string, size uint64) {
		start, end, err := ParseRange(header, size)
		if err != nil {
			wantOneOf(t, err, ErrBadRange, ErrRangeNotSatisfiable)
			if start != 0 || end != 0 || header == "" {
				t.Fatalf("error %v with [%d, %d) for %q", err, start, end, header)
			}
			return
		}
		if start > end || end > size || (size > 0 && start == end) || (size == 0 && end != 0) {
			t.Fatalf("%q, size %d: [%d, %d)", header, size, start, end)
		}
		if header == "" && (start != 0 || end != size) {
			t.Fatalf("empty header gave [%d, %d)", start, end)
		}
		if start < end {
			canon := fmt.Sprintf("bytes=%d-%d", start, end-1)
			s2, e2, err := ParseRange(canon, size)
			if err != nil || s2 != start || e2 != end {
				t.Fatalf("canonical %q gave [%d, %d) %v, want [%d, %d)", canon, s2, e2, err, start, end)
			}
		}
	})
}

func FuzzParseHash(f *testing.F) {
	f.Add("d6834b04843aaf16f29903e2428a99be635099f9ea5056cc4e95e7ec8a41509f")
	f.Add("D6834B04843AAF16F29903E2428A99BE635099F9EA5056CC4E95E7EC8A41509F")
	f.Add(strings.Repeat("0", 64))
	f.Add(strings.Repeat("g", 64))
	f.Add("")
	for _, name := range fixtureNames(f) {
		for h := range loadFixture(f, name).xorbs {
			f.Add(h.String())
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHash(s)
		if err != nil {
			wantOneOf(t, err, ErrBadHash)
			if !h.IsZero() {
				t.Fatal("non-zero hash with error")
			}
			return
		}
		if h.String() != s {
			t.Fatalf("ParseHash(%q).String() = %s", s, h)
		}
		back, err := ParseHash(h.String())
		if err != nil || back != h {
			t.Fatalf("round trip: %v", err)
		}
		text, _ := h.MarshalText()
		if !bytes.Equal(text, []byte(h.String())) {
			t.Fatalf("MarshalText %s", text)
		}
	})
}

// FuzzDecodeChunk holds chunkDecoder.decode to the decoder it replaced
// (decoderef_test.go): a payload that one accepted the other decodes to
// the same bytes, and one that it refused is refused at the same offset
// for the same reason. The decoder has decoded a full-size chunk before,
// so stale bytes in its buffers would show. The payload read as BG4 groups
// also un-groups to the reference's bytes, with and without assembly.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSeeds(f) {
		f.Add(s.scheme, s.usize, s.payload)
	}
	warm := bg4Split(bf16Weights(1, MaxChunkBytes))
	warmFrame := appendLZ4Frame(nil, warm, &lz4.Compressor{})
	f.Fuzz(func(t *testing.T, scheme byte, usize uint32, payload []byte) {
		scheme %= SchemeBG4LZ4 + 1
		n := int(usize % (MaxChunkBytes + 1))
		var d chunkDecoder
		if _, _, reason := d.decode(SchemeBG4LZ4, warmFrame, len(warm)); reason != "" {
			t.Fatal(reason)
		}
		got, goff, greason := d.decode(scheme, payload, n)
		want, woff, wreason := decodeChunkRef(scheme, payload, n)
		if greason != wreason || goff != woff {
			t.Fatalf("scheme %d, %d bytes: refused at %d (%q), reference at %d (%q)", scheme, n, goff, greason, woff, wreason)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("scheme %d, %d bytes: decoded %d bytes, not the reference's %d", scheme, n, len(got), len(want))
		}
		ref := make([]byte, len(payload))
		bg4RegroupRef(payload, ref)
		for _, simd := range []bool{true, false} {
			out := make([]byte, len(payload))
			regroupBG4(payload, out, simd)
			if !bytes.Equal(out, ref) {
				t.Fatalf("regroupBG4(simd %v) of %d bytes differs from the reference", simd, len(payload))
			}
		}
	})
}

type chunkSeed struct {
	scheme  byte
	usize   uint32
	payload []byte
}

// chunkSeeds: every chunk of at most 16 KiB of the captured xorbs
// (xorbSeeds), and built LZ4 and BG4 chunks of weights and text, with
// frames of other shapes (linked blocks, checksums, content size) and an
// LZ4 bomb; some also with their size off by one.
func chunkSeeds(f *testing.F) []chunkSeed {
	var seeds []chunkSeed
	for _, body := range xorbSeeds(f) {
		for off := 0; len(body)-off >= ChunkHeaderBytes && body[off] == 0; {
			h := body[off:]
			csize := int(h[1]) | int(h[2])<<8 | int(h[3])<<16
			usize := int(h[5]) | int(h[6])<<8 | int(h[7])<<16
			if h[4] > SchemeBG4LZ4 || csize > len(h)-ChunkHeaderBytes {
				break
			}
			seeds = append(seeds, chunkSeed{h[4], uint32(usize), h[ChunkHeaderBytes : ChunkHeaderBytes+csize]})
			off += ChunkHeaderBytes + csize
		}
	}
	var c lz4.Compressor
	for _, data := range [][]byte{bf16Weights(2, 4099), fp32Weights(3, 8190), int8Weights(4, 3001), jsonText(5, 5000), textBytes(6, 70_001)} {
		for _, scheme := range []byte{SchemeLZ4, SchemeBG4LZ4} {
			in := data
			if scheme == SchemeBG4LZ4 {
				in = bg4Split(data)
			}
			frame := appendLZ4Frame(nil, in, &c)
			n := uint32(len(data))
			seeds = append(seeds, chunkSeed{scheme, n, frame}, chunkSeed{scheme, n - 1, frame}, chunkSeed{scheme, n + 1, frame})
		}
	}
	text := textBytes(7, 20_000)
	for _, opts := range [][]lz4.Option{
		{lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(true), lz4.BlockChecksumOption(true)},
		{lz4.SizeOption(uint64(len(text)))},
		{lz4.ConcurrencyOption(1), lz4.LegacyOption(false)},
	} {
		seeds = append(seeds, chunkSeed{SchemeLZ4, uint32(len(text)), lz4FrameOf(f, text, opts...)})
	}
	bomb := lz4FrameOf(f, make([]byte, 1<<20), lz4.BlockSizeOption(lz4.Block1Mb), lz4.ChecksumOption(false))
	seeds = append(seeds, chunkSeed{SchemeLZ4, MaxChunkBytes, bomb}, chunkSeed{SchemeBG4LZ4, MaxChunkBytes, bomb})
	seeds = append(seeds, chunkSeed{SchemeNone, 3, []byte("abc")}, chunkSeed{SchemeNone, 4, []byte("abc")}, chunkSeed{SchemeLZ4, 0, nil})
	return seeds
}
