package load

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"sync/atomic"
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

// TestServerClock reads the server's scheduling latency histogram and CPU
// time from its metrics at two times and summarizes the waits between
// them: counts per bucket, percentiles at bucket bounds, the mean from the
// sums; a server that exports neither gives no histogram and no CPU time.
func TestServerClock(t *testing.T) {
	page := func(c1, c2, c3, total int, sum, cpu float64) string {
		return fmt.Sprintf(`# TYPE go_sched_latencies_seconds histogram
go_sched_latencies_seconds_bucket{le="0.001"} %d
go_sched_latencies_seconds_bucket{le="0.01"} %d
go_sched_latencies_seconds_bucket{le="0.1"} %d
go_sched_latencies_seconds_bucket{le="+Inf"} %d
go_sched_latencies_seconds_sum %g
go_sched_latencies_seconds_count %d
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total %g
`, c1, c2, c3, total, sum, total, cpu)
	}
	var body atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body.Load().(string)) }))
	defer hs.Close()
	adm := &admin{metrics: hs.URL, token: "x", hc: hs.Client()}
	ctx := context.Background()

	body.Store(page(10, 10, 10, 10, 0.001, 12.34))
	from, err := adm.clock(ctx)
	if err != nil || from.sched == nil {
		t.Fatalf("clock: %+v, %v", from, err)
	}
	if !from.cpuOK || from.cpu != 12.34 {
		t.Errorf("CPU time: %v, %v; want 12.34, true", from.cpu, from.cpuOK)
	}
	// 100 more waits: 90 under 1 ms, 9 under 10 ms, 1 under 100 ms,
	// 0.2 s in all.
	body.Store(page(100, 109, 110, 110, 0.201, 13))
	to, err := adm.clock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := newServerLag(from.sched, to.sched, to.schedSum-from.schedSum)
	want := LatencySummary{Count: 100, P50ms: 1, P95ms: 10, P99ms: 10, Maxms: 100}
	if l.summary == nil || *l.summary != want || math.Abs(l.meanMs-2) > 1e-9 {
		t.Errorf("server lag %+v mean %v ms; want %+v mean 2 ms", l.summary, l.meanMs, want)
	}

	body.Store("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 1\n")
	if c, err := adm.clock(ctx); err != nil || c.sched != nil || c.cpuOK {
		t.Errorf("a server without the histogram and the counter: %+v, %v; want neither", c, err)
	}
	if l := newServerLag(nil, to.sched, 1); l.summary != nil {
		t.Errorf("lag from a missing snapshot: %+v", l.summary)
	}
}
