package limits

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults of [limits] (docs/design.md §13).
const (
	DefaultTenantRequestsPerSecond     = 2000
	DefaultTenantBurst                 = 4000
	DefaultCredentialRequestsPerSecond = 1000
	DefaultCredentialBurst             = 2000
	DefaultMaxInFlightPerCredential    = 512
	DefaultTenantQuotaBytes            = -1 // unlimited
)

// Limits are the limits that apply to one tenant and its credentials.
type Limits struct {
	TenantRate               Rate // requests of the whole tenant, per node
	CredentialRate           Rate // requests of one credential, per node
	MaxInFlightPerCredential int  // requests of one credential in progress, per node; <= 0 unlimited
	// MaxInFlightPerTenant caps the requests of the whole tenant in
	// progress, per node; <= 0 (the default, and every tenant's: no
	// override sets it) no cap. The anonymous pool has one (Anonymous).
	MaxInFlightPerTenant int
	QuotaBytes           int64 // stored bytes of the tenant, deployment-wide; < 0 unlimited
	// Suspended: an operator stopped the tenant; its requests are refused
	// (ErrTenantSuspended) until the flag is cleared. False by default.
	Suspended bool
}

// DefaultLimits returns the built-in defaults.
func DefaultLimits() Limits {
	return Limits{
		TenantRate:               Rate{PerSecond: DefaultTenantRequestsPerSecond, Burst: DefaultTenantBurst},
		CredentialRate:           Rate{PerSecond: DefaultCredentialRequestsPerSecond, Burst: DefaultCredentialBurst},
		MaxInFlightPerCredential: DefaultMaxInFlightPerCredential,
		QuotaBytes:               DefaultTenantQuotaBytes,
	}
}

// Overrides are a tenant's departures from the default limits. A nil field
// is not overridden. The JSON names match the [limits] config keys.
type Overrides struct {
	QuotaBytes                  *int64   `json:"quota_bytes,omitempty"`                    // -1 unlimited
	TenantRequestsPerSecond     *float64 `json:"tenant_requests_per_second,omitempty"`     // 0 unlimited
	TenantBurst                 *int     `json:"tenant_burst,omitempty"`                   // >= 1
	CredentialRequestsPerSecond *float64 `json:"credential_requests_per_second,omitempty"` // 0 unlimited
	CredentialBurst             *int     `json:"credential_burst,omitempty"`               // >= 1
	MaxInFlightPerCredential    *int     `json:"max_in_flight_per_credential,omitempty"`   // 0 unlimited
	// Suspended stops the tenant short of revoking its credentials (see
	// Limits.Suspended). Unlike the other fields it is a flag: false, the
	// zero value, is both "not overridden" and "not suspended".
	Suspended bool `json:"suspended,omitempty"`
}

// Override field names, as used in Validate's errors and Source.Field.
const (
	FieldQuotaBytes                  = "quota_bytes"
	FieldTenantRequestsPerSecond     = "tenant_requests_per_second"
	FieldTenantBurst                 = "tenant_burst"
	FieldCredentialRequestsPerSecond = "credential_requests_per_second"
	FieldCredentialBurst             = "credential_burst"
	FieldMaxInFlightPerCredential    = "max_in_flight_per_credential"
	FieldSuspended                   = "suspended"
)

// IsZero reports whether o overrides nothing.
func (o Overrides) IsZero() bool { return o == Overrides{} }

// Apply returns def with o's fields replacing the ones they override.
func (o Overrides) Apply(def Limits) Limits {
	l := def
	if o.QuotaBytes != nil {
		l.QuotaBytes = *o.QuotaBytes
	}
	if o.TenantRequestsPerSecond != nil {
		l.TenantRate.PerSecond = *o.TenantRequestsPerSecond
	}
	if o.TenantBurst != nil {
		l.TenantRate.Burst = *o.TenantBurst
	}
	if o.CredentialRequestsPerSecond != nil {
		l.CredentialRate.PerSecond = *o.CredentialRequestsPerSecond
	}
	if o.CredentialBurst != nil {
		l.CredentialRate.Burst = *o.CredentialBurst
	}
	if o.MaxInFlightPerCredential != nil {
		l.MaxInFlightPerCredential = *o.MaxInFlightPerCredential
	}
	if o.Suspended {
		l.Suspended = true
	}
	return l
}

// Validate reports every bad field of o, each error naming the field and
// wrapping ErrInvalidOverrides; nil if o is valid. Rates must be 0
// (unlimited) or within [MinRequestsPerSecond, MaxRequestsPerSecond]
// (CheckRate), bursts >= 1, the in-flight cap >= 0 (0 means unlimited) and
// the quota >= -1 (-1 means unlimited).
func (o Overrides) Validate() error {
	var errs []error
	bad := func(field, want string, got any) {
		errs = append(errs, fmt.Errorf("%w: %s must be %s, got %v", ErrInvalidOverrides, field, want, got))
	}
	if o.QuotaBytes != nil && *o.QuotaBytes < -1 {
		bad(FieldQuotaBytes, ">= 0 bytes, or -1 for unlimited", *o.QuotaBytes)
	}
	rate := func(field string, v *float64) {
		if v == nil {
			return
		}
		if err := CheckRate(*v); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s %v", ErrInvalidOverrides, field, err))
		}
	}
	burst := func(field string, v *int) {
		if v != nil && *v < 1 {
			bad(field, ">= 1", *v)
		}
	}
	rate(FieldTenantRequestsPerSecond, o.TenantRequestsPerSecond)
	burst(FieldTenantBurst, o.TenantBurst)
	rate(FieldCredentialRequestsPerSecond, o.CredentialRequestsPerSecond)
	burst(FieldCredentialBurst, o.CredentialBurst)
	if o.MaxInFlightPerCredential != nil && *o.MaxInFlightPerCredential < 0 {
		bad(FieldMaxInFlightPerCredential, ">= 0 (0 for unlimited)", *o.MaxInFlightPerCredential)
	}
	return errors.Join(errs...)
}

// OverrideSource reads a tenant's overrides from the durable store. ok is
// false when the tenant has none. The store implements it.
type OverrideSource interface {
	TenantOverrides(ctx context.Context, tenant string) (o Overrides, ok bool, err error)
}

// Source says where a tenant's effective limits came from.
type Source struct {
	// HasOverride reports whether the tenant has an overrides record.
	HasOverride bool
	// Overrides is the record (zero when HasOverride is false). Its
	// pointers are shared with the cache: do not modify what they point to.
	Overrides Overrides
	// FetchedAt is when the value was read from the OverrideSource.
	FetchedAt time.Time
}

// Field returns "override" if the named field (one of the Field…
// constants) is overridden, otherwise "default".
func (s Source) Field(name string) string {
	o := s.Overrides
	var set bool
	switch name {
	case FieldQuotaBytes:
		set = o.QuotaBytes != nil
	case FieldTenantRequestsPerSecond:
		set = o.TenantRequestsPerSecond != nil
	case FieldTenantBurst:
		set = o.TenantBurst != nil
	case FieldCredentialRequestsPerSecond:
		set = o.CredentialRequestsPerSecond != nil
	case FieldCredentialBurst:
		set = o.CredentialBurst != nil
	case FieldMaxInFlightPerCredential:
		set = o.MaxInFlightPerCredential != nil
	case FieldSuspended:
		set = o.Suspended
	}
	if set {
		return "override"
	}
	return "default"
}

// Defaults of Effective.
const (
	DefaultLimitsTTL          = 10 * time.Second
	DefaultLimitsCacheEntries = 100_000
	DefaultLimitsFetchTimeout = 5 * time.Second
)

// Effective serves each tenant's effective limits (Defaults with the
// tenant's Overrides applied) through a bounded cache in front of an
// OverrideSource.
//
//   - A cached value younger than RefreshAfter (default TTL/2) is served as is.
//   - Between RefreshAfter and TTL, one caller refreshes it while the others
//     keep getting the cached value; if the refresh fails, the cached value
//     is still served.
//   - At TTL or older, callers wait for a refresh; if it fails, For returns
//     an error wrapping ErrLimitsUnavailable (fail closed: never fall back
//     to defaults or to unlimited).
//
// So no node serves limits older than TTL. Misses and refreshes of a
// tenant are collapsed into one source call (singleflight), and "this
// tenant has no overrides" is cached like any value. Invalidate drops a
// tenant at once, for the node that took an admin change. The cache holds
// at most MaxEntries tenants and evicts the least recently fetched.
//
// Set the exported fields before first use; an Effective is then safe for
// concurrent use.
type Effective struct {
	Defaults     Limits
	Source       OverrideSource
	TTL          time.Duration    // at most this old; default DefaultLimitsTTL
	RefreshAfter time.Duration    // refresh early from this age; default TTL/2
	FetchTimeout time.Duration    // bound on one source call; default DefaultLimitsFetchTimeout
	MaxEntries   int              // cache cap; default DefaultLimitsCacheEntries
	Now          func() time.Time // default time.Now

	mu      sync.RWMutex
	entries map[string]*effEntry
	order   list.List // of string tenant, least recently fetched first
	epoch   uint64    // bumped by Invalidate; guarded by mu

	group singleflight.Group

	fetches, failures, evictions atomic.Uint64
}

type effEntry struct {
	limits     Limits
	src        Source
	elem       *list.Element
	refreshing atomic.Bool
}

// EffectiveStats is a snapshot of an Effective's counters, for metrics.
type EffectiveStats struct {
	Entries   int    // tenants cached
	Fetches   uint64 // source calls
	Failures  uint64 // source calls that failed (or returned invalid overrides)
	Evictions uint64 // tenants dropped to keep the cap
}

// NewEffective returns an Effective with the given defaults, source and
// cache lifetime (DefaultLimitsTTL if ttl <= 0).
func NewEffective(def Limits, src OverrideSource, ttl time.Duration) *Effective {
	if ttl <= 0 {
		ttl = DefaultLimitsTTL
	}
	return &Effective{Defaults: def, Source: src, TTL: ttl}
}

func (e *Effective) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Effective) ttl() time.Duration {
	if e.TTL > 0 {
		return e.TTL
	}
	return DefaultLimitsTTL
}

func (e *Effective) refreshAfter() time.Duration {
	if e.RefreshAfter > 0 && e.RefreshAfter <= e.ttl() {
		return e.RefreshAfter
	}
	return e.ttl() / 2
}

// For returns tenant's effective limits and where they came from. The
// error wraps ErrLimitsUnavailable when the source failed and no value
// younger than TTL is cached, or is ctx's error if ctx ends while waiting.
func (e *Effective) For(ctx context.Context, tenant string) (Limits, Source, error) {
	now := e.now()
	e.mu.RLock()
	ent := e.entries[tenant]
	e.mu.RUnlock()
	if ent != nil {
		age := now.Sub(ent.src.FetchedAt)
		switch {
		case age < e.refreshAfter():
			return ent.limits, ent.src, nil
		case age < e.ttl():
			if !ent.refreshing.CompareAndSwap(false, true) {
				return ent.limits, ent.src, nil // someone else is refreshing
			}
			fresh, err := e.fetch(ctx, tenant)
			ent.refreshing.Store(false)
			if err != nil {
				return ent.limits, ent.src, nil // still within TTL
			}
			return fresh.limits, fresh.src, nil
		}
	}
	fresh, err := e.fetch(ctx, tenant)
	if err != nil {
		return Limits{}, Source{}, err
	}
	return fresh.limits, fresh.src, nil
}

// fetch reads tenant through singleflight and caches the result. A
// waiting caller gives up when its own ctx ends; the source call itself
// runs detached from any one caller's cancellation, bounded by
// FetchTimeout.
func (e *Effective) fetch(ctx context.Context, tenant string) (*effEntry, error) {
	ch := e.group.DoChan(tenant, func() (any, error) {
		return e.load(ctx, tenant)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*effEntry), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *Effective) load(ctx context.Context, tenant string) (*effEntry, error) {
	e.mu.RLock()
	epoch := e.epoch
	e.mu.RUnlock()
	fetchedAt := e.now() // before the read: age is never understated

	timeout := e.FetchTimeout
	if timeout <= 0 {
		timeout = DefaultLimitsFetchTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()

	e.fetches.Add(1)
	if e.Source == nil {
		e.failures.Add(1)
		return nil, fmt.Errorf("limits for tenant %q: %w: no override source", tenant, ErrLimitsUnavailable)
	}
	o, ok, err := e.Source.TenantOverrides(cctx, tenant)
	if err == nil && ok {
		err = o.Validate()
	}
	if err != nil {
		e.failures.Add(1)
		return nil, fmt.Errorf("limits for tenant %q: %w: %w", tenant, ErrLimitsUnavailable, err)
	}
	if !ok {
		o = Overrides{}
	}
	ent := &effEntry{
		limits: o.Apply(e.Defaults),
		src:    Source{HasOverride: ok, Overrides: o, FetchedAt: fetchedAt},
	}
	e.store(tenant, ent, epoch)
	return ent, nil
}

// store caches ent unless an Invalidate happened since the read began
// (then the value may predate the change; callers of this flight still
// get it, later callers read again).
func (e *Effective) store(tenant string, ent *effEntry, epoch uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.epoch != epoch {
		return
	}
	if e.entries == nil {
		e.entries = make(map[string]*effEntry)
	}
	if old := e.entries[tenant]; old != nil {
		e.order.Remove(old.elem)
	}
	ent.elem = e.order.PushBack(tenant)
	e.entries[tenant] = ent
	maxEntries := e.MaxEntries
	if maxEntries <= 0 {
		maxEntries = DefaultLimitsCacheEntries
	}
	for len(e.entries) > maxEntries {
		oldest := e.order.Front()
		e.order.Remove(oldest)
		delete(e.entries, oldest.Value.(string))
		e.evictions.Add(1)
	}
}

// Invalidate drops tenant's cached limits, so that the next For reads the
// source. The node that wrote a tenant's overrides calls it after the
// write; other nodes see the change within TTL.
func (e *Effective) Invalidate(tenant string) {
	e.mu.Lock()
	e.epoch++
	if ent := e.entries[tenant]; ent != nil {
		e.order.Remove(ent.elem)
		delete(e.entries, tenant)
	}
	e.mu.Unlock()
	e.group.Forget(tenant)
}

// Stats returns the counters.
func (e *Effective) Stats() EffectiveStats {
	e.mu.RLock()
	n := len(e.entries)
	e.mu.RUnlock()
	return EffectiveStats{Entries: n, Fetches: e.fetches.Load(), Failures: e.failures.Load(), Evictions: e.evictions.Load()}
}
