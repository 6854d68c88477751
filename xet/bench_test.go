package xet

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/zeebo/blake3"

	"openxet/xet/internal/widehash"
)

// benchXorb returns a 64 MiB xorb of 1024 random 64 KiB chunks, scheme 0:
// the common case of an incompressible upload.
func benchXorb(b *testing.B) ([]byte, XorbInfo) {
	b.Helper()
	data := randBytes(99, 64<<20)
	chunks := make([][]byte, 0, 1024)
	for off := 0; off < len(data); off += 64 << 10 {
		chunks = append(chunks, data[off:off+64<<10])
	}
	return BuildXorb(chunks, false)
}

// stockChunkSizes are the chunk sizes, in order, of a xorb the stock
// client cut from random data (testdata/multi): content-defined, 8–128 KiB,
// many under 32 KiB.
var stockChunkSizes = []int{55091, 50714, 46563, 14683, 15039, 15287, 8857, 29858, 26175, 47019,
	58011, 100236, 83564, 29749, 33554, 24721, 28787, 20143, 16238, 22862, 131072, 17599, 36047,
	9731, 131072, 122758, 8314, 12492, 74291, 130509, 118017}

// stockSizedChunks cuts about 64 MiB of random data into stockChunkSizes,
// repeated.
func stockSizedChunks() [][]byte {
	data := randBytes(98, 64<<20)
	var chunks [][]byte
	for off, i := 0, 0; ; i++ {
		n := stockChunkSizes[i%len(stockChunkSizes)]
		if off+n > len(data) {
			return chunks
		}
		chunks = append(chunks, data[off:off+n])
		off += n
	}
}

// BenchmarkParseXorb and BenchmarkBlake3Raw run over the same bytes, so
// their MB/s compare the full validation with bare hashing.
func BenchmarkParseXorb(b *testing.B) {
	body, info := benchXorb(b)
	benchParseXorb(b, body, info.Hash)
}

func benchParseXorb(b *testing.B, body []byte, h Hash) {
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseXorb(body, h); err != nil {
			b.Fatal(err)
		}
	}
}

// The same with the stock client's chunk sizes: most chunks end in a part
// of a 16 KiB group, which the wide kernel hashes as a whole group.
func BenchmarkParseXorbStockSizes(b *testing.B) {
	body, info := BuildXorb(stockSizedChunks(), false)
	benchParseXorb(b, body, info.Hash)
}

// Keyed BLAKE3 alone, each chunk hashed once, through zeebo/blake3 (AVX2)
// and through the wide kernel (AVX-512, where the CPU has it).
func BenchmarkChunkHashers(b *testing.B) {
	for _, set := range []struct {
		name   string
		chunks [][]byte
	}{{"64KiB", func() [][]byte {
		body := randBytes(99, 64<<20)
		var c [][]byte
		for off := 0; off < len(body); off += 64 << 10 {
			c = append(c, body[off:off+64<<10])
		}
		return c
	}()}, {"stock_sizes", stockSizedChunks()}} {
		var total int64
		for _, c := range set.chunks {
			total += int64(len(c))
		}
		for _, wide := range []bool{false, true} {
			name := set.name + "/zeebo"
			if wide {
				if !widehash.Available {
					continue
				}
				name = set.name + "/wide"
			}
			b.Run(name, func(b *testing.B) {
				kh := newKeyedHasherWide(&dataKey, wide)
				b.SetBytes(total)
				b.ReportAllocs()
				for b.Loop() {
					for _, c := range set.chunks {
						kh.sum(c)
					}
				}
			})
		}
	}
}

func BenchmarkBlake3Raw(b *testing.B) {
	body, _ := benchXorb(b)
	b.Run("whole", func(b *testing.B) {
		h, _ := blake3.NewKeyed(dataKey[:])
		var out [32]byte
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			h.Reset()
			_, _ = h.Write(body)
			h.Sum(out[:0])
		}
	})
	// The same bytes hashed in 64 KiB pieces: the floor for per-chunk hashing.
	b.Run("64KiB pieces", func(b *testing.B) {
		h, _ := blake3.NewKeyed(dataKey[:])
		var out [32]byte
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			for off := 0; off < len(body); off += 64 << 10 {
				h.Reset()
				_, _ = h.Write(body[off:min(off+64<<10, len(body))])
				h.Sum(out[:0])
			}
		}
	})
}

// LZ4-compressed text: decompression cost on top of hashing (b.SetBytes
// counts the body, so MB/s is over compressed input).
func BenchmarkParseXorbLZ4(b *testing.B) {
	text := textBytes(5, 16<<20)
	var chunks [][]byte
	for off := 0; off < len(text); off += 64 << 10 {
		chunks = append(chunks, text[off:off+64<<10])
	}
	body, info := BuildXorb(chunks, true)
	b.SetBytes(int64(len(body)))
	b.ReportMetric(float64(len(text))/float64(len(body)), "ratio")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseXorb(body, info.Hash); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAggregatedHash(b *testing.B) {
	for _, n := range []int{1024, 1 << 20} {
		r := rand.New(rand.NewPCG(1, 2))
		leaves := make([]Leaf, n)
		for i := range leaves {
			leaves[i] = Leaf{randHash(r), 65536}
		}
		b.Run(map[int]string{1024: "1024 leaves (one xorb)", 1 << 20: "1M leaves (64 GiB file)"}[n], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				AggregatedHash(leaves)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/leaf")
		})
	}
}

func BenchmarkParseShard(b *testing.B) {
	_, x := benchXorb(b)
	s := &Shard{Xorbs: []CASInfo{CASInfoFromXorb(x)}}
	f := FileInfo{Flags: FileFlagVerification}
	for i := range 1000 {
		f.Terms = append(f.Terms, Term{Xorb: x.Hash, UnpackedBytes: 65536, ChunkStart: uint32(i), ChunkEnd: uint32(i + 1)})
		f.Verification = append(f.Verification, Hash{})
	}
	s.Files = []FileInfo{f}
	body := s.MarshalUpload()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseShard(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReconstruct(b *testing.B) {
	_, x := benchXorb(b)
	lists := map[Hash][]XorbChunk{x.Hash: x.Chunks}
	var terms []Term
	for i := uint32(0); i < 1024; i += 2 {
		terms = append(terms, Term{Xorb: x.Hash, UnpackedBytes: 2 * 65536, ChunkStart: i, ChunkEnd: i + 2})
	}
	lookup := lookupIn(lists)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Reconstruct(terms, 1000, 60<<20, lookup); err != nil {
			b.Fatal(err)
		}
	}
}

// The hostile case: a body of nothing but empty chunks (8 bytes each), the
// most chunks per byte of input, as many as a xorb may hold
// (MaxXorbChunks). Sizes CPU and memory reservations.
func BenchmarkParseXorbEmptyChunks(b *testing.B) {
	body := make([]byte, 0, MaxXorbChunks*8)
	for range MaxXorbChunks {
		body = append(body, chunkHeader(0, 0, SchemeNone, 0)...)
	}
	info, err := parseXorb(body, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportMetric(float64(len(info.Chunks)), "chunks")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseXorb(body, info.Hash); err != nil {
			b.Fatal(err)
		}
	}
}

// Compressed uploads of the kinds a model repo holds, built in the
// benchmark: bf16 and fp32 weights drawn from N(0, 0.02²), as a trained
// model's are, stored with BG4-LZ4 as hf_xet stores them; int8-quantized
// weights and JSON text with LZ4. b.SetBytes counts the uncompressed bytes
// (MB/s is the rate of data ingested, comparable with BenchmarkChunkHashers);
// cMB/s is the rate over the compressed body, ratio the uncompressed bytes
// per compressed byte. The log names the hash kernel the process chose
// (wideBLAKE3 times both once; on a busy machine either may win).
func BenchmarkParseXorbCompressed(b *testing.B) {
	benchCompressed(b, true, func(body []byte, h Hash) error {
		_, err := ParseXorb(body, h)
		return err
	})
}

// The same xorbs decoded and checked but not hashed (walkXorb as
// DecodeChunks runs it, without DecodeChunks' copies): the cost of
// decompression alone.
func BenchmarkDecodeXorbCompressed(b *testing.B) {
	benchCompressed(b, false, func(body []byte, _ Hash) error {
		_, err := walkXorb(body, nil, false)
		return err
	})
}

func benchCompressed(b *testing.B, hashed bool, parse func(body []byte, h Hash) error) {
	const size = 16 << 20
	for _, p := range []struct {
		name   string
		data   func() []byte
		scheme byte
	}{
		{"bf16_bg4", func() []byte { return bf16Weights(7, size) }, SchemeBG4LZ4},
		{"fp32_bg4", func() []byte { return fp32Weights(8, size) }, SchemeBG4LZ4},
		{"int8_lz4", func() []byte { return int8Weights(9, size) }, SchemeLZ4},
		{"json_lz4", func() []byte { return jsonText(10, size) }, SchemeLZ4},
	} {
		b.Run(p.name, func(b *testing.B) {
			data := p.data()
			body, h := compressedXorb(data, p.scheme)
			if hashed {
				b.Logf("hash kernel: %s", HashKernel())
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := parse(body, h); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(body))*float64(b.N)/b.Elapsed().Seconds()/1e6, "cMB/s")
			b.ReportMetric(float64(len(data))/float64(len(body)), "ratio")
		})
	}
}

// compressedXorb cuts data into stockChunkSizes, repeated, and serializes
// each chunk with scheme (SchemeLZ4 or SchemeBG4LZ4) or, where that does
// not shrink it, stored (scheme 0), as hf_xet writes. It returns the body
// and its xorb hash.
func compressedXorb(data []byte, scheme byte) ([]byte, Hash) {
	var (
		body   []byte
		leaves []Leaf
		comp   lz4.Compressor
		frame  []byte
	)
	for i := 0; len(data) > 0; i++ {
		c := data[:min(stockChunkSizes[i%len(stockChunkSizes)], len(data))]
		data = data[len(c):]
		in := c
		if scheme == SchemeBG4LZ4 {
			in = bg4Split(c)
		}
		frame = appendLZ4Frame(frame[:0], in, &comp)
		s, payload := scheme, frame
		if len(frame) >= len(c) {
			s, payload = SchemeNone, c
		}
		body = append(body, chunkHeader(0, len(payload), s, len(c))...)
		body = append(body, payload...)
		leaves = append(leaves, Leaf{Hash: ChunkHash(c), Size: uint64(len(c))})
	}
	return body, AggregatedHash(leaves)
}

// normals returns n draws from N(0, σ²).
func normals(seed uint64, n int, sigma float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.NormFloat64() * sigma)
	}
	return w
}

// bf16Weights returns n bytes of bf16 weights, little-endian, each the
// float32 draw rounded to nearest even.
func bf16Weights(seed uint64, n int) []byte {
	b := make([]byte, n)
	for i, f := range normals(seed, n/2, 0.02) {
		u := math.Float32bits(f)
		u += 0x7fff + (u>>16)&1
		binary.LittleEndian.PutUint16(b[2*i:], uint16(u>>16))
	}
	return b
}

// fp32Weights returns n bytes of float32 weights, little-endian.
func fp32Weights(seed uint64, n int) []byte {
	b := make([]byte, n)
	for i, f := range normals(seed, n/4, 0.02) {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// int8Weights returns n int8 weights quantized symmetrically, one scale
// (absmax/127) per block of 4096, as int8 checkpoints store them.
func int8Weights(seed uint64, n int) []byte {
	w := normals(seed, n, 0.02)
	b := make([]byte, n)
	for start := 0; start < n; start += 4096 {
		blk := w[start:min(start+4096, n)]
		var absmax float32
		for _, f := range blk {
			absmax = max(absmax, float32(math.Abs(float64(f))))
		}
		for i, f := range blk {
			b[start+i] = byte(int8(math.Round(float64(f / absmax * 127))))
		}
	}
	return b
}

// jsonText returns n bytes of a tokenizer.json-like vocabulary: one
// "token": id pair per line, tokens of random letters.
func jsonText(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 4))
	letters := strings.Split("abcdefghijklmnopqrstuvwxyzĠ", "")
	b := append(make([]byte, 0, n+64), "{\n  \"model\": {\n    \"vocab\": {\n"...)
	for id := 0; len(b) < n; id++ {
		b = append(b, "      \""...)
		for range 2 + r.IntN(9) {
			b = append(b, letters[r.IntN(len(letters))]...)
		}
		b = append(b, "\": "...)
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, ",\n"...)
	}
	return b[:n]
}

// BG4 un-grouping alone, over one 64 KiB chunk: the current code, its
// portable path, and the byte-at-a-time reference it replaced (issue 50).
func BenchmarkBG4Regroup(b *testing.B) {
	g := bg4Split(bf16Weights(11, 64<<10))
	out := make([]byte, len(g))
	for _, f := range []struct {
		name string
		fn   func(g, out []byte)
	}{
		{"current", bg4Regroup},
		{"portable", func(g, out []byte) { regroupBG4(g, out, false) }},
		{"reference", bg4RegroupRef},
	} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(g)))
			for b.Loop() {
				f.fn(g, out)
			}
		})
	}
}
