package upstream

import (
	"errors"
	"testing"

	"openxet/mirror"
	"openxet/xet"
)

// TestRelayPlansBounded: a relay keeps at most maxSpoolPlans plans, and
// gives up only one that checked out: a plan a client may still complete
// must stay for the check of its last byte, so one past the bound with
// none checked is refused as ErrNoRelay (the window is answered from the
// store). A plan like one that checked out (same terms and ranges, other
// URLs) counts as checked.
func TestRelayPlansBounded(t *testing.T) {
	sp := &spool{ranges: map[xet.Hash][]*spooledRange{}}
	f := mirror.File{Path: "w.bin", Size: 1 << 20}
	plan := func(i int) reconstruction {
		x := xet.Hash{byte(i), byte(i >> 8)}
		e := fetchEntry{Start: 0, End: 1, ByteStart: 0, ByteEnd: 99}
		return reconstruction{Terms: []reconTerm{{Xorb: x, Unpacked: 10, Start: 0, End: 1}}, Fetch: map[xet.Hash][]fetchEntry{x: {e}}}
	}
	for i := range maxSpoolPlans {
		if err := sp.addPlan(f, 0, 10, plan(i)); err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
	}
	err := sp.addPlan(f, 0, 10, plan(maxSpoolPlans))
	if !errors.Is(err, mirror.ErrNoRelay) || len(sp.plans) != maxSpoolPlans {
		t.Fatalf("a plan past the bound with none checked: %v, %d plans kept", err, len(sp.plans))
	}
	sp.plans[7].checked = true
	sp.checkedSigs = append(sp.checkedSigs, sp.plans[7].sig)
	if err := sp.addPlan(f, 0, 10, plan(maxSpoolPlans)); err != nil || len(sp.plans) != maxSpoolPlans {
		t.Fatalf("a plan past the bound once one checked out: %v, %d plans kept", err, len(sp.plans))
	}
	for _, p := range sp.plans {
		if p.sig == planSig(0, 10, plan(7)) {
			t.Fatal("the checked plan was kept, not given up")
		}
	}
	// The same plan again, with another URL: checked already.
	again := plan(7)
	again.Fetch[again.Terms[0].Xorb][0].URL = nil
	sp.plans[0].checked = true
	if err := sp.addPlan(f, 0, 10, again); err != nil || !sp.plans[len(sp.plans)-1].checked {
		t.Fatalf("a plan like a checked one: %v, checked %v", err, sp.plans[len(sp.plans)-1].checked)
	}
	// A relay whose check failed refuses every plan.
	sp.bad = &Error{Kind: mirror.ErrBadAnswer, Op: "fetch", Message: "a copy did not check out"}
	if err := sp.addPlan(f, 0, 10, plan(1)); !errors.Is(err, mirror.ErrBadAnswer) {
		t.Fatalf("a plan after a failed check: %v", err)
	}
}
