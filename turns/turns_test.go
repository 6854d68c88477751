package turns

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
)

func newTurnstile(t *testing.T) *Turnstile {
	ts := new(Turnstile)
	t.Cleanup(func() { ts.Close() })
	return ts
}

// holdTurns stops t from handing out turns: with pending set and no byte
// in the pipe, no caller writes one and the pump sleeps. The returned
// function asks for a turn again.
func holdTurns(ts *Turnstile) (release func()) {
	ts.mu.Lock()
	ts.pending = true
	ts.mu.Unlock()
	return func() {
		ts.mu.Lock()
		ts.pending = false
		ts.signal()
		ts.mu.Unlock()
	}
}

// queueHeld holds ts's turns (holdTurns) and queues n callers, returning
// the channel of their Wait results.
func queueHeld(t *testing.T, ts *Turnstile, n int) <-chan error {
	holdTurns(ts)
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- ts.Wait(context.Background()) }()
		waitQueued(t, ts, i+1)
	}
	return errs
}

// waitQueued waits until n callers are queued (no clock: the queue is
// filled by goroutines this test started).
func waitQueued(t *testing.T, ts *Turnstile, n int) {
	t.Helper()
	for ts.Stats().Waiting < n {
		runtime.Gosched()
	}
}

// TestWaitAlone: a caller with nobody ahead gets its turn, and the count
// says so.
func TestWaitAlone(t *testing.T) {
	ts := newTurnstile(t)
	for i := range 3 {
		if err := ts.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := ts.Stats(); st.Turns != uint64(i+1) || st.Waiting != 0 {
			t.Fatalf("after %d turns: %+v", i+1, st)
		}
	}
}

// TestTurnsInArrivalOrder: callers get their turns first come, first
// served, each exactly once. The order is read from the callers' queue
// entries, which the pump closes one at a time: when caller k's closes,
// every earlier caller's is closed already. (The order in which the
// callers' goroutines run after Wait returns is the scheduler's, not the
// Turnstile's: a turn passes on before its caller returns.)
func TestTurnsInArrivalOrder(t *testing.T) {
	ts := newTurnstile(t)
	const n = 20
	release := holdTurns(ts)
	var wg sync.WaitGroup
	for range n {
		q := ts.Stats().Waiting
		wg.Go(func() {
			if err := ts.Wait(context.Background()); err != nil {
				t.Error(err)
			}
		})
		waitQueued(t, ts, q+1) // this caller queues before the next starts
	}
	ts.mu.Lock()
	entries := append([]chan struct{}(nil), ts.queue...) // entries[i] is caller i's
	ts.mu.Unlock()
	release()
	// Take the closings as they come: each one seen must have every
	// earlier caller's closed already.
	open := map[int]bool{}
	for k := range entries {
		open[k] = true
	}
	for len(open) > 0 {
		var cases []reflect.SelectCase
		var idx []int
		for k := range open {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(entries[k])})
			idx = append(idx, k)
		}
		chosen, _, _ := reflect.Select(cases)
		k := idx[chosen]
		for j := range k {
			select {
			case <-entries[j]:
			default:
				t.Fatalf("caller %d got its turn before caller %d", k, j)
			}
		}
		delete(open, k)
	}
	wg.Wait()
	if st := ts.Stats(); st.Turns != n || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWaitCanceled: a caller whose context ends leaves the queue with the
// context's error, and the callers behind it still get their turns.
func TestWaitCanceled(t *testing.T) {
	ts := newTurnstile(t)
	release := holdTurns(ts)
	ctx, cancel := context.WithCancel(context.Background())
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- ts.Wait(ctx) }()
	waitQueued(t, ts, 1)
	go func() { second <- ts.Wait(context.Background()) }()
	waitQueued(t, ts, 2)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller: %v", err)
	}
	if st := ts.Stats(); st.Waiting != 1 || st.Turns != 0 {
		t.Fatalf("after the cancel: %+v", st)
	}
	release()
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if st := ts.Stats(); st.Waiting != 0 || st.Turns != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCloseReleasesWaiters: Close lets every queued caller go with
// ErrClosed, later callers get it at once, and closing twice is harmless.
func TestCloseReleasesWaiters(t *testing.T) {
	ts := newTurnstile(t)
	errs := queueHeld(t, ts, 3)
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued caller after Close: %v", err)
		}
	}
	if err := ts.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseUnused: a Turnstile nobody waited on has nothing to free, and
// refuses turns once closed.
func TestCloseUnused(t *testing.T) {
	var ts Turnstile
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if ts.r != nil {
		t.Fatal("Close made a pipe")
	}
	if err := ts.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
}

// TestTurnWaitsForThePoller is the point of the package: a turn is not
// handed straight to the caller but comes through the network poller, so
// on one P it waits for the goroutines already runnable. With GOMAXPROCS 1,
// the test's goroutine keeps the P busy with runtime.Gosched, which never
// polls the network while a goroutine is runnable; the caller must still be
// waiting when the test stops yielding and blocks.
//
// The scheduler's monitor thread also polls when the scheduler has not
// blocked in the poller for 10 ms. The test sleeps before each try so that
// it just has; a try whose yields took 5 ms or more (a loaded machine)
// cannot tell and is repeated.
func TestTurnWaitsForThePoller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ts := newTurnstile(t)
	// Start the pump, and let it park in the poller.
	if err := ts.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		// Sleeping leaves nothing runnable, so the scheduler blocks in the
		// poller and notes when: the monitor thread then leaves the
		// poller alone for the next 10 ms.
		time.Sleep(time.Millisecond)
		done := make(chan struct{})
		start := time.Now()
		go func() {
			ts.Wait(context.Background())
			close(done)
		}()
		early := false
		for range 100 {
			runtime.Gosched()
			select {
			case <-done:
				early = true
			default:
			}
		}
		yielded := time.Since(start)
		<-done // blocking lets the scheduler poll: the turn comes now
		if !early {
			return
		}
		if yielded < 5*time.Millisecond || try == 20 {
			t.Fatalf("the turn came while runnable goroutines kept the poller waiting (%v of yields, try %d)", yielded, try)
		}
	}
}

// TestBrokenPipeReleasesWaiters: if the pump's pipe fails, no turn could
// come again, so the queued callers are let go with ErrClosed and later
// callers get it at once, rather than waiting for ever.
func TestBrokenPipeReleasesWaiters(t *testing.T) {
	ts := newTurnstile(t)
	errs := queueHeld(t, ts, 2)
	ts.r.Close() // the pump's read fails
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued caller after the pipe failed: %v", err)
		}
	}
	if err := ts.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after the pipe failed: %v", err)
	}
}

// TestFailedSignalReleasesWaiters: if asking the pump for a turn fails, no
// turn could come, so the callers are let go with ErrClosed rather than
// left waiting.
func TestFailedSignalReleasesWaiters(t *testing.T) {
	ts := newTurnstile(t)
	errs := queueHeld(t, ts, 2)
	ts.mu.Lock()
	ts.w.Close() // the next write fails
	ts.pending = false
	ts.signal()
	ts.mu.Unlock()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatalf("queued caller after a failed signal: %v", err)
		}
	}
	if err := ts.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after a failed signal: %v", err)
	}
}
