package limits

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestTableBoundedUnderSpray(t *testing.T) {
	const maxKeys = 5000
	tbl := NewTable(maxKeys)
	r := Rate{PerSecond: 1, Burst: 5}
	n := 200_000
	if raceEnabled {
		n = 50_000
	}
	for i := range n {
		tbl.Allow(strconv.Itoa(i), r, at(time.Duration(i)*time.Millisecond))
	}
	st := tbl.Stats()
	if st.Keys > maxKeys || st.Cap > maxKeys {
		t.Fatalf("%+v: above cap %d", st, maxKeys)
	}
	if st.Evicted == 0 {
		t.Fatalf("%+v: nothing evicted", st)
	}
}

func TestKeysDoNotShareBuckets(t *testing.T) {
	r := Rate{PerSecond: 1, Burst: 3}
	tenants := NewTable(100)
	creds := NewTable(100)
	for range 3 {
		tenants.Allow("tenant-a", r, t0)
		creds.Allow("same-key", r, t0)
	}
	for _, c := range []struct {
		tbl  *Table
		key  string
		want bool
	}{
		{tenants, "tenant-a", false},
		{tenants, "tenant-b", true},
		{tenants, "same-key", true}, // another table, another bucket
		{creds, "same-key", false},
		{creds, "tenant-a", true},
	} {
		if got := c.tbl.Peek(c.key, r, t0); got.Allowed != c.want {
			t.Errorf("%q: allowed %v, want %v", c.key, got.Allowed, c.want)
		}
	}
	if got := tenants.Peek("tenant-b", r, t0).Remaining; got != 3 {
		t.Errorf("tenant-b remaining %d, want a full bucket of 3", got)
	}
}

func TestRateChangeAppliesAtOnce(t *testing.T) {
	tbl := NewTable(16)
	high := Rate{PerSecond: 100, Burst: 100}
	low := Rate{PerSecond: 1, Burst: 2}
	for range 5 {
		tbl.Allow("t", high, t0)
	}
	// Lowered live: 5 spent at 10ms each puts the TAT 50ms ahead; with
	// T = 1s, tau = 1s it is admitted, but only once more.
	if d := tbl.Allow("t", low, t0); !d.Allowed {
		t.Fatalf("first request at the lowered rate: %+v", d)
	}
	if d := tbl.Allow("t", low, t0); d.Allowed {
		t.Fatalf("second request at the lowered rate admitted: %+v", d)
	}
	// Raised live: a tolerance of 1.99s covers the 1.05s the TAT is ahead.
	if d := tbl.Allow("t", Rate{PerSecond: 100, Burst: 200}, t0); !d.Allowed {
		t.Fatalf("raised again: %+v", d)
	}
}

func TestUnlimitedRate(t *testing.T) {
	tbl := NewTable(16)
	for _, r := range []Rate{{}, {PerSecond: -1, Burst: 5}, {PerSecond: math.NaN()}} {
		for range 1000 {
			if d := tbl.Allow("k", r, t0); !d.Allowed || d.Remaining != math.MaxInt {
				t.Fatalf("%+v: %+v", r, d)
			}
		}
	}
	if n := tbl.Len(); n != 0 {
		t.Fatalf("unlimited calls tracked %d keys", n)
	}
}

func TestZeroBurstIsOne(t *testing.T) {
	tbl := NewTable(16)
	r := Rate{PerSecond: 1}
	if !tbl.Allow("k", r, t0).Allowed || tbl.Allow("k", r, t0).Allowed {
		t.Fatal("burst 0 should behave as burst 1")
	}
}

func TestExtremeRates(t *testing.T) {
	tbl := NewTable(16)
	for _, r := range []Rate{
		{PerSecond: 1e-12, Burst: math.MaxInt},
		{PerSecond: math.Inf(1), Burst: 1},
		{PerSecond: 1e18, Burst: math.MaxInt},
		{PerSecond: math.SmallestNonzeroFloat64, Burst: 1},
	} {
		for _, now := range []time.Time{t0, {}, time.Unix(1<<40, 0), time.Unix(-1<<40, 0)} {
			// A fresh key is admitted whatever the rate and time.
			if d := tbl.Allow(fmt.Sprint(r, now), r, now); !d.Allowed || d.Remaining < 0 {
				t.Errorf("%+v at %v: %+v", r, now, d)
			}
			// One key across wildly different times: no overflow.
			for _, d := range []Decision{tbl.Allow("shared", r, now), tbl.Peek("shared", r, now)} {
				if d.RetryAfter < 0 || d.Remaining < 0 || d.Allowed == (d.RetryAfter > 0) {
					t.Errorf("%+v at %v: %+v", r, now, d)
				}
			}
		}
	}
}

func TestRefund(t *testing.T) {
	r := Rate{PerSecond: 1, Burst: 2}
	tbl := NewTable(16)
	before := tbl.Peek("k", r, t0)
	tbl.Allow("k", r, t0)
	tbl.Refund("k", r)
	if after := tbl.Peek("k", r, t0); after != before {
		t.Fatalf("after Allow+Refund %+v, before %+v", after, before)
	}
	tbl.Allow("k", r, t0)
	tbl.Allow("k", r, t0)
	tbl.Refund("k", r)
	if d := tbl.Allow("k", r, t0); !d.Allowed {
		t.Fatalf("refunded unit not available: %+v", d)
	}
	if d := tbl.Allow("k", r, t0); d.Allowed {
		t.Fatalf("refund gave more than one unit: %+v", d)
	}
	tbl.Refund("unknown", r) // no-op
	if tbl.Len() != 1 {
		t.Fatal("Refund of an unknown key added it")
	}
}

func TestPeekIsReadOnly(t *testing.T) {
	r := Rate{PerSecond: 5, Burst: 3}
	tbl := NewTable(16)
	for range 100 {
		tbl.Peek("k", r, t0)
	}
	if tbl.Len() != 0 {
		t.Fatal("Peek added a key")
	}
	tbl.Allow("k", r, t0)
	want := tbl.Peek("k", r, t0)
	for range 100 {
		if got := tbl.Peek("k", r, t0); got != want {
			t.Fatalf("Peek changed state: %+v then %+v", want, got)
		}
	}
}

func TestTableConcurrentKeys(t *testing.T) {
	// Many goroutines on many keys, with eviction pressure: run under -race.
	tbl := NewTable(256)
	r := Rate{PerSecond: 100, Burst: 3}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 5000 {
				now := at(time.Duration(i) * time.Millisecond)
				key := strconv.Itoa((g*7919 + i) % 1000)
				tbl.Allow(key, r, now)
				tbl.Peek(key, r, now)
				if i%100 == 0 {
					tbl.Refund(key, r)
				}
			}
		})
	}
	wg.Wait()
	if st := tbl.Stats(); st.Keys > 256 {
		t.Fatalf("%+v above cap", st)
	}
}

// TestSecondChance: in a full shard, throttled keys at the old end are
// moved aside, so a newcomer finds the evictable keys behind them within
// a few attempts, and the throttled keys are never dropped.
func TestSecondChance(t *testing.T) {
	slow := Rate{PerSecond: 1.0 / 3600, Burst: 1}
	fast := Rate{PerSecond: 1000, Burst: 1}
	tbl := NewTable(32) // one shard of 32
	for i := range 16 {
		tbl.Allow("slow"+strconv.Itoa(i), slow, t0) // throttled for an hour
	}
	for i := range 16 {
		tbl.Allow("fast"+strconv.Itoa(i), fast, t0) // full again after 1ms
	}
	now := at(time.Second)
	admitted := 0
	for attempt := range 4 {
		if tbl.Allow("new"+strconv.Itoa(attempt), fast, now).Allowed {
			admitted++
		}
	}
	if admitted == 0 {
		t.Fatalf("no newcomer admitted in 4 attempts: %+v", tbl.Stats())
	}
	for i := range 16 {
		if d := tbl.Peek("slow"+strconv.Itoa(i), slow, now); d.Allowed {
			t.Fatalf("slow%d was evicted", i)
		}
	}
}
