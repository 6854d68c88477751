package load

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"openxet/xet"
)

var testTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestGenDataIsAFunctionOfSeedAndSize(t *testing.T) {
	a, ca := genData(7, 300_000)
	b, _ := genData(7, 300_000)
	c, _ := genData(8, 300_000)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different bytes")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds gave the same bytes")
	}
	if len(ca) != 5 || len(ca[4]) != 300_000-4*chunkBytes {
		t.Fatalf("%d chunks, last %d bytes; want 5 chunks of %d, the last %d", len(ca), len(ca[len(ca)-1]), chunkBytes, 300_000-4*chunkBytes)
	}
	if got := bytes.Join(ca, nil); !bytes.Equal(got, a) {
		t.Fatal("the chunks are not the data cut up")
	}
	// The xorb mixes stored and LZ4 chunks (one in three is compressible).
	body, info := xet.BuildXorb(ca, true)
	if int64(len(body)) >= int64(len(a)) {
		t.Errorf("xorb body %d bytes for %d of data: nothing compressed", len(body), len(a))
	}
	if _, err := xet.ParseXorb(body, info.Hash); err != nil {
		t.Fatal(err)
	}
}

// testFile builds a file of three generated xorbs.
func testFile(t *testing.T) (*fileSpec, xet.FileInfo, []*xorbSpec, [][]byte) {
	t.Helper()
	var xs []*xorbSpec
	var bodies [][]byte
	for i, size := range []int{100_000, 1, 200_000} {
		x, body := newXorb(uint64(100+i), size)
		xs = append(xs, x)
		bodies = append(bodies, body)
	}
	f, fi := newFile(xs)
	return f, fi, xs, bodies
}

func TestFileContentAndShard(t *testing.T) {
	f, fi, xs, _ := testFile(t)
	var all []byte
	for _, x := range xs {
		d, _ := genData(x.seed, x.size)
		all = append(all, d...)
	}
	if f.size != uint64(len(all)) {
		t.Fatalf("size %d, want %d", f.size, len(all))
	}
	for _, w := range [][2]uint64{{0, f.size}, {0, 1}, {65_000, 70_000}, {99_999, 100_002}, {100_000, 100_001}, {150_000, f.size}, {f.size - 1, f.size}} {
		if got := f.content(w[0], w[1]); !bytes.Equal(got, all[w[0]:w[1]]) {
			t.Errorf("content [%d,%d) differs from the concatenated xorbs", w[0], w[1])
		}
	}
	if f.firstChunk != xs[0].info.Chunks[0].Hash {
		t.Errorf("first chunk %s, want the first xorb's first chunk", f.firstChunk)
	}
	// The shard parses back and its file checks out against the xorbs
	// (file hash, verification entries), as the server will check it.
	sh, err := xet.ParseShard(shardFor(fi, xs[0], xs[2]))
	if err != nil {
		t.Fatal(err)
	}
	if len(sh.Files) != 1 || len(sh.Xorbs) != 2 || sh.Files[0].Hash != f.hash {
		t.Fatalf("shard has %d files, %d CAS blocks, hash %v", len(sh.Files), len(sh.Xorbs), sh.Files[0].Hash)
	}
	lookup := func(h xet.Hash) ([]xet.XorbChunk, error) {
		for _, x := range xs {
			if x.info.Hash == h {
				return x.info.Chunks, nil
			}
		}
		t.Fatalf("lookup of unknown xorb %s", h)
		return nil, nil
	}
	if err := xet.CheckFile(sh.Files[0], lookup); err != nil {
		t.Fatal(err)
	}
}

// answerFor builds the reconstruction answer a server would give for the
// window [s, e) of f, with each fetch range's chunks decoded from the
// xorb bodies (what download does after its fetches).
func answerFor(t *testing.T, fi xet.FileInfo, xs []*xorbSpec, bodies [][]byte, s, e uint64) reconstruction {
	t.Helper()
	lookup := func(h xet.Hash) ([]xet.XorbChunk, error) {
		for _, x := range xs {
			if x.info.Hash == h {
				return x.info.Chunks, nil
			}
		}
		return nil, nil
	}
	rec, err := xet.Reconstruct(fi.Terms, s, e, lookup)
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, as the load reads it.
	type cr struct {
		Start uint32 `json:"start"`
		End   uint32 `json:"end"`
	}
	type term struct {
		Hash           string `json:"hash"`
		UnpackedLength uint32 `json:"unpacked_length"`
		Range          cr     `json:"range"`
	}
	type fe struct {
		Range    cr     `json:"range"`
		URL      string `json:"url"`
		URLRange struct {
			Start uint64 `json:"start"`
			End   uint64 `json:"end"`
		} `json:"url_range"`
	}
	wire := map[string]any{"offset_into_first_range": rec.OffsetIntoFirstRange}
	var terms []term
	for _, tm := range rec.Terms {
		terms = append(terms, term{tm.Xorb.String(), tm.UnpackedLength, cr{tm.ChunkStart, tm.ChunkEnd}})
	}
	fetch := map[string][]fe{}
	for x, frs := range rec.Fetch {
		for _, fr := range frs {
			var e fe
			e.Range = cr{fr.ChunkStart, fr.ChunkEnd}
			e.URLRange.Start, e.URLRange.End = fr.ByteStart, fr.ByteEnd
			fetch[x.String()] = append(fetch[x.String()], e)
		}
	}
	wire["terms"], wire["fetch_info"] = terms, fetch
	raw, _ := json.Marshal(wire)
	var out reconstruction
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	for k, list := range out.FetchInfo {
		var body []byte
		for i, x := range xs {
			if x.info.Hash.String() == k {
				body = bodies[i]
			}
		}
		for i := range list {
			chunks, err := xet.DecodeChunks(body[list[i].URLRange.Start : list[i].URLRange.End+1])
			if err != nil {
				t.Fatal(err)
			}
			list[i].chunks = chunks
		}
	}
	return out
}

func TestAssembleMatchesContent(t *testing.T) {
	f, fi, xs, bodies := testFile(t)
	for _, w := range [][2]uint64{{0, f.size}, {1, 2}, {70_000, 100_001}, {100_000, 100_001}, {100_001, f.size}, {f.size - 5, f.size}} {
		rec := answerFor(t, fi, xs, bodies, w[0], w[1])
		got, err := assemble(rec)
		if err != nil {
			t.Fatalf("window [%d,%d): %v", w[0], w[1], err)
		}
		if uint64(len(got)) < w[1]-w[0] {
			t.Fatalf("window [%d,%d): %d bytes", w[0], w[1], len(got))
		}
		if want := f.content(w[0], w[1]); !bytes.Equal(got[:len(want)], want) {
			t.Errorf("window [%d,%d): %s", w[0], w[1], firstDifference(got[:len(want)], want))
		}
	}
}

func TestAssembleRefusesBrokenAnswers(t *testing.T) {
	f, fi, xs, bodies := testFile(t)
	cases := []struct {
		name    string
		breakIt func(*reconstruction)
		want    string
	}{
		{"term outside fetch_info", func(r *reconstruction) { r.FetchInfo = map[string][]fetchEntry{} }, "lies in no fetch_info range"},
		{"wrong unpacked_length", func(r *reconstruction) { r.Terms[0].UnpackedLength++ }, "unpacked_length says"},
		{"offset past the terms", func(r *reconstruction) { r.Offset = 1 << 40 }, "offset_into_first_range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := answerFor(t, fi, xs, bodies, 0, f.size)
			c.breakIt(&rec)
			if _, err := assemble(rec); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestFirstDifference(t *testing.T) {
	cases := []struct {
		got, want []byte
		says      string
	}{
		{[]byte{1, 2, 3}, []byte{1, 9, 3}, "byte 1 of the window is 0x02, want 0x09"},
		{[]byte{1, 2}, []byte{1, 2, 3}, "got 2 bytes, want 3"},
	}
	for _, c := range cases {
		if s := firstDifference(c.got, c.want); !strings.Contains(s, c.says) {
			t.Errorf("firstDifference(%v, %v) = %q, want it to say %q", c.got, c.want, s, c.says)
		}
	}
}

func TestOffers(t *testing.T) {
	_, info := xet.BuildXorb([][]byte{[]byte("first chunk"), []byte("second chunk")}, false)
	key := [32]byte{1, 2, 3}
	body := xet.BuildDedupShard([]xet.CASInfo{xet.CASInfoFromXorb(info)}, key, testTime, testTime)
	if err := offers(body, info.Chunks[1].Hash); err != nil {
		t.Errorf("keyed answer: %v", err)
	}
	if err := offers(body, xet.ChunkHash([]byte("other"))); err == nil {
		t.Error("an answer without the chunk was accepted")
	}
	plain := xet.BuildDedupShard([]xet.CASInfo{xet.CASInfoFromXorb(info)}, [32]byte{}, testTime, testTime)
	if err := offers(plain, info.Chunks[0].Hash); err != nil {
		t.Errorf("unkeyed answer: %v", err)
	}
	if err := offers([]byte("not a shard"), info.Chunks[0].Hash); err == nil {
		t.Error("garbage was accepted")
	}
}

// BenchmarkFileContent: what checking a downloaded window costs the load
// generator, which regenerates the window's bytes (bytes/s of window).
func BenchmarkFileContent(b *testing.B) {
	x, _ := newXorb(1, 1<<20)
	f, _ := newFile([]*xorbSpec{x})
	b.SetBytes(int64(f.size))
	for b.Loop() {
		f.content(0, f.size)
	}
}
