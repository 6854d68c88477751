package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The anonymous pool's bandwidth (limits.anonymous_pool_bytes_per_second,
// docs/sharing.md): while tenants are working on this node (a tenant's
// request is in progress, or one ended less than anonymousPaceLinger ago),
// the bytes written to all anonymous answers together are paced to the
// pool's rate; while none is, they are not paced at all. So the world
// reading a public model takes the whole node when nobody who pays for it
// is working, and no more than its rate when somebody is. The linger keeps
// the pacing on between the requests of a tenant at work: paced only
// during each request, anonymous answers ran at full speed in the gaps and
// the next request started behind them (honest p99 ×2.9 beside 200
// anonymous readers, against ×1.0–1.3 with the linger; BENCHMARKS.md).

// anonymousPaceStep is the most bytes an anonymous answer writes per wait
// on the pool's rate: a tenant's request that starts while an anonymous
// answer streams waits for at most one step of it per anonymous answer
// before the pacing holds them, and a cancelled request stops waiting
// within one step.
const anonymousPaceStep = 64 << 10

// anonymousPaceLinger is how long after a tenant's request ends anonymous
// answers stay paced.
const anonymousPaceLinger = time.Second

// anonymousPaceBurst is how much of the rate the pool may spend at once
// after a pause: a tenth of a second's worth, at least one step.
func anonymousPaceBurst(bytesPerSecond float64) int {
	return max(int(bytesPerSecond/10), anonymousPaceStep)
}

// anonPacer paces anonymous answers while tenants' requests are in
// progress. It reads the time from now, the server's clock.
type anonPacer struct {
	lim     *rate.Limiter
	now     func() time.Time
	tenants atomic.Int64 // tenants' requests in progress
	lastEnd atomic.Int64 // when the last of them ended, in Unix nanoseconds
	paced   atomic.Int64 // nanoseconds anonymous answers waited, in total
}

// newAnonPacer paces at bytesPerSecond; 0 or less: nil, which never paces.
func newAnonPacer(bytesPerSecond float64, now func() time.Time) *anonPacer {
	if bytesPerSecond <= 0 {
		return nil
	}
	return &anonPacer{lim: rate.NewLimiter(rate.Limit(bytesPerSecond), anonymousPaceBurst(bytesPerSecond)), now: now}
}

// tenantStarted counts a tenant's request in progress until the function
// it returns is called.
func (p *anonPacer) tenantStarted() func() {
	if p == nil {
		return func() {}
	}
	p.tenants.Add(1)
	return func() {
		p.lastEnd.Store(p.now().UnixNano())
		p.tenants.Add(-1)
	}
}

// tenantsWorking reports whether a tenant's request is in progress or one
// ended less than anonymousPaceLinger before now.
func (p *anonPacer) tenantsWorking(now time.Time) bool {
	if p.tenants.Load() > 0 {
		return true
	}
	end := p.lastEnd.Load()
	return end != 0 && now.UnixNano()-end < int64(anonymousPaceLinger)
}

// wrap paces w, the answer to an anonymous request whose context is ctx.
func (p *anonPacer) wrap(w http.ResponseWriter, ctx context.Context) http.ResponseWriter {
	if p == nil {
		return w
	}
	return &pacedWriter{ResponseWriter: w, ctx: ctx, p: p}
}

// waitedSeconds is the time anonymous answers waited for the pool's rate.
func (p *anonPacer) waitedSeconds() float64 {
	if p == nil {
		return 0
	}
	return time.Duration(p.paced.Load()).Seconds()
}

// pacedWriter is one anonymous answer under the pool's pacing.
type pacedWriter struct {
	http.ResponseWriter
	ctx context.Context
	p   *anonPacer
}

// Write writes p in steps of at most anonymousPaceStep, each after the
// pool's rate allows it while tenants are working; it
// returns the request's context error, with the bytes written, once the
// request is cancelled.
func (w *pacedWriter) Write(b []byte) (int, error) {
	var written int
	for len(b) > 0 {
		step := min(len(b), anonymousPaceStep)
		if err := w.wait(step); err != nil {
			return written, err
		}
		n, err := w.ResponseWriter.Write(b[:step])
		written += n
		if err != nil {
			return written, err
		}
		b = b[step:]
	}
	return written, nil
}

// wait waits until the pool may write n more bytes: at once while no
// tenant is working (spending nothing of the rate, so a tenant's arrival
// finds at most the burst spent before it).
func (w *pacedWriter) wait(n int) error {
	p := w.p
	now := p.now()
	if !p.tenantsWorking(now) {
		return nil
	}
	r := p.lim.ReserveN(now, n) // n ≤ anonymousPaceStep ≤ the burst: always OK
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		p.paced.Add(int64(d))
		return nil
	case <-w.ctx.Done():
		r.CancelAt(p.now())
		return w.ctx.Err()
	}
}

// Unwrap lets http.NewResponseController reach the connection's writer.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
