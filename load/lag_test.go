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
