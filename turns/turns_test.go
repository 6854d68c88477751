package turns

import (
	"context"
	"errors"
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
// served, each exactly once.
func TestTurnsInArrivalOrder(t *testing.T) {
	ts := newTurnstile(t)
	const n = 20
	release := holdTurns(ts)
	var (
		wg    sync.WaitGroup
		order = make(chan int, n)
	)
	for i := range n {
		wg.Go(func() {
			if err := ts.Wait(context.Background()); err != nil {
				t.Error(err)
			}
			order <- i
		})
		waitQueued(t, ts, i+1) // caller i queues before caller i+1 starts
	}
	release()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("turn %d went to caller %d", want, got)
		}
		want++
	}
	if want != n {
		t.Fatalf("%d turns, want %d", want, n)
	}
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
