package upstream

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// TestReconstructionWindow: a window cut from a plan starts at the term
// holding its first byte, with the offset into it, and ends with the term
// holding its last; a window past the plan's terms is refused.
func TestReconstructionWindow(t *testing.T) {
	x := xet.Hash{1}
	terms := []reconTerm{{Xorb: x, Unpacked: 100, Start: 0, End: 1}, {Xorb: x, Unpacked: 50, Start: 1, End: 2}, {Xorb: x, Unpacked: 70, Start: 2, End: 3}}
	plan := reconstruction{Offset: 30, Terms: terms} // the plan's byte 0 is byte 30 of term 0
	for _, tc := range []struct {
		from, to uint64
		offset   uint64
		terms    []reconTerm
		ok       bool
	}{
		{0, 190, 30, terms, true},
		{0, 70, 30, terms[:1], true},
		{0, 71, 30, terms[:2], true},
		{70, 120, 0, terms[1:2], true},
		{69, 121, 99, terms[:3], true},
		{120, 190, 0, terms[2:], true},
		{150, 160, 30, terms[2:], true},
		{100, 191, 0, nil, false},
	} {
		got, ok := plan.window(tc.from, tc.to)
		if ok != tc.ok {
			t.Errorf("[%d,%d): ok %v, want %v", tc.from, tc.to, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if got.Offset != tc.offset || !cmp.Equal(got.Terms, tc.terms) {
			t.Errorf("[%d,%d): offset %d terms %v, want %d %v", tc.from, tc.to, got.Offset, got.Terms, tc.offset, tc.terms)
		}
	}
}
