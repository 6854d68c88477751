package server

import (
	"slices"
	"strings"

	"openxet/wirejson"
	"openxet/xet"
)

// The reconstruction answer as JSON, appended without reflection: the
// stock client asks for one before every download, and a flood of reads
// asks for little else. The bytes are what encoding/json writes for the
// answer's shapes below as a map of the three top-level keys (sorted) whose
// fetch map is keyed by xorb hash (sorted) and whose objects have their
// fields in the order written here; FuzzReconstructionJSON checks that
// against encoding/json.

// fetchEntry appends the JSON object that tells the client where to fetch
// fr of a xorb, at url.
type fetchEntry func(dst []byte, fr xet.FetchRange, url string) []byte

// appendFetchV1 is a v1 fetch_info entry:
// {"range":{"start":…,"end":…},"url":"…","url_range":{"start":…,"end":…}}.
func appendFetchV1(b []byte, fr xet.FetchRange, url string) []byte {
	b = append(b, `{"range":`...)
	b = appendRange(b, uint64(fr.ChunkStart), uint64(fr.ChunkEnd))
	b = append(b, `,"url":`...)
	b = wirejson.String(b, url)
	b = append(b, `,"url_range":`...)
	b = appendRange(b, fr.ByteStart, fr.ByteEnd)
	return append(b, '}')
}

// appendFetchV2 is a v2 xorbs entry, one URL per fetch range:
// {"url":"…","ranges":[{"chunks":{"start":…,"end":…},"bytes":{"start":…,"end":…}}]}.
func appendFetchV2(b []byte, fr xet.FetchRange, url string) []byte {
	b = append(b, `{"url":`...)
	b = wirejson.String(b, url)
	b = append(b, `,"ranges":[{"chunks":`...)
	b = appendRange(b, uint64(fr.ChunkStart), uint64(fr.ChunkEnd))
	b = append(b, `,"bytes":`...)
	b = appendRange(b, fr.ByteStart, fr.ByteEnd)
	return append(b, `}]}`...)
}

// appendRange is {"start":start,"end":end}.
func appendRange(b []byte, start, end uint64) []byte {
	b = append(b, `{"start":`...)
	b = wirejson.Uint(b, start)
	b = append(b, `,"end":`...)
	b = wirejson.Uint(b, end)
	return append(b, '}')
}

// appendReconstruction appends rec as an answer object: its
// offset_into_first_range, its terms, and under key the fetch entries of
// each xorb, which entry shapes and url signs (given the xorb's string
// form, made once per xorb).
func appendReconstruction(b []byte, rec xet.Reconstruction, key string, entry fetchEntry, url func(xorb string, fr xet.FetchRange) string) []byte {
	type xorb struct {
		hex  string
		hash xet.Hash
	}
	xorbs := make([]xorb, 0, len(rec.Fetch))
	for h := range rec.Fetch {
		xorbs = append(xorbs, xorb{h.String(), h})
	}
	slices.SortFunc(xorbs, func(a, b xorb) int { return strings.Compare(a.hex, b.hex) })
	fetch := func(b []byte) []byte {
		b = append(b, '{')
		for i, x := range xorbs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, x.hex...) // hex digits: nothing to escape
			b = append(b, `":[`...)
			for j, fr := range rec.Fetch[x.hash] {
				if j > 0 {
					b = append(b, ',')
				}
				b = entry(b, fr, url(x.hex, fr))
			}
			b = append(b, ']')
		}
		return append(b, '}')
	}
	offset := func(b []byte) []byte { return wirejson.Uint(b, rec.OffsetIntoFirstRange) }
	terms := func(b []byte) []byte {
		b = append(b, '[')
		for i, t := range rec.Terms {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"hash":"`...)
			b = t.Xorb.AppendHex(b) // hex digits: nothing to escape
			b = append(b, `","unpacked_length":`...)
			b = wirejson.Uint(b, uint64(t.UnpackedLength))
			b = append(b, `,"range":`...)
			b = appendRange(b, uint64(t.ChunkStart), uint64(t.ChunkEnd))
			b = append(b, '}')
		}
		return append(b, ']')
	}
	// The three keys in sorted order: key goes before, between or after
	// the other two.
	type member struct {
		key   string
		value func([]byte) []byte
	}
	members := [3]member{{"offset_into_first_range", offset}, {"terms", terms}, {key, fetch}}
	for i := 2; i > 0 && members[i].key < members[i-1].key; i-- {
		members[i], members[i-1] = members[i-1], members[i]
	}
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ',')
		}
		b = wirejson.String(b, m.key)
		b = append(b, ':')
		b = m.value(b)
	}
	return append(b, '}')
}
