package xet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// chunkVectors is testdata/vectors/chunks.json, captured from hf_xet by
// testdata/capture/chunks.py.
type chunkVectors struct {
	Client string `json:"client"`
	Cases  []struct {
		Name     string   `json:"name"`
		Kind     string   `json:"kind"`
		Seed     string   `json:"seed"`
		Size     int      `json:"size"`
		SHA256   string   `json:"sha256"`
		FileHash string   `json:"file_hash"`
		Chunks   [][2]any `json:"chunks"` // [size, hash]
	} `json:"cases"`
}

// genInput repeats gen() of testdata/capture/chunks.py.
func genInput(kind, seed string, size int) []byte {
	switch kind {
	case "zeros":
		return make([]byte, size)
	case "text":
		var b bytes.Buffer
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "%08d the quick brown fox\n", i)
		}
		return b.Bytes()[:size]
	}
	out := make([]byte, 0, size+32)
	for i := 0; len(out) < size; i++ {
		s := sha256.Sum256(fmt.Appendf(nil, "%s:%d", seed, i))
		out = append(out, s[:]...)
	}
	out = out[:size]
	if kind == "lowentropy" {
		for i, b := range out {
			out[i] = 'a' + b%4
		}
	}
	return out
}

func loadChunkVectors(t *testing.T) chunkVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "chunks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v chunkVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases in chunks.json")
	}
	return v
}

// jaggedReader returns reads of pseudo-random lengths from 1 to max bytes.
type jaggedReader struct {
	r   io.Reader
	rng *rand.Rand
	max int
}

func (j *jaggedReader) Read(p []byte) (int, error) {
	n := 1 + j.rng.IntN(j.max)
	return j.r.Read(p[:min(n, len(p))])
}

func readChunks(t testing.TB, r io.Reader, buf []byte) [][]byte {
	t.Helper()
	cr := NewChunkReader(r, buf)
	var out [][]byte
	for {
		c, err := cr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(c))
	}
}

// TestChunkerMatchesHFXet cuts the captured inputs and compares every chunk
// size and hash and the file hash with what hf_xet computed, for several
// buffer sizes and read patterns.
func TestChunkerMatchesHFXet(t *testing.T) {
	v := loadChunkVectors(t)
	for _, tc := range v.Cases {
		data := genInput(tc.Kind, tc.Seed, tc.Size)
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != tc.SHA256 {
			t.Fatalf("%s: generated input differs from the captured one (sha256 %x, want %s)", tc.Name, got, tc.SHA256)
		}
		for _, rd := range []struct {
			name string
			r    func() io.Reader
			buf  int
		}{
			{"whole", func() io.Reader { return bytes.NewReader(data) }, 4 << 20},
			{"minbuf", func() io.Reader { return bytes.NewReader(data) }, ChunkReaderBufBytes},
			{"jagged", func() io.Reader {
				return &jaggedReader{r: bytes.NewReader(data), rng: rand.New(rand.NewPCG(1, uint64(tc.Size))), max: 70000}
			}, ChunkReaderBufBytes + 12345},
		} {
			chunks := readChunks(t, rd.r(), make([]byte, rd.buf))
			if len(chunks) != len(tc.Chunks) {
				t.Fatalf("%s/%s: %d chunks, hf_xet made %d", tc.Name, rd.name, len(chunks), len(tc.Chunks))
			}
			var agg AggregatedHasher
			for i, c := range chunks {
				wantSize, wantHash := int(tc.Chunks[i][0].(float64)), tc.Chunks[i][1].(string)
				h := ChunkHash(c)
				if len(c) != wantSize || h.String() != wantHash {
					t.Fatalf("%s/%s: chunk %d is %d bytes %s, hf_xet: %d bytes %s", tc.Name, rd.name, i, len(c), h, wantSize, wantHash)
				}
				agg.Add(Leaf{Hash: h, Size: uint64(len(c))})
			}
			if got := agg.FileHash(); got.String() != tc.FileHash {
				t.Errorf("%s/%s: file hash %s, hf_xet %s", tc.Name, rd.name, got, tc.FileHash)
			}
		}
	}
}

// TestChunkLenBounds checks the cut rule's edges on inputs of known shape.
func TestChunkLenBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want int
	}{
		{"empty", nil, 0},
		{"short", make([]byte, 100), 100},
		{"min", make([]byte, ChunkMinBytes), ChunkMinBytes},
		// Zeros never hash to a cut (gearTable[0] shifted in keeps the top
		// bits set), so a run of zeros is cut at the maximum.
		{"zeros", make([]byte, 3*ChunkMaxBytes), ChunkMaxBytes},
		{"zeros-short", make([]byte, ChunkMaxBytes-1), ChunkMaxBytes - 1},
	} {
		if got := ChunkLen(tc.data); got != tc.want {
			t.Errorf("%s: ChunkLen = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// checkChunking checks the invariants of a chunking of data: the chunks
// put back together are data, each is at most ChunkMaxBytes, all but the
// last at least ChunkMinBytes, and each is what ChunkLen gives at its start.
func checkChunking(t testing.TB, data []byte, chunks [][]byte) {
	t.Helper()
	off := 0
	for i, c := range chunks {
		if len(c) == 0 || len(c) > ChunkMaxBytes || (i < len(chunks)-1 && len(c) < ChunkMinBytes) {
			t.Fatalf("chunk %d of %d has %d bytes", i, len(chunks), len(c))
		}
		if want := ChunkLen(data[off:]); len(c) != want {
			t.Fatalf("chunk %d at %d has %d bytes, ChunkLen says %d", i, off, len(c), want)
		}
		if !bytes.Equal(c, data[off:off+len(c)]) {
			t.Fatalf("chunk %d at %d is not the input's bytes", i, off)
		}
		off += len(c)
	}
	if off != len(data) {
		t.Fatalf("chunks cover %d of %d bytes", off, len(data))
	}
}

func FuzzChunkReader(f *testing.F) {
	f.Add([]byte{}, uint16(1), uint8(0))
	f.Add(genInput("random", "fuzz", 300000), uint16(7000), uint8(1))
	f.Add(genInput("lowentropy", "fuzz", 200000), uint16(65535), uint8(2))
	f.Add(make([]byte, 2*ChunkMaxBytes+1), uint16(300), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, maxRead uint16, seed uint8) {
		r := &jaggedReader{r: bytes.NewReader(data), rng: rand.New(rand.NewPCG(uint64(seed), 0)), max: int(maxRead) + 1}
		chunks := readChunks(t, r, make([]byte, ChunkReaderBufBytes+int(seed)))
		checkChunking(t, data, chunks)
	})
}

// errAfter fails a read after n bytes.
type errAfter struct {
	r   io.Reader
	n   int
	err error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, e.err
	}
	n, err := e.r.Read(p[:min(len(p), e.n)])
	e.n -= n
	return n, err
}

func TestChunkReaderError(t *testing.T) {
	boom := fmt.Errorf("boom")
	cr := NewChunkReader(&errAfter{r: bytes.NewReader(make([]byte, 1<<20)), n: 300000, err: boom}, nil)
	var err error
	for err == nil {
		_, err = cr.Next()
	}
	if err != boom {
		t.Fatalf("Next = %v, want the reader's error", err)
	}
	if _, again := cr.Next(); again != boom {
		t.Fatalf("Next after the error = %v, want it again", again)
	}
}

func TestXorbWriterMatchesParse(t *testing.T) {
	data := append(genInput("random", "xw", 700000), genInput("text", "", 500000)...)
	chunks := readChunks(t, bytes.NewReader(data), nil)
	for _, compress := range []bool{false, true} {
		w := NewXorbWriter(nil, compress)
		for _, c := range chunks {
			if !w.Fits(len(c)) {
				t.Fatal("a small xorb does not fit")
			}
			w.Add(ChunkHash(c), c)
		}
		body, info := w.Finish()
		parsed, err := ParseXorb(body, info.Hash)
		if err != nil {
			t.Fatalf("compress=%v: %v", compress, err)
		}
		if parsed.StreamLen != info.StreamLen || parsed.StreamCRC32 != info.StreamCRC32 || len(parsed.Chunks) != len(info.Chunks) {
			t.Fatalf("compress=%v: writer info %+v, parse %+v", compress, info, parsed)
		}
		for i := range parsed.Chunks {
			if parsed.Chunks[i] != info.Chunks[i] {
				t.Fatalf("compress=%v: chunk %d: writer %+v, parse %+v", compress, i, info.Chunks[i], parsed.Chunks[i])
			}
		}
	}
	var w XorbWriter
	for range XorbTargetChunks {
		w.Add(Hash{}, nil)
	}
	if w.Fits(0) {
		t.Error("a xorb of XorbTargetChunks chunks takes one more")
	}
}

func BenchmarkChunkReader(b *testing.B) {
	data := genInput("random", "bench", 16<<20)
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		cr := NewChunkReader(bytes.NewReader(data), buf)
		for {
			if _, err := cr.Next(); err != nil {
				break
			}
		}
	}
}
