package report

import (
	"bytes"
	"html"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{3, 3, []float64{3}},
		{0, 550, []float64{0, 100, 200, 300, 400, 500}},
	}
	for _, c := range cases {
		got := niceTicks(c.lo, c.hi, 6)
		if len(got) != len(c.want) {
			t.Errorf("niceTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
			continue
		}
		for i := range got {
			if d := got[i] - c.want[i]; d > 1e-9 || d < -1e-9 {
				t.Errorf("niceTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
				break
			}
		}
	}
}

// memoryOnly returns the abuse report of testdata with the memory of a run whose server
// has a budget of budget bytes and peaked at peakRSS and peakReserved.
func memoryOnly(t *testing.T, budget, overhead, peakRSS, peakReserved int64) *Report {
	t.Helper()
	r := readReport(t, "abuse")
	r.Memory = MemoryReport{Measured: true, BudgetBytes: budget, OverheadBytes: overhead, LimitBytes: budget + max(overhead, 0),
		PeakRSSBytes: peakRSS, PeakReservedBytes: peakReserved,
		Samples: []MemSample{{0, peakRSS / 4, 0, budget}, {2, peakRSS, peakReserved, budget}, {4, peakRSS / 2, peakReserved / 3, budget}}}
	return r
}

// TestMemoryChartScale: the memory plot's y axis follows what was observed
// (up to 1.2 × the peak), so RSS and reserved bytes can be read however
// large the budget; a budget or limit line is drawn only when it is within
// twice the peak, and the page says when it is left off the scale.
func TestMemoryChartScale(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name                string
		budget, overhead    int64
		peakRSS, peakRes    int64
		wantY1              float64 // MiB
		wantRules, wantNote []string
	}{
		{"4GiB budget, 300MiB used", 4 << 30, 256 * mib, 300 * mib, 80 * mib, 360, nil, []string{"budget (4GiB)", "limit (4.25GiB)"}},
		{"budget in reach, limit not", 512 * mib, 256 * mib, 300 * mib, 80 * mib, 512 * 1.05, []string{"budget"}, []string{"limit (768MiB)"}},
		{"both in reach", 512 * mib, 64 * mib, 400 * mib, 80 * mib, 576 * 1.05, []string{"budget", "budget + overhead"}, nil},
		{"over the limit", 256 * mib, 64 * mib, 400 * mib, 80 * mib, 480, []string{"budget", "budget + overhead"}, nil},
		{"no RSS check", 4 << 30, -1, 300 * mib, 80 * mib, 360, nil, []string{"budget (4GiB)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := memoryOnly(t, c.budget, c.overhead, c.peakRSS, c.peakRes)
			p, off := memoryPlot(r)
			if math.Abs(p.y1-c.wantY1) > 1e-6 {
				t.Errorf("y axis up to %v MiB, want %v", p.y1, c.wantY1)
			}
			var rules []string
			for _, rl := range p.rules {
				rules = append(rules, rl.name)
				if rl.y > p.y1 {
					t.Errorf("rule %s at %v is above the axis (%v)", rl.name, rl.y, p.y1)
				}
			}
			if !slices.Equal(rules, c.wantRules) {
				t.Errorf("rules %v, want %v", rules, c.wantRules)
			}
			var b bytes.Buffer
			if err := r.WriteHTML(&b); err != nil {
				t.Fatal(err)
			}
			page := b.String()
			for _, n := range c.wantNote {
				if !strings.Contains(off, n) || !strings.Contains(page, html.EscapeString(n)) {
					t.Errorf("the page does not say %q is off the scale: note %q", n, off)
				}
			}
			if len(c.wantNote) == 0 && off != "" {
				t.Errorf("note %q, want none", off)
			}
		})
	}
}
