package server

import (
	"context"
	"net/http"
	"time"

	"golang.org/x/time/rate"
)

// anonymousPaceStepBytes is the most bytes an anonymous answer writes per
// wait on the pool's bandwidth, so that a cancelled request stops waiting
// within one step.
const anonymousPaceStepBytes = 64 << 10

// pacedWriter paces the bytes written to one anonymous reader's answer on
// the bucket that all anonymous answers share (limits.anonymous_pool_bytes_per_second).
// It reads the time from now, the server's clock.
type pacedWriter struct {
	http.ResponseWriter
	ctx context.Context
	lim *rate.Limiter
	now func() time.Time
}

// Write waits for the pool's tokens in steps of at most
// anonymousPaceStepBytes and writes each step; it returns the request's
// context error, with the bytes written, once the request is cancelled.
func (w *pacedWriter) Write(p []byte) (int, error) {
	var written int
	for len(p) > 0 {
		step := min(len(p), anonymousPaceStepBytes, w.lim.Burst())
		if err := w.wait(step); err != nil {
			return written, err
		}
		n, err := w.ResponseWriter.Write(p[:step])
		written += n
		if err != nil {
			return written, err
		}
		p = p[step:]
	}
	return written, nil
}

func (w *pacedWriter) wait(n int) error {
	r := w.lim.ReserveN(w.now(), n)
	if !r.OK() {
		return context.Canceled // n is at most the burst; not reached
	}
	d := r.DelayFrom(w.now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.ctx.Done():
		r.CancelAt(w.now())
		return w.ctx.Err()
	}
}

// Unwrap lets http.NewResponseController reach the connection's writer.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
