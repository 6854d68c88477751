package limits

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the start of every fixed timeline. It has no monotonic reading,
// like times built by tests; production passes time.Now() values.
var t0 = time.Date(2026, 11, 5, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestTableSteps(t *testing.T) {
	r := Rate{PerSecond: 10, Burst: 3} // T = 100ms, tau = 200ms
	type step struct {
		at   time.Duration
		peek bool
		want Decision
	}
	ok := func(rem int) Decision { return Decision{Allowed: true, Remaining: rem, Limit: r} }
	no := func(wait time.Duration) Decision { return Decision{RetryAfter: wait, Limit: r} }
	steps := []step{
		{at: 0, peek: true, want: ok(3)}, // unknown key: a full bucket
		{at: 0, want: ok(2)},
		{at: 0, want: ok(1)},
		{at: 0, want: ok(0)},
		{at: 0, want: no(100 * time.Millisecond)},
		{at: 0, peek: true, want: no(100 * time.Millisecond)},
		{at: 99 * time.Millisecond, want: no(time.Millisecond)},
		{at: 100 * time.Millisecond, peek: true, want: ok(1)},
		{at: 100 * time.Millisecond, want: ok(0)},
		{at: 150 * time.Millisecond, want: no(50 * time.Millisecond)},
		{at: 400 * time.Millisecond, want: ok(2)}, // full again, one spent
		{at: 10 * time.Second, want: ok(2)},       // long idle: full, never more than burst
		{at: 10 * time.Second, want: ok(1)},
		{at: 10 * time.Second, want: ok(0)},
		{at: 10 * time.Second, want: no(100 * time.Millisecond)},
		// a stale time is stricter, never looser
		{at: 9 * time.Second, want: no(time.Second + 100*time.Millisecond)},
	}
	tbl := NewTable(100)
	for i, s := range steps {
		var got Decision
		if s.peek {
			got = tbl.Peek("k", r, at(s.at))
		} else {
			got = tbl.Allow("k", r, at(s.at))
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Fatalf("step %d (at %v, peek %v): decision mismatch (-want +got):\n%s", i, s.at, s.peek, diff)
		}
	}
}

// TestAccurateNotUntil is governor's accurate_not_until property: after a
// key's bucket is exhausted, the request is refused at every fraction of
// the reported wait and admitted exactly at now+RetryAfter, and the whole
// seconds of Retry-After are rounded up.
func TestAccurateNotUntil(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2026))
	iterations := 300
	if raceEnabled {
		iterations = 100
	}
	for it := range iterations {
		// log-uniform over 0.1..5000 per second
		r := Rate{PerSecond: 0.1 * math.Pow(50000, rng.Float64()), Burst: 1 + rng.IntN(5000)}
		if it%4 == 0 {
			r.Burst = 1 + rng.IntN(10)
		}
		tbl := NewTable(16)
		now := t0
		// Extra steps: spend part of the bucket, let some of it refill.
		for range rng.IntN(r.Burst) {
			tbl.Allow("k", r, now)
		}
		now = now.Add(time.Duration(rng.Int64N(int64(float64(time.Second) * float64(r.Burst) / r.PerSecond))))
		// Exhaust.
		n := 0
		for tbl.Allow("k", r, now).Allowed {
			n++
			if n > r.Burst {
				t.Fatalf("case %d %+v: admitted %d > burst at one instant", it, r, n)
			}
		}
		d := tbl.Allow("k", r, now)
		wait := d.RetryAfter
		if d.Allowed || wait <= 0 || d.Remaining != 0 {
			t.Fatalf("case %d %+v: after exhaustion got %+v, want a refusal with a positive wait", it, r, d)
		}
		// Refused at every fraction of the wait, with the wait counting down exactly.
		fractions := []float64{0, 0.5, 0.9, 0.999}
		for range 8 {
			fractions = append(fractions, rng.Float64())
		}
		for _, f := range fractions {
			elapsed := time.Duration(float64(wait) * f)
			if elapsed >= wait {
				continue
			}
			got := tbl.Allow("k", r, now.Add(elapsed))
			if got.Allowed || got.RetryAfter != wait-elapsed {
				t.Fatalf("case %d %+v: at %v of wait %v got %+v, want refused with RetryAfter %v", it, r, elapsed, wait, got, wait-elapsed)
			}
		}
		if got := tbl.Allow("k", r, now.Add(wait-1)); got.Allowed || got.RetryAfter != 1 {
			t.Fatalf("case %d %+v: 1ns before the wait got %+v", it, r, got)
		}
		// Retry-After header: ceil, at least 1, and a retry then succeeds.
		secs := RetryAfterSeconds(d.RetryAfter)
		wantSecs := int(math.Ceil(wait.Seconds()))
		if secs != max(wantSecs, 1) || secs < 1 {
			t.Fatalf("case %d %+v: RetryAfterSeconds() = %d for %v, want %d", it, r, secs, wait, max(wantSecs, 1))
		}
		if got := tbl.Peek("k", r, now.Add(time.Duration(secs)*time.Second)); !got.Allowed {
			t.Fatalf("case %d %+v: retry after %ds refused: %+v", it, r, secs, got)
		}
		// Admitted exactly at the wait, then refused again.
		if got := tbl.Allow("k", r, now.Add(wait)); !got.Allowed {
			t.Fatalf("case %d %+v: at exactly the wait %v got %+v", it, r, wait, got)
		}
		if got := tbl.Allow("k", r, now.Add(wait)); got.Allowed {
			t.Fatalf("case %d %+v: second request at the wait admitted", it, r)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{2500 * time.Millisecond, 3},
		{time.Hour, 3600},
		{time.Duration(math.MaxInt64), math.MaxInt32},
	} {
		if got := RetryAfterSeconds(c.d); got != c.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// TestRatePolicyAgreesWithDecisions: the quota and window that Policy
// reports (RateLimit-Policy) are what the limiter does, at the bounds of a
// configurable rate and beyond them (where the GCRA clamps): a fresh key
// is admitted quota requests at once, a drained key waits one
// window/quota for the next, and is full again exactly one window after
// it was drained. Before, the header computed its window from the float
// rate (w=1000000000 at 1e-9/s) while Retry-After came from the clamped
// interval (4503600 s).
func TestRatePolicyAgreesWithDecisions(t *testing.T) {
	for _, r := range []Rate{
		{PerSecond: MinRequestsPerSecond, Burst: 1},
		{PerSecond: MinRequestsPerSecond, Burst: 3},
		{PerSecond: MaxRequestsPerSecond, Burst: 1},
		{PerSecond: MaxRequestsPerSecond, Burst: 100},
		{PerSecond: 0.5, Burst: 2},
		{PerSecond: 3, Burst: 7},       // interval rounded up to 333333334ns
		{PerSecond: 1e-9, Burst: 1},    // interval clamped
		{PerSecond: 1e-300, Burst: 2},  // interval clamped
		{PerSecond: 1e12, Burst: 5},    // interval clamped to 1ns
		{PerSecond: 1, Burst: 1 << 40}, // tolerance clamped
		{PerSecond: 1e-3, Burst: 1e9},  // tolerance clamped
	} {
		quota, window := r.Policy()
		if quota < 1 || window <= 0 || window%time.Duration(quota) != 0 {
			t.Fatalf("%+v: Policy() = %d, %v", r, quota, window)
		}
		interval := window / time.Duration(quota)
		tbl := NewTable(0)
		d := tbl.Allow("k", r, t0)
		if !d.Allowed || d.Remaining != quota-1 {
			t.Fatalf("%+v: first request %+v, want admitted with %d remaining", r, d, quota-1)
		}
		if quota > 1000 {
			continue // too many to drain one by one; the remaining count above is the check
		}
		for i := 1; i < quota; i++ {
			if d := tbl.Allow("k", r, t0); !d.Allowed {
				t.Fatalf("%+v: request %d of the quota refused", r, i+1)
			}
		}
		d = tbl.Allow("k", r, t0)
		if d.Allowed || d.RetryAfter != interval {
			t.Fatalf("%+v: past the quota %+v, want refused for %v", r, d, interval)
		}
		if RetryAfterSeconds(d.RetryAfter) > RetryAfterSeconds(window) || (quota == 1 && RetryAfterSeconds(d.RetryAfter) != RetryAfterSeconds(window)) {
			t.Fatalf("%+v: Retry-After %d against a window of %d", r, RetryAfterSeconds(d.RetryAfter), RetryAfterSeconds(window))
		}
		if got := tbl.Peek("k", r, t0.Add(window-1)); got.Remaining == quota {
			t.Fatalf("%+v: full again before the window: %+v", r, got)
		}
		if got := tbl.Peek("k", r, t0.Add(window)); !got.Allowed || got.Remaining != quota {
			t.Fatalf("%+v: one window after draining %+v, want %d remaining", r, got, quota)
		}
	}
}

// checkEnvelope asserts that no window between two admissions holds more
// than burst + rate·W (+1) admissions. admitted must be in time order.
// With f(k) = k - rate·t_k, the condition for admissions i <= j,
// j-i+1 <= burst + rate·(t_j-t_i) + 1, is f(j) - f(i) <= burst, so a
// running minimum of f checks every window in one pass.
func checkEnvelope(t *testing.T, name string, r Rate, admitted []time.Time) {
	t.Helper()
	if err := envelopeError(r, admitted); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func envelopeError(r Rate, admitted []time.Time) error {
	minF, minAt := math.Inf(1), 0
	for j, tj := range admitted {
		if j > 0 && tj.Before(admitted[j-1]) {
			return fmt.Errorf("admissions out of order")
		}
		f := float64(j) - r.PerSecond*tj.Sub(t0).Seconds()
		if f < minF {
			minF, minAt = f, j
		}
		if f-minF > float64(r.Burst)+1e-6 {
			w := tj.Sub(admitted[minAt]).Seconds()
			return fmt.Errorf("%d admissions in a window of %.6fs, envelope is %v + %v·W", j-minAt+1, w, r.Burst, r.PerSecond)
		}
	}
	return nil
}

// TestEnvelopeChecker shows checkEnvelope can fail.
func TestEnvelopeChecker(t *testing.T) {
	r := Rate{PerSecond: 10, Burst: 2}
	ok := []time.Time{at(0), at(0), at(100 * time.Millisecond), at(150 * time.Millisecond)} // 4 <= 2 + 1.5 + 1
	bad := []time.Time{at(0), at(0), at(0), at(0)}                                          // 4 > 2 + 0 + 1
	late := []time.Time{at(0), at(time.Second), at(time.Second), at(time.Second), at(time.Second)}
	if err := envelopeError(r, ok); err != nil {
		t.Errorf("within the envelope: %v", err)
	}
	if err := envelopeError(r, bad); err == nil {
		t.Error("4 at one instant with burst 2 passed")
	}
	if err := envelopeError(r, late); err == nil {
		t.Error("4 at one later instant with burst 2 passed")
	}
}

func TestEnvelope(t *testing.T) {
	rates := []Rate{
		{PerSecond: 500, Burst: 1},
		{PerSecond: 3, Burst: 5}, // T = 333,333,333.3ns: rounding
		{PerSecond: 0.5, Burst: 2},
		{PerSecond: 1000, Burst: 100},
		{PerSecond: 7, Burst: 1},
	}
	// Arrival patterns over 5 seconds (except "greedy", which follows
	// RetryAfter and is also the lower-bound check).
	patterns := map[string]func(rng *rand.Rand, r Rate) []time.Duration{
		"every 250us": func(_ *rand.Rand, _ Rate) []time.Duration {
			var out []time.Duration
			for d := time.Duration(0); d < 5*time.Second; d += 250 * time.Microsecond {
				out = append(out, d)
			}
			return out
		},
		"idle then bursts": func(rng *rand.Rand, r Rate) []time.Duration {
			var out []time.Duration
			for d := time.Duration(0); d < 5*time.Second; d += time.Duration(rng.Int64N(int64(time.Second))) {
				for range 2*r.Burst + 10 {
					out = append(out, d)
				}
			}
			return out
		},
		"random": func(rng *rand.Rand, _ Rate) []time.Duration {
			var out []time.Duration
			for d := time.Duration(0); d < 5*time.Second; d += time.Duration(rng.Int64N(int64(2 * time.Millisecond))) {
				out = append(out, d)
			}
			return out
		},
	}
	rng := rand.New(rand.NewPCG(4, 5))
	for _, r := range rates {
		for name, pattern := range patterns {
			tbl := NewTable(16)
			var admitted []time.Time
			for _, d := range pattern(rng, r) {
				if tbl.Allow("k", r, at(d)).Allowed {
					admitted = append(admitted, at(d))
				}
			}
			checkEnvelope(t, fmt.Sprintf("%+v %s", r, name), r, admitted)
		}

		// Greedy client: retries exactly when told. Over 5 s it must get
		// at least 0.999 of the ideal burst + rate·elapsed, truncated as in
		// x/time/rate's TestLongRunningQPS (the emission interval is
		// rounded up to whole nanoseconds, so a request due exactly at the
		// end may fall just past it), and no more than ideal + 1.
		tbl := NewTable(16)
		now := t0
		end := at(5 * time.Second)
		var admitted []time.Time
		for !now.After(end) {
			d := tbl.Allow("k", r, now)
			if d.Allowed {
				admitted = append(admitted, now)
				continue
			}
			now = now.Add(d.RetryAfter)
		}
		checkEnvelope(t, fmt.Sprintf("%+v greedy", r), r, admitted)
		ideal := float64(r.Burst) + r.PerSecond*end.Sub(t0).Seconds()
		if n := float64(len(admitted)); n < math.Floor(0.999*ideal) || n > ideal+1 {
			t.Errorf("%+v greedy: admitted %v over 5s, ideal %v", r, n, ideal)
		}
	}
}

// TestStaleTimestamps covers the x/time/rate defect docs/design.md §4 warns
// of: a caller holding an older now must not create allowance.
func TestStaleTimestamps(t *testing.T) {
	t.Run("alternating", func(t *testing.T) {
		r := Rate{PerSecond: 10, Burst: 10}
		tbl := NewTable(16)
		for i := range 10 {
			if !tbl.Allow("k", r, t0).Allowed {
				t.Fatalf("drain: request %d refused", i)
			}
		}
		admitted := 0
		for i := 1; i <= 5; i++ {
			now := at(time.Duration(i) * 100 * time.Millisecond)
			for _, ts := range []time.Time{now, now.Add(-100 * time.Millisecond)} {
				if tbl.Allow("k", r, ts).Allowed {
					admitted++
				}
			}
		}
		if admitted != 5 {
			t.Fatalf("admitted %d in 500ms with alternating stale times, want 5 (x/time/rate gives 10)", admitted)
		}
	})
	t.Run("random lag", func(t *testing.T) {
		r := Rate{PerSecond: 1000, Burst: 100}
		tbl := NewTable(16)
		rng := rand.New(rand.NewPCG(7, 7))
		admitted := 0
		lo, hi := at(time.Hour), at(-time.Hour)
		for i := range 40000 {
			real := at(time.Duration(i) * 50 * time.Microsecond)
			now := real.Add(-time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			lo, hi = minTime(lo, now), maxTime(hi, now)
			if tbl.Allow("k", r, now).Allowed {
				admitted++
			}
		}
		bound := float64(r.Burst) + r.PerSecond*hi.Sub(lo).Seconds() + 1
		if float64(admitted) > bound {
			t.Fatalf("admitted %d with lagging times, bound %v", admitted, bound)
		}
	})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestContention hammers one key from 2048 goroutines in real time. It
// asserts only an upper bound, which timing cannot make flaky: every now
// lies in [start, end], so at most burst + rate·(end-start) may pass.
func TestContention(t *testing.T) {
	r := Rate{PerSecond: 20000, Burst: 100}
	tbl := NewTable(16)
	const goroutines = 2048
	run := 300 * time.Millisecond
	var admitted, calls atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for {
				now := time.Now()
				if now.Sub(start) > run {
					return
				}
				calls.Add(1)
				if tbl.Allow("hot", r, now).Allowed {
					admitted.Add(1)
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := (float64(r.Burst) + r.PerSecond*elapsed.Seconds()) * 1.01
	t.Logf("%d goroutines, %v: %d calls, %d admitted, bound %.0f", goroutines, elapsed, calls.Load(), admitted.Load(), bound)
	if float64(admitted.Load()) > bound {
		t.Fatalf("admitted %d in %v, more than 1.01 × (burst + rate·elapsed) = %.0f", admitted.Load(), elapsed, bound)
	}
}

// TestThrottledKeyNotResetByEviction is Envoy gateway's test (issue
// #9973): exhaust one key, churn many others through a tiny table, and the
// first key must still be refused.
func TestThrottledKeyNotResetByEviction(t *testing.T) {
	slow := Rate{PerSecond: 1.0 / 60, Burst: 2} // T = 60s
	cases := []struct {
		name  string
		churn Rate
		step  time.Duration // time between churn keys
	}{
		// Churned keys refill after 10ms, so they are evicted as they go.
		{name: "evictable churn", churn: Rate{PerSecond: 100, Burst: 1}, step: 10 * time.Millisecond},
		// Churned keys stay throttled: the table fills and refuses newcomers.
		{name: "throttled churn", churn: Rate{PerSecond: 1.0 / 60, Burst: 1}, step: time.Microsecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const maxKeys = 8
			tbl := NewTable(maxKeys)
			for range 2 {
				tbl.Allow("A", slow, t0)
			}
			if d := tbl.Allow("A", slow, t0); d.Allowed {
				t.Fatal("A not exhausted")
			}
			now := t0
			for i := range 5000 {
				now = now.Add(c.step)
				tbl.Allow("churn-"+strconv.Itoa(i), c.churn, now)
				if n := tbl.Len(); n > maxKeys {
					t.Fatalf("churn %d: %d keys tracked, cap %d", i, n, maxKeys)
				}
				if i%250 == 0 {
					if d := tbl.Peek("A", slow, now); d.Allowed {
						t.Fatalf("churn %d at %v: A admitted again (got a fresh bucket)", i, now.Sub(t0))
					}
				}
			}
			// A's state survived exactly: admissible again 60s after t0.
			want := Decision{RetryAfter: at(60 * time.Second).Sub(now), Limit: slow}
			if diff := cmp.Diff(want, tbl.Allow("A", slow, now)); diff != "" {
				t.Fatalf("A after churn (-want +got):\n%s", diff)
			}
			st := tbl.Stats()
			t.Logf("%+v", st)
			if c.name == "evictable churn" && st.Evicted == 0 {
				t.Errorf("no evictions: %+v", st)
			}
			if c.name == "throttled churn" {
				if st.Full == 0 {
					t.Errorf("no refusals of new keys in a full table: %+v", st)
				}
				d := tbl.Allow("newcomer", c.churn, now)
				if d.Allowed || d.RetryAfter <= 0 {
					t.Errorf("newcomer in a table full of throttled keys: %+v, want refused with a wait", d)
				}
			}
		})
	}
}

// TestEvictedIdleKeyIsFresh: a key evicted once its bucket refilled behaves
// exactly like a key never seen.
func TestEvictedIdleKeyIsFresh(t *testing.T) {
	r := Rate{PerSecond: 10, Burst: 4}
	tbl := NewTable(1) // one shard, one key
	for range 4 {
		tbl.Allow("a", r, t0)
	}
	// b cannot get in while a is throttled.
	if d := tbl.Allow("b", r, t0); d.Allowed || d.RetryAfter != 400*time.Millisecond {
		t.Fatalf("b while a throttled: %+v, want refused for 400ms (until a is full again)", d)
	}
	// At 400ms a's bucket is full again; b evicts it.
	if d := tbl.Allow("b", r, at(400*time.Millisecond)); !d.Allowed {
		t.Fatalf("b after a refilled: %+v", d)
	}
	if got := tbl.Stats().Evicted; got != 1 {
		t.Fatalf("evicted %d, want 1", got)
	}
	fresh := NewTable(1)
	for i := range 6 {
		now := at(time.Second + time.Duration(i)*time.Millisecond)
		// b is full again by now, so a may evict it.
		want := fresh.Allow("a", r, now)
		if got := tbl.Allow("a", r, now); got != want {
			t.Fatalf("request %d of evicted key: %+v, fresh key: %+v", i, got, want)
		}
	}
}
