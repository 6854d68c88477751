package xet

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// FileSize returns the length of a file made of terms: the sum of their
// UnpackedBytes.
func FileSize(terms []Term) uint64 {
	var n uint64
	for _, t := range terms {
		n += uint64(t.UnpackedBytes)
	}
	return n
}

// ParseRange parses an HTTP Range header for a file of size bytes (docs/protocol.md §1.4) and
// returns the half-open window [start, end) it selects, clamped to size.
//
// Accepted: "" (the whole file), "bytes=S-E" (E inclusive; E may lie far
// past the end, up to 2^64-1 and beyond, without overflow), "bytes=S-" and
// "bytes=-N" (the last N bytes). The unit is matched case-insensitively;
// spaces and tabs around the numbers are allowed.
//
// Errors (each a *FormatError): ErrBadRange for anything else, including
// several ranges ("bytes=0-1,5-6"), E < S and a missing or non-decimal
// number; ErrRangeNotSatisfiable when the window starts at or after size
// (including "bytes=-0"), except that size == 0 with start 0 gives (0, 0, nil).
func ParseRange(header string, size uint64) (start, end uint64, err error) {
	if header == "" {
		return 0, size, nil
	}
	const unit = "bytes="
	if len(header) < len(unit) || !strings.EqualFold(header[:len(unit)], unit) {
		return 0, 0, formatErr(ErrBadRange, 0, "range does not start with "+strconv.Quote(unit))
	}
	spec := header[len(unit):]
	if i := strings.IndexByte(spec, ','); i >= 0 {
		return 0, 0, formatErr(ErrBadRange, len(unit)+i, "multiple ranges are not supported")
	}
	dash := strings.IndexByte(spec, '-')
	if dash < 0 {
		return 0, 0, formatErr(ErrBadRange, len(unit), "range has no '-'")
	}
	first, last := trimOWS(spec[:dash]), trimOWS(spec[dash+1:])
	if first == "" {
		n, ok := parseDecimal(last)
		if !ok {
			return 0, 0, formatErr(ErrBadRange, len(unit)+dash+1, "suffix length is not a decimal number")
		}
		start, end = size-min(n, size), size
	} else {
		s, ok := parseDecimal(first)
		if !ok {
			return 0, 0, formatErr(ErrBadRange, len(unit), "range start is not a decimal number")
		}
		e := uint64(math.MaxUint64)
		if last != "" {
			if e, ok = parseDecimal(last); !ok {
				return 0, 0, formatErr(ErrBadRange, len(unit)+dash+1, "range end is not a decimal number")
			}
			if e < s {
				return 0, 0, formatErr(ErrBadRange, len(unit)+dash+1, "range end is before its start")
			}
		}
		start, end = s, size
		if e < size {
			end = e + 1
		}
	}
	if start >= size {
		if size == 0 && start == 0 {
			return 0, 0, nil
		}
		return 0, 0, formatErr(ErrRangeNotSatisfiable, -1,
			"range starts at "+strconv.FormatUint(start, 10)+", file is "+strconv.FormatUint(size, 10)+" bytes")
	}
	return start, end, nil
}

func trimOWS(s string) string { return strings.Trim(s, " \t") }

// parseDecimal parses a non-empty string of ASCII digits, saturating at
// 2^64-1 (any larger number means "past every end" here).
func parseDecimal(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			n = math.MaxUint64
			continue
		}
		n = n*10 + d
	}
	return n, true
}

// ReconTerm is one term of a reconstruction answer (docs/protocol.md §1.4 "terms").
type ReconTerm struct {
	Xorb           Hash
	UnpackedLength uint32 // uncompressed bytes of exactly the chunks [ChunkStart, ChunkEnd)
	ChunkStart     uint32
	ChunkEnd       uint32 // exclusive
}

// FetchRange is one fetch_info entry of a reconstruction answer: the chunks
// [ChunkStart, ChunkEnd) of a xorb occupy bytes [ByteStart, ByteEnd] of the
// stored chunk stream (ByteEnd INCLUSIVE, as url_range is on the wire).
type FetchRange struct {
	ChunkStart uint32
	ChunkEnd   uint32 // exclusive
	ByteStart  uint64
	ByteEnd    uint64 // inclusive
}

// Reconstruction is the answer to a reconstruction query for a byte window:
// the terms to download, where the window starts in the first one, and per
// xorb the byte ranges of the stored chunk stream to fetch. Terms and Fetch
// are never nil (an empty window gives an empty slice and map, which encode
// as [] and {} in JSON). Signed URLs are the caller's to add.
type Reconstruction struct {
	OffsetIntoFirstRange uint64
	Terms                []ReconTerm
	Fetch                map[Hash][]FetchRange // ranges sorted by ChunkStart, disjoint, not touching
}

// TermsInRange returns how many terms Reconstruct would emit for the window
// [start, end) of a file made of terms, from the terms' UnpackedBytes alone
// (no lookups), so a caller can size a memory reservation before building.
func TermsInRange(terms []Term, start, end uint64) int {
	end = min(end, FileSize(terms))
	if start >= end {
		return 0
	}
	n := 0
	var pos uint64
	for _, t := range terms {
		tStart, tEnd := pos, pos+uint64(t.UnpackedBytes)
		pos = tEnd
		if tEnd <= start || tStart == tEnd {
			continue
		}
		if tStart >= end {
			break
		}
		n++
	}
	return n
}

// Reconstruct builds the reconstruction answer (docs/protocol.md §8) for the window
// [start, end) of a file made of terms (its FileDataSequenceEntries);
// end is clamped to the file size. chunks returns a xorb's chunk list as
// stored (XorbInfo.Chunks); it is called at most once per distinct xorb, and
// only for xorbs of terms that overlap the window.
//
// Terms wholly before or after the window, and terms of zero bytes, are
// left out (and not looked up); in the first term
// leading chunks ending at or before start are dropped and
// OffsetIntoFirstRange is start minus the first kept chunk's file offset; in
// the last term chunks starting at or after end are dropped. Each emitted
// term's UnpackedLength counts exactly its kept chunks. Fetch holds, per
// xorb, the emitted chunk ranges sorted by start with overlapping or
// touching ranges merged, and their byte ranges in the chunk stream.
// The result depends only on the arguments.
//
// A window with start >= end (after clamping) gives an empty answer; use
// ParseRange first to turn "start at or after the end" into
// ErrRangeNotSatisfiable. Errors: the lookup's error (wrapped), or
// ErrInvalidShard when a term's chunk range lies outside its xorb or its
// UnpackedBytes disagrees with the xorb's chunk sizes.
func Reconstruct(terms []Term, start, end uint64, chunks ChunkLookup) (Reconstruction, error) {
	rec := Reconstruction{Terms: []ReconTerm{}, Fetch: map[Hash][]FetchRange{}}
	end = min(end, FileSize(terms))
	if start >= end {
		return rec, nil
	}
	rec.Terms = make([]ReconTerm, 0, TermsInRange(terms, start, end))
	lists := make(map[Hash][]XorbChunk)
	var pos uint64
	for i, t := range terms {
		tStart, tEnd := pos, pos+uint64(t.UnpackedBytes)
		pos = tEnd
		if tEnd <= start || tStart == tEnd {
			continue
		}
		if tStart >= end {
			break
		}
		cl, ok := lists[t.Xorb]
		if !ok {
			var err error
			if cl, err = chunks(t.Xorb); err != nil {
				return Reconstruction{}, fmt.Errorf("xet: reconstruct term %d: xorb %s: %w", i, t.Xorb, err)
			}
			lists[t.Xorb] = cl
		}
		if t.ChunkStart >= t.ChunkEnd || int64(t.ChunkEnd) > int64(len(cl)) {
			return Reconstruction{}, formatErr(ErrInvalidShard, -1, "term "+strconv.Itoa(i)+": chunk range ["+
				strconv.FormatUint(uint64(t.ChunkStart), 10)+", "+strconv.FormatUint(uint64(t.ChunkEnd), 10)+
				") is not a range of chunks of xorb "+t.Xorb.String())
		}
		span := cl[t.ChunkStart:t.ChunkEnd]
		if got := span[len(span)-1].UncompressedEnd - (span[0].UncompressedEnd - uint64(span[0].Size)); got != uint64(t.UnpackedBytes) {
			return Reconstruction{}, formatErr(ErrInvalidShard, -1, "term "+strconv.Itoa(i)+": unpacked bytes "+
				strconv.FormatUint(uint64(t.UnpackedBytes), 10)+" are not the size of its chunks")
		}
		cs, ce := t.ChunkStart, t.ChunkEnd
		off := tStart
		for cs < ce && off+uint64(cl[cs].Size) <= start {
			off += uint64(cl[cs].Size)
			cs++
		}
		if len(rec.Terms) == 0 {
			rec.OffsetIntoFirstRange = start - off
		}
		k, length := cs, uint64(0)
		for k < ce && off < end {
			off += uint64(cl[k].Size)
			length += uint64(cl[k].Size)
			k++
		}
		rec.Terms = append(rec.Terms, ReconTerm{Xorb: t.Xorb, UnpackedLength: uint32(length), ChunkStart: cs, ChunkEnd: k})
		rec.Fetch[t.Xorb] = append(rec.Fetch[t.Xorb], FetchRange{ChunkStart: cs, ChunkEnd: k})
	}
	for x, rs := range rec.Fetch {
		rec.Fetch[x] = mergeFetchRanges(rs, lists[x])
	}
	return rec, nil
}

// mergeFetchRanges sorts chunk ranges, merges overlapping or touching ones
// and fills in their byte ranges in the chunk stream described by cl.
func mergeFetchRanges(rs []FetchRange, cl []XorbChunk) []FetchRange {
	slices.SortFunc(rs, func(a, b FetchRange) int {
		if a.ChunkStart != b.ChunkStart {
			return cmpU64(uint64(a.ChunkStart), uint64(b.ChunkStart))
		}
		return cmpU64(uint64(a.ChunkEnd), uint64(b.ChunkEnd))
	})
	out := rs[:1]
	for _, r := range rs[1:] {
		cur := &out[len(out)-1]
		if r.ChunkStart <= cur.ChunkEnd {
			cur.ChunkEnd = max(cur.ChunkEnd, r.ChunkEnd)
			continue
		}
		out = append(out, r)
	}
	for i := range out {
		r := &out[i]
		r.ByteStart = 0
		if r.ChunkStart > 0 {
			r.ByteStart = uint64(cl[r.ChunkStart-1].SerializedEnd)
		}
		r.ByteEnd = uint64(cl[r.ChunkEnd-1].SerializedEnd) - 1
	}
	return slices.Clip(out)
}
