package limits

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Names of the per-request limits, as used in RateError.Limit, in Refusals
// and in logs.
const (
	LimitCredential   = "credential"
	LimitTenant       = "tenant"
	LimitInFlight     = "in_flight"
	LimitAuthFailures = "auth_failures"
	// LimitTenantInFlight is the cap on a whole tenant's requests in
	// progress (Limits.MaxInFlightPerTenant: the anonymous pool's).
	LimitTenantInFlight = "tenant_in_flight"
)

var (
	// ErrRateLimited is wrapped by every *RateError: a request refused by
	// a rate, in-flight or auth-failure limit. It is temporary.
	ErrRateLimited = errors.New("rate limited")

	// ErrQuotaExceeded is wrapped by a *QuotaError whose upload would take
	// the tenant's stored bytes past its quota. It is not temporary.
	ErrQuotaExceeded = errors.New("quota exceeded")

	// ErrQuotaPending is wrapped by a *QuotaError whose upload fits the
	// committed usage but not the bytes of uploads still in flight. It is
	// temporary: retry once those commit or fail.
	ErrQuotaPending = errors.New("quota pending")

	// ErrLimitsUnavailable means a tenant's limits could not be read and no
	// cached value younger than the cache lifetime exists. Callers fail
	// closed (refuse with a retryable error) rather than fall back to
	// defaults.
	ErrLimitsUnavailable = errors.New("tenant limits unavailable")

	// ErrTenantSuspended refuses a request of a tenant whose limits record
	// suspends it (Limits.Suspended). It is not temporary: it lasts until
	// an operator resumes the tenant.
	ErrTenantSuspended = errors.New("tenant suspended")

	// ErrInvalidOverrides is wrapped by the errors Overrides.Validate
	// returns.
	ErrInvalidOverrides = errors.New("invalid limit overrides")
)

// RateError is a refusal by one of the per-request limits. Limit is one of
// LimitCredential, LimitTenant, LimitInFlight, LimitTenantInFlight,
// LimitAuthFailures. Decision carries the wait (RetryAfterSeconds gives it
// for Retry-After) and the rate that refused; for LimitInFlight and
// LimitTenantInFlight, Decision.Limit.Burst is the cap and RetryAfter is
// one second.
type RateError struct {
	Limit    string
	Decision Decision
}

func (e *RateError) Error() string {
	return fmt.Sprintf("rate limited by the %s limit: retry after %ds", e.Limit, RetryAfterSeconds(e.Decision.RetryAfter))
}

// Unwrap returns ErrRateLimited.
func (e *RateError) Unwrap() error { return ErrRateLimited }

// Refusals counts refused requests by limit name. The zero value is ready
// to use; it is safe for concurrent use.
type Refusals struct {
	credential, tenant, inFlight, tenantInFlight, authFailures atomic.Uint64
}

func (r *Refusals) counter(limit string) *atomic.Uint64 {
	switch limit {
	case LimitCredential:
		return &r.credential
	case LimitTenant:
		return &r.tenant
	case LimitInFlight:
		return &r.inFlight
	case LimitTenantInFlight:
		return &r.tenantInFlight
	case LimitAuthFailures:
		return &r.authFailures
	}
	return nil
}

// Inc counts one refusal by limit. Unknown names are ignored.
func (r *Refusals) Inc(limit string) {
	if c := r.counter(limit); c != nil {
		c.Add(1)
	}
}

// Load returns the refusals counted for limit (0 for unknown names).
func (r *Refusals) Load(limit string) uint64 {
	if c := r.counter(limit); c != nil {
		return c.Load()
	}
	return 0
}

// LimitNames lists the limit names, in a fixed order (for metrics labels).
func LimitNames() []string {
	return []string{LimitCredential, LimitTenant, LimitInFlight, LimitTenantInFlight, LimitAuthFailures}
}
