package server

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// TestAnonymousPacedWriter: an anonymous answer of N bytes at R bytes per
// second, after the bucket's burst, takes (N-burst)/R of the fake clock;
// a cancelled request stops waiting at once.
func TestAnonymousPacedWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rateBps, burst, n = 1 << 20, 64 << 10, 4<<20 + 64<<10
		lim := rate.NewLimiter(rateBps, burst)
		rec := httptest.NewRecorder()
		w := &pacedWriter{ResponseWriter: rec, ctx: t.Context(), lim: lim, now: time.Now}
		start := time.Now()
		got, err := w.Write(make([]byte, n))
		if err != nil || got != n || rec.Body.Len() != n {
			t.Fatalf("Write = %d, %v; body %d; want %d, nil", got, err, rec.Body.Len(), n)
		}
		if took, want := time.Since(start), 4*time.Second; took != want {
			t.Fatalf("%d bytes at %d B/s took %v of the fake clock, want %v", n, rateBps, took, want)
		}

		// Cancelled while waiting: returns the context's error promptly.
		ctx, cancel := context.WithCancel(t.Context())
		rec2 := httptest.NewRecorder()
		w2 := &pacedWriter{ResponseWriter: rec2, ctx: ctx, lim: lim, now: time.Now}
		done := make(chan error, 1)
		go func() { _, err := w2.Write(make([]byte, 1<<20)); done <- err }()
		time.Sleep(100 * time.Millisecond) // fake clock: inside the bubble
		cancel()
		synctest.Wait()
		before := time.Now()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Write: %v, want context.Canceled", err)
			}
		default:
			t.Fatal("a cancelled Write still waits")
		}
		if time.Since(before) != 0 || rec2.Body.Len() >= 1<<20 {
			t.Fatalf("cancelled Write wrote %d bytes", rec2.Body.Len())
		}
	})
}
