// Package turns makes a busy client's requests take turns with everyone
// else's on a server whose CPU is the bottleneck.
//
// # The problem it solves
//
// Go's scheduler runs the goroutines already runnable before it looks for
// new network events: it polls the network when its run queue empties, or
// every 10 ms from its monitor thread. A client that sends hundreds of
// requests at once (320 held reads opening together, a flood of small
// reads) fills that queue, and a request from anyone else that arrives
// meanwhile is not even read until the whole batch has run: tens of
// milliseconds on a server pinned to one core (BENCHMARKS.md, "Load scenarios").
// The work slots (package work) order the sections that wait for them
// fairly, but a request must be read and authenticated before it can wait
// for anything, and the batch is that work.
//
// # What it does
//
// A Turnstile hands out turns, one at a time and first come first served,
// through the network poller itself: a turn is a byte written to a pipe
// that a pump goroutine reads. The pump is woken by the same poll that
// wakes the connections with new requests, so each turn comes after
// everything that was runnable when it was asked for, and together with
// whatever arrived on the network meanwhile. A busy client therefore gets
// at most one request going per pass of the poller while other work is
// runnable, and as many as it likes when the server is otherwise idle (a
// pass then costs a pipe write, a poll and a read: a few microseconds).
//
// The server decides who waits for a turn (a tenant with more requests in
// progress than server.turns_above_in_flight); this package knows
// nothing of requests, tenants or HTTP.
package turns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Turnstile hands out turns through the network poller. The zero value is
// ready: its pipe and pump are made by the first Wait, so a Turnstile
// nobody waits on costs nothing. Close frees them.
type Turnstile struct {
	mu      sync.Mutex
	r, w    *os.File        // the pipe, from the first Wait on (w nil again after Close)
	queue   []chan struct{} // waiters in arrival order
	pending bool            // a byte is in the pipe for the pump
	closed  bool
	turns   uint64 // turns handed out
}

// Stats are a Turnstile's counts.
type Stats struct {
	Waiting int    // waiters queued now
	Turns   uint64 // turns handed out so far
}

// ErrClosed is Wait's answer after Close.
var ErrClosed = errors.New("turns: turnstile closed")

// Wait queues the caller and returns when its turn comes: after the
// network poller's next pass that follows the turns of everyone queued
// before it. It returns ctx.Err() if ctx ends first (the caller then has
// no turn and has left the queue), ErrClosed after Close (at once, or when
// Close releases a queued caller), and the error of creating the pipe on
// the first call if that fails (later calls try again).
func (t *Turnstile) Wait(ctx context.Context) error {
	ch := make(chan struct{})
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	if t.r == nil {
		r, w, err := os.Pipe()
		if err != nil {
			t.mu.Unlock()
			return fmt.Errorf("turns: %w", err)
		}
		t.r, t.w = r, w
		go t.pump()
	}
	t.queue = append(t.queue, ch)
	t.signal()
	t.mu.Unlock()

	select {
	case <-ch:
	case <-ctx.Done():
		t.mu.Lock()
		left := t.leave(ch)
		t.mu.Unlock()
		if left {
			return ctx.Err()
		}
		<-ch // granted (or closed) as ctx ended: take it
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if len(t.queue) > 0 {
		// The next turn comes at the poller's next pass, after this
		// caller's work, which is runnable now.
		t.signal()
	}
	return nil
}

// leave takes ch out of the queue and reports whether it was there.
func (t *Turnstile) leave(ch chan struct{}) bool {
	for i, c := range t.queue {
		if c == ch {
			t.queue = append(t.queue[:i], t.queue[i+1:]...)
			return true
		}
	}
	return false
}

// signal asks the pump for a turn unless a request is already in the pipe.
// The pipe holds at most that one byte, so the write never blocks; if it
// fails, no turn could come, and everyone is let go as by Close. t.mu is
// held.
func (t *Turnstile) signal() {
	if t.pending || t.closed {
		return
	}
	if _, err := t.w.Write([]byte{1}); err != nil {
		t.release()
		return
	}
	t.pending = true
}

// pump hands out one turn per byte it reads, until Close.
func (t *Turnstile) pump() {
	defer t.r.Close()
	var buf [16]byte
	for {
		_, err := t.r.Read(buf[:])
		t.mu.Lock()
		if err != nil || t.closed {
			// Close, or a pipe that failed (no more turns could come):
			// release everyone, as Close does.
			t.release()
			t.mu.Unlock()
			return
		}
		t.pending = false
		if len(t.queue) > 0 {
			close(t.queue[0])
			t.queue = t.queue[1:]
			t.turns++
		}
		t.mu.Unlock()
	}
}

// Stats returns the Turnstile's counts.
func (t *Turnstile) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Waiting: len(t.queue), Turns: t.turns}
}

// Close releases every queued caller with ErrClosed, makes later Waits
// return it at once, and stops the pump. Closing twice is harmless.
func (t *Turnstile) Close() error {
	t.mu.Lock()
	t.release()
	w := t.w
	t.w = nil
	t.mu.Unlock()
	if w == nil {
		return nil
	}
	// Closing the write end ends the pump's read (EOF), and the pump
	// closes the read end.
	return w.Close()
}

// release closes t for good and lets every queued caller go. t.mu is held.
func (t *Turnstile) release() {
	t.closed = true
	for _, ch := range t.queue {
		close(ch)
	}
	t.queue = nil
}
