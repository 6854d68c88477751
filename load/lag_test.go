package load

import (
	"math"
	"runtime/metrics"
	"testing"
)

func TestSchedBetween(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, math.Inf(1)}
	from := &metrics.Float64Histogram{Counts: []uint64{5, 0, 0, 0}, Buckets: buckets}
	// 90 waits under 1ms, 9 of 1–2ms, 1 of 2–4ms since the first snapshot.
	to := &metrics.Float64Histogram{Counts: []uint64{95, 9, 1, 0}, Buckets: buckets}
	got := schedBetween(from, to)
	want := LatencySummary{Count: 100, P50ms: 1, P95ms: 2, P99ms: 2, Maxms: 4}
	if got != want {
		t.Errorf("schedBetween = %+v, want %+v", got, want)
	}
	if got := schedBetween(to, to); got != (LatencySummary{}) {
		t.Errorf("no waits: %+v, want zero", got)
	}
	// The open last bucket counts as its lower bound.
	to.Counts[3] = 1
	if got := schedBetween(from, to); got.Maxms != 4 {
		t.Errorf("a wait in the open bucket: max %v ms, want 4", got.Maxms)
	}
	if got := schedSnapshot(); got == nil || len(got.Counts) == 0 {
		t.Errorf("this runtime has no %s histogram", schedLatency)
	}
}
