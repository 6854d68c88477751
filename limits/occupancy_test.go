package limits

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// TestOccupancyNeverUndercounts: against an exact model over many keys,
// each key's count is at least its requests in progress, and at most
// that plus the requests of the keys that share its counter; once every
// request has left, every counter is zero. Run with -race: the counters
// are shared without a lock.
func TestOccupancyNeverUndercounts(t *testing.T) {
	var o occupancy
	r := rand.New(rand.NewPCG(1, 2))
	const keys = 5000
	hashes := make([]uint64, keys)
	for i := range hashes {
		hashes[i] = r.Uint64()
	}
	// Two keys that share a counter, to see the sharing.
	a, b := hashes[0], hashes[0]+1
	for index(b) != index(a) {
		b++
	}
	o.enter(a)
	if got := o.enter(b); got != 2 {
		t.Fatalf("a key sharing a counter with one request in progress: %d, want 2", got)
	}
	o.leave(a)
	o.leave(b)

	model := make([]int, keys)
	for range 100_000 {
		i := r.IntN(keys)
		if model[i] > 0 && r.IntN(2) == 0 {
			o.leave(hashes[i])
			model[i]--
			continue
		}
		model[i]++
		if got := o.enter(hashes[i]); got < model[i] {
			t.Fatalf("key %d: %d counted, %d in progress", i, got, model[i])
		}
	}
	perSlot := map[uint64]int{}
	for i, n := range model {
		perSlot[index(hashes[i])] += n
	}
	for i, n := range model {
		if got := o.count(hashes[i]); got < n || got != perSlot[index(hashes[i])] {
			t.Fatalf("key %d: %d counted, %d in progress, %d in its counter's keys", i, got, n, perSlot[index(hashes[i])])
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < keys; i += 4 {
				for range model[i] {
					o.leave(hashes[i])
				}
			}
		})
	}
	wg.Wait()
	if n := o.total(); n != 0 {
		t.Fatalf("%d left counted after every request left", n)
	}
}
