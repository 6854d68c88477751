package limits

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
)

func TestInFlight(t *testing.T) {
	f := NewInFlight()
	const max = 3
	type step struct {
		op    string // acquire, release
		key   string
		want  bool // acquire's result
		count int  // Count(key) after the step
	}
	steps := []step{
		{"acquire", "c1", true, 1},
		{"acquire", "c1", true, 2},
		{"acquire", "c1", true, 3},
		{"acquire", "c1", false, 3}, // max+1 refused, nothing counted
		{"acquire", "c2", true, 1},  // another key is not affected
		{"release", "c1", false, 2},
		{"acquire", "c1", true, 3}, // release frees a slot
		{"release", "c1", false, 2},
		{"release", "c1", false, 1},
		{"release", "c1", false, 0},
		{"release", "c1", false, 0}, // unbalanced release is a no-op
		{"release", "c2", false, 0},
	}
	for i, s := range steps {
		switch s.op {
		case "acquire":
			if got := f.Acquire(s.key, max); got != s.want {
				t.Fatalf("step %d: Acquire(%q) = %v, want %v", i, s.key, got, s.want)
			}
		case "release":
			f.Release(s.key)
		}
		if got := f.Count(s.key); got != s.count {
			t.Fatalf("step %d: Count(%q) = %d, want %d", i, s.key, got, s.count)
		}
	}
	st := f.Stats()
	if st.Keys != 0 || st.InFlight != 0 || st.Acquired != 5 || st.Refused != 1 {
		t.Fatalf("stats %+v, want no keys, 5 acquired, 1 refused", st)
	}
}

func TestInFlightUnlimitedAndLoweredCap(t *testing.T) {
	f := NewInFlight()
	for range 1000 {
		if !f.Acquire("k", 0) {
			t.Fatal("max 0 refused")
		}
	}
	if got := f.Count("k"); got != 1000 {
		t.Fatalf("count %d, want 1000 (unlimited requests are still counted)", got)
	}
	if f.Acquire("k", 10) {
		t.Fatal("lowered cap below the count admitted")
	}
	for range 1000 {
		f.Release("k")
	}
	if f.Len() != 0 {
		t.Fatal("entry left after all releases")
	}
}

func TestInFlightConcurrent(t *testing.T) {
	f := NewInFlight()
	const limit = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	high := map[string]int{}
	for g := range 64 {
		wg.Go(func() {
			key := "c" + strconv.Itoa(g%4)
			for range 500 {
				if f.Acquire(key, limit) {
					n := f.Count(key)
					mu.Lock()
					high[key] = max(high[key], n)
					mu.Unlock()
					f.Release(key)
				}
			}
		})
	}
	wg.Wait()
	for k, n := range high {
		if n > limit {
			t.Errorf("%s reached %d in flight, cap %d", k, n, limit)
		}
	}
	if st := f.Stats(); st.Keys != 0 || st.InFlight != 0 {
		t.Fatalf("after all releases: %+v", st)
	}
}

// TestInFlightManyKeys checks the counts against a model while thousands
// of keys come and go in random order, so that each shard's table grows,
// probes past collisions and shifts entries back on removal.
func TestInFlightManyKeys(t *testing.T) {
	f := NewInFlight()
	r := rand.New(rand.NewPCG(1, 2))
	keys := hexKeys("m", 5000)
	model := map[string]int{}
	const max = 4
	check := func() {
		t.Helper()
		total := 0
		for _, k := range keys {
			if got := f.Count(k); got != model[k] {
				t.Fatalf("Count(%s) = %d, want %d", k, got, model[k])
			}
			total += model[k]
		}
		if st := f.Stats(); st.Keys != len(model) || st.InFlight != total {
			t.Fatalf("stats %+v, want %d keys and %d in flight", st, len(model), total)
		}
	}
	for round := range 20 {
		for range 20_000 {
			k := keys[r.IntN(len(keys))]
			if r.IntN(2) == 0 {
				if got, want := f.Acquire(k, max), model[k] < max; got != want {
					t.Fatalf("round %d: Acquire(%s) = %v with %d in flight", round, k, got, model[k])
				}
				if model[k] < max {
					model[k]++
				}
			} else {
				f.Release(k)
				if model[k] > 1 {
					model[k]--
				} else {
					delete(model, k)
				}
			}
		}
		check()
	}
	for k, n := range model {
		for range n {
			f.Release(k)
		}
		delete(model, k)
	}
	check()
}
