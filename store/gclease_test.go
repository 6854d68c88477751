package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLeaseHeartbeat (issue 45 item 3): a running pass keeps its lease
// past LeaseTTL on its heartbeat, however long a step runs; a crashed one
// (stopped by its Hook, the lease left as a kill leaves it) loses it once
// DefaultGCLeaseTTL (30 s, was 5 minutes) has passed without a heartbeat;
// a pass whose lease another process took stops with ErrCollectorBusy and
// leaves the other's lease alone.
func TestLeaseHeartbeat(t *testing.T) { onEngines(t, testLeaseHeartbeat) }

func testLeaseHeartbeat(t *testing.T, newLC func(testing.TB) *lc) {
	l := newLC(t)
	ctx := context.Background()
	other := l.open()
	renewed := make(chan error, 1)
	inPass, resume := make(chan struct{}), make(chan struct{})
	blockAtMark := func(step string) error {
		if step == "marked" {
			close(inPass)
			<-resume
		}
		return nil
	}
	start := func(hook func(string) error) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := l.s.Collect(ctx, GCConfig{LeaseRenew: 5 * time.Millisecond, Hook: hook, Renewed: func(err error) {
				switch {
				case errors.Is(err, ErrCollectorBusy):
					renewed <- err // never dropped: the test waits for it
					return
				case err != nil:
					return // a renewal the index refused for now (busy under load): the next beat tries again
				}
				select {
				case renewed <- err:
				default:
				}
			}})
			done <- err
		}()
		return done
	}
	// nextRenewal waits for a renewal that read the clock after now.
	nextRenewal := func() {
		t.Helper()
		for range 2 { // one may have read the clock before the advance
			if err := <-renewed; err != nil {
				t.Fatalf("renewal: %v", err)
			}
		}
	}

	done := start(blockAtMark)
	<-inPass
	for range 3 { // 60 s in all: twice the lease's TTL
		l.clock.advance(DefaultGCLeaseTTL * 2 / 3)
		nextRenewal()
	}
	if _, err := other.Collect(ctx, GCConfig{}); !errors.Is(err, ErrCollectorBusy) {
		t.Fatalf("a second collector beside a live pass 60 s in: %v, want ErrCollectorBusy", err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the long pass: %v", err)
	}

	// A crash: the lease stays until it expires, 30 s after the last
	// heartbeat.
	crash := errors.New("killed")
	if _, err := l.s.Collect(ctx, GCConfig{Hook: func(step string) error {
		if step == "marked" {
			return crash
		}
		return nil
	}}); !errors.Is(err, crash) {
		t.Fatalf("the crashed pass: %v", err)
	}
	if _, err := other.Collect(ctx, GCConfig{}); !errors.Is(err, ErrCollectorBusy) {
		t.Fatalf("right after the crash: %v, want ErrCollectorBusy", err)
	}
	l.clock.advance(DefaultGCLeaseTTL + time.Second)
	if _, err := other.Collect(ctx, GCConfig{}); err != nil {
		t.Fatalf("31 s after the crash: %v, want a pass", err)
	}

	// Another process took the lease (this one stalled past its TTL): the
	// heartbeat finds it gone and the pass stops.
	inPass, resume = make(chan struct{}), make(chan struct{})
	done = start(blockAtMark)
	<-inPass
	if err := l.s.exec(ctx, `UPDATE gc_lease SET holder = 'thief' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	for err := range renewed { // the heartbeat notices
		if errors.Is(err, ErrCollectorBusy) {
			break
		}
	}
	close(resume) // the pass's next step finds its context cancelled
	if err := <-done; !errors.Is(err, ErrCollectorBusy) {
		t.Fatalf("a pass whose lease was taken: %v, want ErrCollectorBusy", err)
	}
	var holder string
	if err := l.s.db.QueryRowContext(ctx, `SELECT holder FROM gc_lease WHERE id = 1`).Scan(&holder); err != nil || holder != "thief" {
		t.Fatalf("the lease after the stopped pass: %q %v, want the thief's", holder, err)
	}
}
