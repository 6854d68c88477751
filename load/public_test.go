package load

import (
	"net"
	"testing"
	"time"
)

// TestReaderAddrs: every reader gets its own address of 127.0.0.0/8,
// outside 127.0.0.1 and the sprayer's 127.0.0.2.
func TestReaderAddrs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < maxPublicReaders; i++ {
		a := readerAddr(i)
		if !a.IsLoopback() || a.Equal(net.IPv4(127, 0, 0, 1)) || a.String() == DefaultSprayAddr || seen[a.String()] {
			t.Fatalf("reader %d: address %s (loopback %v, seen %v)", i, a, a.IsLoopback(), seen[a.String()])
		}
		seen[a.String()] = true
	}
}

// TestPublicReport: the readers' figures per phase and the two ratios.
func TestPublicReport(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	pr := &publicReaders{cfg: PublicConfig{Readers: 2, FileBytes: 1 << 20}, phases: map[string]*publicPhase{}}
	for name, bytes := range map[string]int64{"public": 9 << 30, "token": 10 << 30} {
		p := &publicPhase{start: t0, end: t0.Add(10 * time.Second), refusals: map[string]int{}}
		p.bytes.Store(bytes)
		p.downloads.Store(bytes >> 20)
		pr.phases[name] = p
	}
	pr.phases["public"].refusals["429 rate_limited"] = 3
	phases := []PhaseReport{{Name: "baseline", DurationSeconds: 10, ServerCPUSeconds: 1}, {Name: "public", DurationSeconds: 10, ServerCPUSeconds: 4}, {Name: "token", DurationSeconds: 10, ServerCPUSeconds: 6}}
	phases[0].Honest.Latency.P99ms, phases[1].Honest.Latency.P99ms, phases[2].Honest.Latency.P99ms = 10, 15, 12
	r := pr.report(phases)
	if r.HonestP99Ratio != 1.5 || r.AnonymousVsTokenRatio != 0.9 || r.BaselineHonestP99ms != 10 || len(r.Phases) != 2 {
		t.Fatalf("report %+v", r)
	}
	pub := r.Phases[0]
	if pub.Name != "public" || pub.ServerCPUSecondsPerGiB != 3.0/9 || pub.Refusals["429 rate_limited"] != 3 || pub.Downloads != 9<<10 || pub.BytesPerSecond != float64(9<<30)/10 {
		t.Errorf("public phase %+v", pub)
	}
}
