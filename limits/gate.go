package limits

import (
	"time"
)

// Gate applies the per-request limits of one node in the order of
// docs/design.md §4: the auth-failure limit per client IP before a token is verified, then
// the credential rate, the tenant rate and the credential's in-flight cap.
// A request refused by a later limit gets back what the earlier ones
// spent, so a refusal by one limit never uses up another's allowance.
//
// Gate is a convenience over its exported parts, which may also be used
// directly. Build it with NewGate; it is safe for concurrent use.
type Gate struct {
	Credentials *Table    // keyed by sha256(credential id)
	Tenants     *Table    // keyed by tenant name
	InFlight    *InFlight // keyed like Credentials
	// TenantInFlight counts, exactly, the requests in progress of each
	// tenant whose Limits.MaxInFlightPerTenant caps them (the server's
	// anonymous pool); keyed like Tenants. Tenants without that cap are
	// not counted here. A Gate put together without it applies no such
	// cap.
	TenantInFlight *InFlight
	AuthFailures   *AuthFailures // keyed by client IP
	Refusals       Refusals
	// tenants counts each tenant's requests in progress, approximately
	// (occupancy), for Admission.TenantInFlight; keyed like Tenants. The
	// zero value is ready, so a Gate put together from its parts has it.
	tenants occupancy
}

// GateConfig sizes a Gate. Zero fields take the defaults.
type GateConfig struct {
	MaxCredentials        int // key cap of the credential table (DefaultMaxKeys)
	MaxTenants            int // key cap of the tenant table (DefaultMaxKeys)
	MaxIPs                int // key cap of the auth-failure table (DefaultMaxKeys)
	AuthFailuresPerMinute int // DefaultAuthFailuresPerMinute; < 0 disables
}

// NewGate returns a Gate sized by c.
func NewGate(c GateConfig) *Gate {
	perMinute := c.AuthFailuresPerMinute
	if perMinute == 0 {
		perMinute = DefaultAuthFailuresPerMinute
	}
	creds, tenants := NewTable(c.MaxCredentials), NewTable(c.MaxTenants)
	return &Gate{
		Credentials:    creds,
		Tenants:        tenants,
		InFlight:       newInFlight(creds.seed),
		TenantInFlight: newInFlight(tenants.seed),
		AuthFailures:   NewAuthFailures(perMinute, c.MaxIPs),
	}
}

// BeginAuth admits ip to one authentication attempt at now, spending the
// attempt's unit of the auth-failure limit before the token is checked
// (AuthFailures.Begin). It returns a *RateError (LimitAuthFailures) if ip
// may not attempt now. End an admitted attempt with its Refund (the token
// verified) or with AuthFailed.
func (g *Gate) BeginAuth(ip string, now time.Time) (AuthAttempt, error) {
	at, d := g.AuthFailures.Begin(ip, now)
	if d.Allowed {
		return at, nil
	}
	g.Refusals.Inc(LimitAuthFailures)
	return at, &RateError{Limit: LimitAuthFailures, Decision: d}
}

// AuthFailed ends an attempt whose token did not verify, at now. It returns
// a *RateError (LimitAuthFailures) when the failure could not be recorded
// (see AuthFailures): answer that attempt as refused by the limit.
func (g *Gate) AuthFailed(at AuthAttempt, now time.Time) error {
	d := at.Failed(now)
	if d.Allowed {
		return nil
	}
	g.Refusals.Inc(LimitAuthFailures)
	return &RateError{Limit: LimitAuthFailures, Decision: d}
}

// Admission holds the two rate decisions Gate.AdmitClock took, for RateLimit
// headers. On a refusal by the credential limit, Tenant is the zero value.
type Admission struct {
	Credential Decision
	Tenant     Decision
	// TenantInFlight is how many requests of the tenant, all its
	// credentials together, were in progress on this node once this one
	// was admitted, this one included. It is approximate: now and then it
	// also counts another tenant's (occupancy); it never misses one.
	TenantInFlight int
	// The counts AdmitClock entered, for Done: the credential's in-flight
	// entry and the tenant's hash; zero for a refused request.
	inFlight, tenant uint64
	// tenantCounted: the request is counted in Gate.TenantInFlight under
	// the hash tenantInFlight (its tenant's MaxInFlightPerTenant is set).
	tenantInFlight uint64
	tenantCounted  bool
}

// AdmitClock applies the credential rate, the tenant rate, the in-flight
// cap and, when l sets one, the tenant's in-flight cap of l to one request at the time clock returns. On success the caller
// must call Done with the Admission exactly once when the request ends
// (defer it). On refusal it returns a *RateError naming the limit and
// nothing stays spent.
//
// Each key is hashed once (keys), and the clock is read after that, just
// before the tables are consulted.
func (g *Gate) AdmitClock(credential, tenant string, l Limits, clock func() time.Time) (Admission, error) {
	k := g.keys(credential, tenant)
	return g.admit(k, credential, tenant, l, clock())
}

// gateKeys are a request's credential and tenant hashed for the tables.
type gateKeys struct{ credential, tenant uint64 }

// keys hashes credential and tenant (each once: the credential's hash
// serves its rate and its in-flight count, NewGate gives both the same
// seed).
func (g *Gate) keys(credential, tenant string) gateKeys {
	return gateKeys{g.Credentials.hash(credential), g.Tenants.hash(tenant)}
}

func (g *Gate) admit(k gateKeys, credential, tenant string, l Limits, now time.Time) (Admission, error) {
	var a Admission
	hc, ht := k.credential, k.tenant
	a.Credential, _ = g.Credentials.allowHash(hc, l.CredentialRate, now, false)
	if !a.Credential.Allowed {
		g.Refusals.Inc(LimitCredential)
		return a, &RateError{Limit: LimitCredential, Decision: a.Credential}
	}
	a.Tenant, _ = g.Tenants.allowHash(ht, l.TenantRate, now, false)
	if !a.Tenant.Allowed {
		g.Credentials.refundHash(hc, l.CredentialRate)
		g.Refusals.Inc(LimitTenant)
		return a, &RateError{Limit: LimitTenant, Decision: a.Tenant}
	}
	hf := hc
	if g.InFlight.seed != g.Credentials.seed { // not built by NewGate
		hf = keyHash(g.InFlight.seed, credential)
	}
	if !g.InFlight.acquireHash(hf, l.MaxInFlightPerCredential) {
		g.Credentials.refundHash(hc, l.CredentialRate)
		g.Tenants.refundHash(ht, l.TenantRate)
		g.Refusals.Inc(LimitInFlight)
		return a, &RateError{Limit: LimitInFlight, Decision: Decision{
			RetryAfter: time.Second,
			Limit:      Rate{Burst: l.MaxInFlightPerCredential},
		}}
	}
	if l.MaxInFlightPerTenant > 0 && g.TenantInFlight != nil {
		htf := ht
		if g.TenantInFlight.seed != g.Tenants.seed { // not built by NewGate
			htf = keyHash(g.TenantInFlight.seed, tenant)
		}
		if !g.TenantInFlight.acquireHash(htf, l.MaxInFlightPerTenant) {
			g.InFlight.releaseHash(hf)
			g.Credentials.refundHash(hc, l.CredentialRate)
			g.Tenants.refundHash(ht, l.TenantRate)
			g.Refusals.Inc(LimitTenantInFlight)
			return a, &RateError{Limit: LimitTenantInFlight, Decision: Decision{
				RetryAfter: time.Second,
				Limit:      Rate{Burst: l.MaxInFlightPerTenant},
			}}
		}
		a.tenantInFlight, a.tenantCounted = htf, true
	}
	a.inFlight, a.tenant = hf, ht // only an admitted request has counts to end
	a.TenantInFlight = g.tenants.enter(ht)
	return a, nil
}

// Done ends a request that AdmitClock admitted, given the Admission it
// returned: the credential is not hashed again. The Admission of a refused
// request names no count, so Done of it changes nothing.
func (g *Gate) Done(a Admission) {
	g.InFlight.releaseHash(a.inFlight)
	if a.tenantCounted {
		g.TenantInFlight.releaseHash(a.tenantInFlight)
	}
	if a.tenant != 0 {
		g.tenants.leave(a.tenant)
	}
}
