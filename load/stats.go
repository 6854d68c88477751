package load

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted, an
// ascending slice, by the nearest-rank method: the smallest sample such that
// at least p percent of the samples are at or below it. It returns 0 for no
// samples; p <= 0 gives the smallest sample and p > 100 the largest.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every
// value is equal, 1/n when one value has everything. No values, or values
// that are all zero (everyone equally starved), give 1 for all-zero and 0 for
// none. Negative values are taken as zero.
func Jain(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, sq float64
	for _, x := range xs {
		x = max(x, 0)
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Summarize sorts durs in place and returns their percentiles.
func Summarize(durs []time.Duration) LatencySummary {
	slices.Sort(durs)
	s := LatencySummary{Count: len(durs)}
	if len(durs) == 0 {
		return s
	}
	s.P50ms = ms(Percentile(durs, 50))
	s.P95ms = ms(Percentile(durs, 95))
	s.P99ms = ms(Percentile(durs, 99))
	s.Maxms = ms(durs[len(durs)-1])
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Sample is one timed event: when it started (since the run began) and how
// long it took.
type Sample struct {
	At  time.Duration
	Dur time.Duration
}

// Bucketize groups samples by start time into buckets of width covering
// [from, to) and returns one TimeBucket per slice, empty slices included
// (Count 0, percentiles 0). Samples outside [from, to) are left out. A
// non-positive width or an empty span gives nil.
func Bucketize(samples []Sample, from, to, width time.Duration) []TimeBucket {
	if width <= 0 || to <= from {
		return nil
	}
	n := int((to - from + width - 1) / width)
	groups := make([][]time.Duration, n)
	for _, s := range samples {
		if s.At < from || s.At >= to {
			continue
		}
		i := int((s.At - from) / width)
		groups[i] = append(groups[i], s.Dur)
	}
	out := make([]TimeBucket, n)
	for i, g := range groups {
		slices.Sort(g)
		out[i] = TimeBucket{
			AtSeconds: (from + time.Duration(i)*width).Seconds(),
			Count:     len(g),
			P50ms:     ms(Percentile(g, 50)),
			P99ms:     ms(Percentile(g, 99)),
		}
	}
	return out
}

// bucketWidth picks a time-bucket width giving about 60 buckets over span,
// rounded up to a whole number of 100ms (below 10s) or seconds.
func bucketWidth(span time.Duration) time.Duration {
	w := span / 60
	switch {
	case w <= 100*time.Millisecond:
		return 100 * time.Millisecond
	case w < 10*time.Second:
		return (w + 99*time.Millisecond).Truncate(100 * time.Millisecond)
	}
	return (w + time.Second - 1).Truncate(time.Second)
}
