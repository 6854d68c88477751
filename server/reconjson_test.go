package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"openxet/xet"
)

// The answer's shapes as encoding/json wrote them before reconjson.go: the
// reference FuzzReconstructionJSON compares with.
type (
	chunkRange struct {
		Start uint32 `json:"start"`
		End   uint32 `json:"end"`
	}
	byteRange struct {
		Start uint64 `json:"start"`
		End   uint64 `json:"end"`
	}
	termJSON struct {
		Hash           string     `json:"hash"`
		UnpackedLength uint32     `json:"unpacked_length"`
		Range          chunkRange `json:"range"`
	}
	fetchJSON struct {
		Range    chunkRange `json:"range"`
		URL      string     `json:"url"`
		URLRange byteRange  `json:"url_range"`
	}
	rangeJSON struct {
		Chunks chunkRange `json:"chunks"`
		Bytes  byteRange  `json:"bytes"`
	}
	xorbJSON struct {
		URL    string      `json:"url"`
		Ranges []rangeJSON `json:"ranges"`
	}
)

// reconstructionJSONBefore is the answer as echo's c.JSON encoded it: a map
// of the three keys, the fetch map keyed by xorb hash, structs inside.
func reconstructionJSONBefore(tb testing.TB, rec xet.Reconstruction, v2 bool, url func(string, xet.FetchRange) string) []byte {
	byXorb := make(map[string][]any, len(rec.Fetch))
	for x, frs := range rec.Fetch {
		list := make([]any, len(frs))
		for i, fr := range frs {
			cr, br := chunkRange{fr.ChunkStart, fr.ChunkEnd}, byteRange{fr.ByteStart, fr.ByteEnd}
			if v2 {
				list[i] = xorbJSON{URL: url(x.String(), fr), Ranges: []rangeJSON{{Chunks: cr, Bytes: br}}}
			} else {
				list[i] = fetchJSON{Range: cr, URL: url(x.String(), fr), URLRange: br}
			}
		}
		byXorb[x.String()] = list
	}
	terms := make([]termJSON, len(rec.Terms))
	for i, tm := range rec.Terms {
		terms[i] = termJSON{Hash: tm.Xorb.String(), UnpackedLength: tm.UnpackedLength, Range: chunkRange{tm.ChunkStart, tm.ChunkEnd}}
	}
	key := "fetch_info"
	if v2 {
		key = "xorbs"
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(map[string]any{"offset_into_first_range": rec.OffsetIntoFirstRange, "terms": terms, key: byXorb}); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// randomReconstruction builds an answer from seed: up to 40 terms over a
// few xorbs, and up to four fetch ranges per xorb, with any numbers.
func randomReconstruction(seed uint64) xet.Reconstruction {
	r := rand.New(rand.NewPCG(seed, 0x7ec0))
	pool := make([]xet.Hash, 1+r.IntN(6))
	for i := range pool {
		for j := range pool[i] {
			pool[i][j] = byte(r.Uint32())
		}
	}
	rec := xet.Reconstruction{OffsetIntoFirstRange: r.Uint64() >> r.UintN(64), Terms: []xet.ReconTerm{}, Fetch: map[xet.Hash][]xet.FetchRange{}}
	for range r.IntN(41) {
		x := pool[r.IntN(len(pool))]
		rec.Terms = append(rec.Terms, xet.ReconTerm{Xorb: x, UnpackedLength: r.Uint32(), ChunkStart: r.Uint32(), ChunkEnd: r.Uint32()})
		if _, ok := rec.Fetch[x]; !ok {
			frs := []xet.FetchRange{}
			for range r.IntN(5) {
				frs = append(frs, xet.FetchRange{ChunkStart: r.Uint32(), ChunkEnd: r.Uint32(), ByteStart: r.Uint64(), ByteEnd: r.Uint64() >> r.UintN(64)})
			}
			rec.Fetch[x] = frs
		}
	}
	return rec
}

// FuzzReconstructionJSON: appendReconstruction writes, for v1 and v2, the
// bytes echo's c.JSON wrote for the same answer, whatever the URLs hold
// (the base URL comes from configuration or the request's Host).
func FuzzReconstructionJSON(f *testing.F) {
	f.Add(uint64(0), "http://127.0.0.1:8080")
	f.Add(uint64(1), "https://cas.example/<&>\"é\u2028\xff")
	f.Add(uint64(42), "")
	f.Fuzz(func(t *testing.T, seed uint64, base string) {
		rec := randomReconstruction(seed)
		url := func(x string, fr xet.FetchRange) string {
			return fmt.Sprintf("%s/v1/fetch/%s?c=id&r=%d-%d&s=sig", base, x, fr.ByteStart, fr.ByteEnd)
		}
		for _, v2 := range []bool{false, true} {
			key, entry := "fetch_info", fetchEntry(appendFetchV1)
			if v2 {
				key, entry = "xorbs", appendFetchV2
			}
			want := reconstructionJSONBefore(t, rec, v2, url)
			got := append(appendReconstruction(nil, rec, key, entry, url), '\n')
			if !bytes.Equal(got, want) {
				t.Fatalf("v2 %v, seed %d:\n got %s\nwant %s", v2, seed, got, want)
			}
		}
	})
}

// BenchmarkReconstructionJSON: an answer of 8 terms over 2 xorbs, encoded
// as before (encoding/json) and as now.
func BenchmarkReconstructionJSON(b *testing.B) {
	var rec xet.Reconstruction
	for seed := uint64(0); ; seed++ { // the first seed that gives that shape
		if rec = randomReconstruction(seed); len(rec.Terms) == 8 && len(rec.Fetch) == 2 {
			break
		}
	}
	url := func(x string, fr xet.FetchRange) string {
		return "http://127.0.0.1:8080/v1/fetch/" + x + "?c=0123456789abcdef&r=0-1048575&s=0123456789abcdef0123456789abcdef&t=tenant&x=1767225600"
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reconstructionJSONBefore(b, rec, false, url)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			appendReconstruction(make([]byte, 0, 256*(len(rec.Terms)+1)), rec, "fetch_info", appendFetchV1, url)
		}
	})
}
