package load

import (
	"math"
	"runtime/metrics"
)

// schedLatency is how long this process's goroutines waited, runnable, for
// a CPU (runtime/metrics /sched/latencies:seconds). A load generator that
// cannot get the CPU (the abuser's goroutines share its scheduler, other
// processes share its CPUs) adds that wait to every latency it measures,
// so the report states it beside them.
const schedLatency = "/sched/latencies:seconds"

// schedSnapshot reads the process's scheduling latency histogram so far.
func schedSnapshot() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatency}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedBetween summarizes the waits recorded between two snapshots of the
// histogram: each percentile is the upper bound of the bucket it falls in
// (the histogram's resolution), Maxms that of the highest bucket used.
func schedBetween(from, to *metrics.Float64Histogram) LatencySummary {
	if from == nil || to == nil || len(from.Counts) != len(to.Counts) {
		return LatencySummary{}
	}
	delta := make([]uint64, len(to.Counts))
	var n uint64
	for i := range delta {
		delta[i] = to.Counts[i] - from.Counts[i]
		n += delta[i]
	}
	s := LatencySummary{Count: int(n)}
	if n == 0 {
		return s
	}
	upper := func(i int) float64 {
		u := to.Buckets[i+1]
		if math.IsInf(u, 1) {
			u = to.Buckets[i]
		}
		return u * 1e3
	}
	at := func(p float64) float64 {
		rank := uint64(math.Ceil(p / 100 * float64(n)))
		var seen uint64
		for i, c := range delta {
			seen += c
			if seen >= max(rank, 1) {
				return upper(i)
			}
		}
		return upper(len(delta) - 1)
	}
	s.P50ms, s.P95ms, s.P99ms = at(50), at(95), at(99)
	for i := len(delta) - 1; i >= 0; i-- {
		if delta[i] > 0 {
			s.Maxms = upper(i)
			break
		}
	}
	return s
}

// serverLag is the server's own scheduling latency over a phase, from its
// go_sched_latencies_seconds histogram (admin.clock).
type serverLag struct {
	summary *LatencySummary // nil when the server does not export it
	meanMs  float64
}

// newServerLag summarizes the waits between two snapshots of the server's
// histogram whose sums differ by sumSeconds.
func newServerLag(from, to *metrics.Float64Histogram, sumSeconds float64) serverLag {
	if from == nil || to == nil {
		return serverLag{}
	}
	s := schedBetween(from, to)
	l := serverLag{summary: &s}
	if s.Count > 0 {
		l.meanMs = sumSeconds / float64(s.Count) * 1e3
	}
	return l
}
