package load

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLagProbe: in a bubble timers fire exactly on time, so the probe
// records one sample per 10ms with no lag, and a phase sees only its own.
func TestLagProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lagProbe{t0: time.Now()}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.run(ctx) }()
		<-time.After(time.Second + time.Millisecond)
		cancel()
		<-done
		all := l.in(phaseSpan{start: 0, end: time.Hour})
		if all.Count != 100 || all.Maxms != 0 {
			t.Errorf("a second of probing: %+v, want 100 samples, none late", all)
		}
		if half := l.in(phaseSpan{start: 500 * time.Millisecond, end: time.Second}); half.Count != 50 {
			t.Errorf("half a second: %d samples, want 50", half.Count)
		}
	})
}

// TestLagProbeReadsTheClockWhenItRuns: the lag is when the probe's
// goroutine got to run, as its clock says, not when the timer fired.
func TestLagProbeReadsTheClockWhenItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The clock says the probe's goroutine got to run 3ms after its
		// timer fired (a bubble cannot starve a goroutine, so the clock does).
		calls := 0
		l := &lagProbe{t0: time.Now(), Now: func() time.Time {
			calls++
			if calls == 2 {
				return time.Now().Add(3 * time.Millisecond)
			}
			return time.Now()
		}}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.run(ctx) }()
		<-time.After(15 * time.Millisecond)
		cancel()
		<-done
		if s := l.in(phaseSpan{start: -time.Hour, end: time.Hour}); s.Count != 1 || s.Maxms != 3 {
			t.Errorf("%+v, want one sample 3ms late", s)
		}
	})
}
