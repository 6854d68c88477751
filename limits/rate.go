package limits

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Rate is a request rate with a burst allowance. PerSecond <= 0 (or NaN)
// means unlimited. Burst is the number of requests a key with a full bucket
// may make at once; values below 1 are treated as 1.
//
// Over any window of length W a key is admitted at most
// Burst + PerSecond·W requests (the usual token-bucket envelope: a full
// burst at the start of the window plus the refill during it).
type Rate struct {
	PerSecond float64
	Burst     int
}

// Unlimited reports whether r admits everything.
func (r Rate) Unlimited() bool { return !(r.PerSecond > 0) }

// Bounds of a configured rate (requests per second). Within them the
// limiter's nanosecond arithmetic is exact up to rounding the emission
// interval up to whole nanoseconds, and the headers it gives (Policy,
// Retry-After) mean what they say. The limiter itself accepts any value.
const (
	MinRequestsPerSecond = 1e-3 // one request per 1000 s
	MaxRequestsPerSecond = 1e9  // one per nanosecond, the limiter's resolution
)

// CheckRate reports whether perSecond is an acceptable requests-per-second
// value for a limit: 0 (unlimited) or a finite number within
// [MinRequestsPerSecond, MaxRequestsPerSecond]. The error says what is
// allowed; the caller names the field or flag.
func CheckRate(perSecond float64) error {
	if perSecond == 0 || (perSecond >= MinRequestsPerSecond && perSecond <= MaxRequestsPerSecond) {
		return nil
	}
	return fmt.Errorf("must be 0 (unlimited) or between %v and %v requests per second, got %v",
		MinRequestsPerSecond, strconv.FormatFloat(MaxRequestsPerSecond, 'f', -1, 64), perSecond)
}

// Limits on the GCRA parameters keep every sum below in int64 range:
// offsets are clamped to ±maxOffset, an emission interval to maxInterval and
// a burst tolerance to maxTolerance.
const (
	maxOffset    = int64(1) << 61 // ~73 years either side of the table's epoch
	maxInterval  = int64(1) << 52 // ~52 days per request
	maxTolerance = int64(1) << 59 // ~18 years of burst
)

// gcra returns the emission interval T and the burst tolerance
// tau = T·(burst-1), both in nanoseconds, and false when r is unlimited.
// T is rounded up, so rounding can only make a limiter stricter.
func (r Rate) gcra() (interval, tolerance int64, limited bool) {
	if r.Unlimited() {
		return 0, 0, false
	}
	f := 1e9 / r.PerSecond
	switch {
	case f <= 1:
		interval = 1
	case f >= float64(maxInterval):
		interval = maxInterval
	default:
		interval = int64(math.Ceil(f))
	}
	b := int64(r.Burst)
	if b < 1 {
		b = 1
	}
	if b-1 > maxTolerance/interval {
		tolerance = maxTolerance
	} else {
		tolerance = interval * (b - 1)
	}
	return interval, tolerance, true
}

// Decision is the answer of a limiter for one request.
type Decision struct {
	// Allowed reports whether the request is admitted.
	Allowed bool
	// RetryAfter is the exact wait from now until one more request of this
	// key would be admitted, if nothing else spends the allowance first.
	// It is 0 when Allowed.
	RetryAfter time.Duration
	// Remaining is the number of whole requests still admissible at the
	// same instant after this decision (math.MaxInt for an unlimited rate).
	Remaining int
	// Limit is the rate the decision was taken against.
	Limit Rate
}

// RetryAfterSeconds is a wait in whole seconds, rounded up, at least 1 and
// at most math.MaxInt32: the value for an HTTP Retry-After header (pass a
// Decision's RetryAfter). Rounding up means a client that waits exactly
// this long finds the allowance there.
func RetryAfterSeconds(wait time.Duration) int {
	if wait <= 0 {
		return 1
	}
	s := wait / time.Second
	if wait%time.Second != 0 {
		s++
	}
	if s > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(s), 1)
}

// Policy is what r enforces, for a RateLimit-Policy header: at most quota
// requests at once, and window, the time an empty bucket takes to refill
// completely. Both come from the limiter's own arithmetic (the emission
// interval rounded up to whole nanoseconds and clamped, the burst
// tolerance clamped), so they agree with every Decision's RetryAfter: a
// refusal's wait is at most window/quota. An unlimited r gives 0, 0.
func (r Rate) Policy() (quota int, window time.Duration) {
	interval, tolerance, limited := r.gcra()
	if !limited {
		return 0, 0
	}
	q := tolerance/interval + 1
	return int(q), time.Duration(q * interval)
}

func unlimitedDecision(r Rate) Decision {
	return Decision{Allowed: true, Remaining: math.MaxInt, Limit: r}
}

// remaining is the number of requests admissible at now when the key's
// theoretical arrival time is tat: the count of j >= 0 with
// max(tat, now) + j·T - now <= tau.
func remaining(tat, now, interval, tolerance int64) int {
	if tat < now {
		tat = now
	}
	ahead := tat - now
	if ahead > tolerance {
		return 0
	}
	return int((tolerance-ahead)/interval) + 1
}

// decide applies GCRA to one request at now for a key whose theoretical
// arrival time is tat. It returns the decision and the new TAT (unchanged
// when refused). A request is admitted when now >= tat - tau; admitting it
// moves the TAT to max(tat, now) + T. A stale (smaller) now can only refuse
// more, and never moves the TAT backwards.
func decide(tat, now, interval, tolerance int64, r Rate) (Decision, int64) {
	earliest := tat - tolerance
	if now < earliest {
		return Decision{RetryAfter: time.Duration(earliest - now), Limit: r}, tat
	}
	next := max(tat, now) + interval
	return Decision{Allowed: true, Remaining: remaining(next, now, interval, tolerance), Limit: r}, next
}

// peek is decide without the state change: Remaining counts the request
// being asked about.
func peek(tat, now, interval, tolerance int64, r Rate) Decision {
	earliest := tat - tolerance
	if now < earliest {
		return Decision{RetryAfter: time.Duration(earliest - now), Limit: r}
	}
	return Decision{Allowed: true, Remaining: remaining(tat, now, interval, tolerance), Limit: r}
}
