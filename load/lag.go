package load

import (
	"context"
	"sync"
	"time"
)

// lagProbe measures how late this process's own timers fire: a load
// generator that cannot get the CPU (the abuser's goroutines share its
// scheduler, other processes share its CPUs) adds that delay to every
// latency it measures, so the report states it beside them.
type lagProbe struct {
	t0 time.Time
	// Now reads the clock; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	samples []Sample // At: when the timer was due, since t0; Dur: how late it fired
}

// lagEvery is how often the probe's timer is due.
const lagEvery = 10 * time.Millisecond

// run samples until ctx is done.
func (l *lagProbe) run(ctx context.Context) {
	clock := l.Now
	if clock == nil {
		clock = time.Now
	}
	t := time.NewTimer(lagEvery)
	defer t.Stop()
	due := clock().Add(lagEvery)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The time the timer sends is when it fired; what the load
			// feels is when this goroutine got to run.
			now := clock()
			l.mu.Lock()
			l.samples = append(l.samples, Sample{At: due.Sub(l.t0), Dur: max(now.Sub(due), 0)})
			l.mu.Unlock()
			due = now.Add(lagEvery)
			t.Reset(lagEvery)
		}
	}
}

// in summarizes the lag of the timers due within p.
func (l *lagProbe) in(p phaseSpan) LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d []time.Duration
	for _, s := range l.samples {
		if p.has(s.At) {
			d = append(d, s.Dur)
		}
	}
	return Summarize(d)
}
