package xet

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fixtureRoot holds the fixtures captured from the stock client by
// testdata/capture/capture.py.
const fixtureRoot = "../testdata"

type fixtureFile struct {
	Path    string `json:"path"`
	Size    uint64 `json:"size"`
	SHA256  string `json:"sha256"`
	XetHash string `json:"xet_hash"`
}

type fixture struct {
	name   string
	client string
	xorbs  map[Hash][]byte // file name hash -> body as uploaded
	shards map[string][]byte
	files  []fixtureFile
}

// fixtureNames lists the captured cases: directories of ../testdata with a files.json.
func fixtureNames(tb testing.TB) []string {
	tb.Helper()
	m, err := filepath.Glob(filepath.Join(fixtureRoot, "*", "files.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, p := range m {
		names = append(names, filepath.Base(filepath.Dir(p)))
	}
	slices.Sort(names)
	if len(names) == 0 {
		tb.Fatalf("no fixtures under %s (run testdata/capture/capture.py)", fixtureRoot)
	}
	return names
}

func loadFixture(tb testing.TB, name string) *fixture {
	tb.Helper()
	dir := filepath.Join(fixtureRoot, name)
	fx := &fixture{name: name, xorbs: map[Hash][]byte{}, shards: map[string][]byte{}}
	var meta struct {
		Client string        `json:"client"`
		Files  []fixtureFile `json:"files"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "files.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		tb.Fatalf("%s/files.json: %v", name, err)
	}
	fx.client, fx.files = meta.Client, meta.Files
	xs, _ := filepath.Glob(filepath.Join(dir, "xorbs", "*"))
	for _, p := range xs {
		h, err := ParseHash(filepath.Base(p))
		if err != nil {
			tb.Fatalf("xorb file name %s: %v", p, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		fx.xorbs[h] = b
	}
	ss, _ := filepath.Glob(filepath.Join(dir, "shards", "*.shard"))
	for _, p := range ss {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		fx.shards[filepath.Base(p)] = b
	}
	return fx
}

// testdataSeeds returns every captured xorb and shard body, for fuzz seeds.
func testdataSeeds(tb testing.TB) (xorbs, shards [][]byte) {
	tb.Helper()
	for _, name := range fixtureNames(tb) {
		fx := loadFixture(tb, name)
		for _, b := range fx.xorbs {
			xorbs = append(xorbs, b)
		}
		for _, b := range fx.shards {
			shards = append(shards, b)
		}
	}
	return xorbs, shards
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randHash(r *rand.Rand) Hash {
	var h Hash
	for i := 0; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(h[i:], r.Uint64())
	}
	return h
}

// textBytes returns compressible text.
func textBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"alpha ", "bravo ", "charlie ", "delta ", "echo ", "foxtrot\n"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
	}
	return b[:n]
}

// bg4Split groups bytes by position mod 4 (the inverse of bg4Regroup).
func bg4Split(data []byte) []byte {
	var g [4][]byte
	for i, c := range data {
		g[i%4] = append(g[i%4], c)
	}
	return slices.Concat(g[0], g[1], g[2], g[3])
}

// chunkHeader returns an 8-byte xorb chunk header.
func chunkHeader(version byte, csize int, scheme byte, usize int) []byte {
	return []byte{version, byte(csize), byte(csize >> 8), byte(csize >> 16), scheme, byte(usize), byte(usize >> 8), byte(usize >> 16)}
}

// appendV1Footer appends a V1 xorb footer and its u32 length (docs/protocol.md §5.3).
func appendV1Footer(body []byte, info XorbInfo) []byte {
	start := len(body)
	n := uint32(len(info.Chunks))
	body = append(body, "XETBLOB"...)
	body = append(body, 1)
	body = append(body, info.Hash[:]...)
	hs := len(body)
	body = append(body, "XBLBHSH"...)
	body = append(body, 0)
	body = binary.LittleEndian.AppendUint32(body, n)
	for _, c := range info.Chunks {
		body = append(body, c.Hash[:]...)
	}
	bs := len(body)
	body = append(body, "XBLBBND"...)
	body = append(body, 1)
	body = binary.LittleEndian.AppendUint32(body, n)
	for _, c := range info.Chunks {
		body = binary.LittleEndian.AppendUint32(body, c.SerializedEnd)
	}
	for _, c := range info.Chunks {
		body = binary.LittleEndian.AppendUint32(body, uint32(c.UncompressedEnd))
	}
	body = binary.LittleEndian.AppendUint32(body, n)
	end := len(body) + 8 + 16
	body = binary.LittleEndian.AppendUint32(body, uint32(end-hs))
	body = binary.LittleEndian.AppendUint32(body, uint32(end-bs))
	body = append(body, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // nonce + zeros
	return binary.LittleEndian.AppendUint32(body, uint32(len(body)-start))
}

// appendV0Footer appends a legacy V0 xorb footer and its u32 length.
func appendV0Footer(body []byte, info XorbInfo) []byte {
	start := len(body)
	body = append(body, "XETBLOB"...)
	body = append(body, 0)
	body = append(body, info.Hash[:]...)
	body = binary.LittleEndian.AppendUint32(body, uint32(len(info.Chunks)))
	for _, c := range info.Chunks {
		body = binary.LittleEndian.AppendUint32(body, c.SerializedEnd)
	}
	for _, c := range info.Chunks {
		body = append(body, c.Hash[:]...)
	}
	body = append(body, make([]byte, 16)...)
	return binary.LittleEndian.AppendUint32(body, uint32(len(body)-start))
}

// download plays the client's part of docs/protocol.md §8: fetch each fetch range from the
// stored chunk streams, decode the chunks, assemble every term, skip
// OffsetIntoFirstRange and keep want bytes.
func download(tb testing.TB, rec Reconstruction, stored map[Hash][]byte, want uint64) []byte {
	tb.Helper()
	var out []byte
	for i, t := range rec.Terms {
		var fr *FetchRange
		for j := range rec.Fetch[t.Xorb] {
			r := &rec.Fetch[t.Xorb][j]
			if r.ChunkStart <= t.ChunkStart && t.ChunkEnd <= r.ChunkEnd {
				fr = r
				break
			}
		}
		if fr == nil {
			tb.Fatalf("term %d %+v is in no fetch range of %v", i, t, rec.Fetch[t.Xorb])
		}
		stream := stored[t.Xorb]
		if fr.ByteEnd >= uint64(len(stream)) || fr.ByteStart > fr.ByteEnd {
			tb.Fatalf("fetch range %+v outside stored stream of %d bytes", fr, len(stream))
		}
		var chunks [][]byte
		if _, err := parseXorb(stream[fr.ByteStart:fr.ByteEnd+1], func(_ int, d []byte) {
			chunks = append(chunks, slices.Clone(d))
		}); err != nil {
			tb.Fatalf("fetched bytes %+v do not parse: %v", fr, err)
		}
		if len(chunks) != int(fr.ChunkEnd-fr.ChunkStart) {
			tb.Fatalf("fetch range %+v holds %d chunks", fr, len(chunks))
		}
		var term []byte
		for _, c := range chunks[t.ChunkStart-fr.ChunkStart : t.ChunkEnd-fr.ChunkStart] {
			term = append(term, c...)
		}
		if uint32(len(term)) != t.UnpackedLength {
			tb.Fatalf("term %d: %d bytes, unpacked_length says %d", i, len(term), t.UnpackedLength)
		}
		if i == 0 {
			if rec.OffsetIntoFirstRange > uint64(len(term)) {
				tb.Fatalf("offset_into_first_range %d past first term (%d bytes)", rec.OffsetIntoFirstRange, len(term))
			}
			term = term[rec.OffsetIntoFirstRange:]
		}
		out = append(out, term...)
	}
	if uint64(len(out)) < want {
		tb.Fatalf("assembled %d bytes, want at least %d", len(out), want)
	}
	return out[:want]
}

// storedStreams parses bodies and returns their chunk lists and stored streams.
func storedStreams(tb testing.TB, bodies map[Hash][]byte) (map[Hash][]XorbChunk, map[Hash][]byte) {
	tb.Helper()
	lists := map[Hash][]XorbChunk{}
	streams := map[Hash][]byte{}
	for h, b := range bodies {
		info, err := ParseXorb(b, h)
		if err != nil {
			tb.Fatalf("xorb %s: %v", h, err)
		}
		lists[h] = info.Chunks
		streams[h] = b[:info.StreamLen]
	}
	return lists, streams
}

var errNoXorb = errors.New("test: no such xorb")

func lookupIn(lists map[Hash][]XorbChunk) ChunkLookup {
	return func(h Hash) ([]XorbChunk, error) {
		cl, ok := lists[h]
		if !ok {
			return nil, errNoXorb
		}
		return cl, nil
	}
}

// wantKind checks that err is a *FormatError wrapping kind.
func wantKind(tb testing.TB, err, kind error) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("got no error, want %v", kind)
	}
	if !errors.Is(err, kind) {
		tb.Fatalf("got %v, want an error wrapping %v", err, kind)
	}
	var fe *FormatError
	if !errors.As(err, &fe) {
		tb.Fatalf("got %T (%v), want *FormatError", err, err)
	}
}

// wantCheck checks that err is a *CheckError wrapping kind about field.
func wantCheck(tb testing.TB, err, kind error, field string) {
	tb.Helper()
	if !errors.Is(err, kind) {
		tb.Fatalf("got %v, want an error wrapping %v", err, kind)
	}
	var ce *CheckError
	if !errors.As(err, &ce) {
		tb.Fatalf("got %T (%v), want *CheckError", err, err)
	}
	if ce.Field != field {
		tb.Fatalf("field %q, want %q (%v)", ce.Field, field, err)
	}
}

// storedValues lists what the stored xorbs say about the chunks good
// names, as text a refusal could print: every chunk hash, the range hash
// of every chunk range of every xorb, good's file hash, and each xorb's
// chunk count and byte sizes.
func storedValues(lists map[Hash][]XorbChunk, good FileInfo) []string {
	out := []string{good.Hash.String()}
	for _, cl := range lists {
		out = append(out, "of "+strconv.Itoa(len(cl))+" chunks", "holds", "give")
		for i := range cl {
			out = append(out, cl[i].Hash.String())
			var sum uint64
			hs := []Hash{}
			for j := i; j < len(cl); j++ {
				hs = append(hs, cl[j].Hash)
				sum += uint64(cl[j].Size)
				out = append(out, RangeHash(hs).String(), " "+strconv.FormatUint(sum, 10))
			}
		}
	}
	return out
}

// noStoredValue fails when err's text holds a value of stored that the
// caller's file f did not itself send.
func noStoredValue(tb testing.TB, err error, f FileInfo, stored []string) {
	tb.Helper()
	sent := map[string]bool{f.Hash.String(): true}
	for _, v := range f.Verification {
		sent[v.String()] = true
	}
	for _, t := range f.Terms {
		sent[" "+strconv.FormatUint(uint64(t.UnpackedBytes), 10)] = true
	}
	for _, v := range stored {
		if !sent[v] && strings.Contains(err.Error(), v) {
			tb.Errorf("refusal %q reveals the stored %q", err, v)
		}
	}
}
