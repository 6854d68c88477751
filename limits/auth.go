package limits

import (
	"sync/atomic"
	"time"
)

// DefaultAuthFailuresPerMinute is the default auth_failures_per_minute.
const DefaultAuthFailuresPerMinute = 60

// AuthFailures limits failed authentications per client IP. Each failure
// spends one unit of a bucket of N units (N = failures per minute) that
// refills at N per minute. While an IP's bucket is empty, every auth
// attempt from it is refused, valid token or not, until a unit refills:
// after N quick failures an IP gets one more try per 60/N seconds.
//
// A successful authentication does not reset the count (GitLab's ban does).
// Resetting would let anyone holding one valid token interleave successes
// with guesses and guess without limit; with no reset, a legitimate client
// that fails a few times simply recovers as its bucket refills.
//
// Client IPs are attacker-controlled, so the table of IPs is hard-capped
// (see Table for the eviction rule). When the cap is reached and every
// candidate for eviction is still refilling, a new IP is refused (fails
// closed) rather than a throttled IP forgotten.
//
// An AuthFailures is safe for concurrent use.
type AuthFailures struct {
	table    *Table
	rate     Rate
	failures atomic.Uint64
	refused  atomic.Uint64
}

// AuthStats is a snapshot of an AuthFailures' counters, for metrics.
type AuthStats struct {
	Table    TableStats
	Failures uint64 // Fail calls
	Refused  uint64 // Check calls refused
}

// NewAuthFailures returns a limiter allowing perMinute failures per IP per
// minute (with a burst of perMinute), tracking at most maxIPs IPs
// (DefaultMaxKeys if maxIPs <= 0). perMinute <= 0 disables the limit.
func NewAuthFailures(perMinute int, maxIPs int) *AuthFailures {
	a := &AuthFailures{table: NewTable(maxIPs)}
	if perMinute > 0 {
		a.rate = Rate{PerSecond: float64(perMinute) / 60, Burst: perMinute}
	}
	return a
}

// Rate returns the rate the limiter applies per IP.
func (a *AuthFailures) Rate() Rate { return a.rate }

// Check reports whether ip may attempt to authenticate at now. Call it
// before verifying a token; it spends nothing. A refusal's RetryAfter is the
// exact wait until one more attempt is allowed.
func (a *AuthFailures) Check(ip string, now time.Time) Decision {
	d := a.table.Peek(ip, a.rate, now)
	if !d.Allowed {
		a.refused.Add(1)
	}
	return d
}

// Fail records one failed authentication by ip at now.
func (a *AuthFailures) Fail(ip string, now time.Time) {
	a.failures.Add(1)
	a.table.Allow(ip, a.rate, now)
}

// Len returns the number of IPs tracked.
func (a *AuthFailures) Len() int { return a.table.Len() }

// Stats returns the counters.
func (a *AuthFailures) Stats() AuthStats {
	return AuthStats{Table: a.table.Stats(), Failures: a.failures.Load(), Refused: a.refused.Load()}
}
