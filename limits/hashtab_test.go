package limits

import (
	"math/rand/v2"
	"testing"
)

// TestTatTableNeverFindsZero: hash 0 marks an empty entry, so a probe for
// it must not return the first empty slot it meets. Before the guard,
// InFlight.releaseHash(0) (the Done of a refused admission) "released" an
// empty slot and shifted a live neighbour out of its probe run, so another
// credential's count read 0 (TestGateRefusalSpendsNothingElse failed about
// one run in seventy, by the random seed).
func TestTatTableNeverFindsZero(t *testing.T) {
	var tab tatTable
	for h := uint64(1); h <= 5; h++ {
		tab.insert(h<<60, int64(h))
	}
	if i := tab.find(0); i != -1 {
		t.Fatalf("find(0) = %d (entry %+v), want -1", i, tab.entries[i])
	}
	f := NewInFlight()
	if !f.Acquire("c", 2) || !f.Acquire("c", 2) {
		t.Fatal("acquire")
	}
	for range 100 {
		f.releaseHash(0)
	}
	if n, st := f.Count("c"), f.Stats(); n != 2 || st.InFlight != 2 {
		t.Fatalf("after releases of hash 0: c has %d, total %d; want 2 and 2", n, st.InFlight)
	}
}

// TestTatTableModel runs random inserts, updates and removals against a Go
// map, with hashes drawn from a small set so that probe runs collide,
// wrap around the end and get shifted back on removal.
func TestTatTableModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for round := range 20 {
		var tab tatTable
		model := map[uint64]int64{}
		universe := 8 + rng.IntN(300)
		hash := func() uint64 {
			h := uint64(rng.IntN(universe)) + 1
			if rng.IntN(4) == 0 {
				h |= 1 << 63 // different high bits, different home slots
			}
			return h
		}
		for op := range 20_000 {
			h := hash()
			i := tab.find(h)
			want, ok := model[h]
			if (i >= 0) != ok || (ok && tab.entries[i].tat != want) {
				t.Fatalf("round %d op %d: find(%#x) = %d, model has %v %d", round, op, h, i, ok, want)
			}
			switch {
			case !ok:
				v := rng.Int64()
				tab.insert(h, v)
				model[h] = v
			case rng.IntN(2) == 0:
				tab.removeAt(i)
				delete(model, h)
			default:
				tab.entries[i].tat++
				model[h]++
			}
			if tab.n != len(model) {
				t.Fatalf("round %d op %d: n = %d, model %d", round, op, tab.n, len(model))
			}
		}
		for h, v := range model {
			if i := tab.find(h); i < 0 || tab.entries[i].tat != v {
				t.Fatalf("round %d: lost %#x", round, h)
			}
		}
		if 4*tab.n > 3*len(tab.entries) {
			t.Fatalf("load %d/%d above 3/4", tab.n, len(tab.entries))
		}
	}
}
