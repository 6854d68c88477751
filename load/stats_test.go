package load

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ten := make([]time.Duration, 10)
	for i := range ten {
		ten[i] = time.Duration(i+1) * time.Millisecond
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample p50", []time.Duration{7}, 50, 7},
		{"one sample p99", []time.Duration{7}, 99, 7},
		{"ten p50 is the 5th", ten, 50, 5 * time.Millisecond},
		{"ten p90 is the 9th", ten, 90, 9 * time.Millisecond},
		{"ten p95 rounds up to the 10th", ten, 95, 10 * time.Millisecond},
		{"ten p99 is the largest", ten, 99, 10 * time.Millisecond},
		{"ten p100", ten, 100, 10 * time.Millisecond},
		{"ten p0 is the smallest", ten, 0, time.Millisecond},
		{"ten p over 100 is the largest", ten, 150, 10 * time.Millisecond},
		{"hundred p99", hundred, 99, 99 * time.Millisecond},
		{"hundred p99.5 rounds up", hundred, 99.5, 100 * time.Millisecond},
		{"hundred p1", hundred, 1, time.Millisecond},
		{"hundred p1.01 rounds up", hundred, 1.01, 2 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.sorted, c.p); got != c.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", c.p, got, c.want)
			}
		})
	}
}

func TestJain(t *testing.T) {
	cases := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"none", nil, 0},
		{"all equal", []float64{3, 3, 3, 3}, 1},
		{"one of four has everything", []float64{0, 0, 8, 0}, 0.25},
		{"half have everything", []float64{2, 2, 0, 0}, 0.5},
		{"all zero is equal starvation", []float64{0, 0, 0}, 1},
		{"negative counts as zero", []float64{-5, 4}, 0.5},
		// (1+2+3+4)^2 / (4 * (1+4+9+16)) = 100/120.
		{"ramp", []float64{1, 2, 3, 4}, 100.0 / 120},
		{"single value", []float64{42}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Jain(c.xs); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
			}
		})
	}
}

// TestJainBounds is the envelope: 1/n <= J <= 1 for any non-negative input
// with a positive sum.
func TestJainBounds(t *testing.T) {
	for n := 1; n <= 50; n++ {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64((i*7919)%13) + 0.5
		}
		j := Jain(xs)
		if j < 1/float64(n)-1e-12 || j > 1+1e-12 {
			t.Fatalf("n=%d: Jain %v outside [1/n, 1]", n, j)
		}
	}
}

func TestSummarize(t *testing.T) {
	durs := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	got := Summarize(durs)
	want := LatencySummary{Count: 5, P50ms: 3, P95ms: 5, P99ms: 5, Maxms: 5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Summarize (-want +got):\n%s", diff)
	}
	if z := Summarize(nil); z != (LatencySummary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestBucketize(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{At: 0, Dur: 10 * ms},
		{At: 999 * ms, Dur: 20 * ms},
		{At: time.Second, Dur: 30 * ms}, // first of the second bucket
		{At: 2500 * ms, Dur: 40 * ms},   // third bucket
		{At: 2600 * ms, Dur: 50 * ms},
		{At: -time.Millisecond, Dur: time.Hour}, // before the span: left out
		{At: 3 * time.Second, Dur: time.Hour},   // at the end: left out
	}
	got := Bucketize(samples, 0, 3*time.Second, time.Second)
	want := []TimeBucket{
		{AtSeconds: 0, Count: 2, P50ms: 10, P99ms: 20},
		{AtSeconds: 1, Count: 1, P50ms: 30, P99ms: 30},
		{AtSeconds: 2, Count: 2, P50ms: 40, P99ms: 50},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Bucketize (-want +got):\n%s", diff)
	}

	t.Run("empty buckets are kept", func(t *testing.T) {
		got := Bucketize([]Sample{{At: 2500 * ms, Dur: ms}}, time.Second, 3500*ms, time.Second)
		want := []TimeBucket{{AtSeconds: 1}, {AtSeconds: 2, Count: 1, P50ms: 1, P99ms: 1}, {AtSeconds: 3}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("no span", func(t *testing.T) {
		if got := Bucketize(samples, time.Second, time.Second, time.Second); got != nil {
			t.Errorf("got %v, want nil", got)
		}
		if got := Bucketize(samples, 0, time.Second, 0); got != nil {
			t.Errorf("zero width: got %v, want nil", got)
		}
	})
}

func TestBucketWidth(t *testing.T) {
	cases := []struct {
		span, want time.Duration
	}{
		{time.Second, 100 * time.Millisecond},
		{6 * time.Second, 100 * time.Millisecond},
		{20 * time.Second, 400 * time.Millisecond},
		{41 * time.Second, 700 * time.Millisecond},
		{2 * time.Minute, 2 * time.Second},
		{10 * time.Minute, 10 * time.Second},
		{11 * time.Minute, 11 * time.Second},
	}
	for _, c := range cases {
		if got := bucketWidth(c.span); got != c.want {
			t.Errorf("bucketWidth(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}

// TestHonestRoutes: the report's route tables list the routes the honest
// tenants record, in order.
func TestHonestRoutes(t *testing.T) {
	want := []string{routeXorb, routeShard, routeReconstruction, routeFetch, routeDedup}
	if !slices.Equal(honestRoutes, want) {
		t.Errorf("report.HonestRoutes = %v, want %v", honestRoutes, want)
	}
}
