package limits

// Defaults of the anonymous pool's limits (limits.anonymous_*,
// docs/sharing.md).
const (
	DefaultAnonymousRequestsPerSecond     = 20
	DefaultAnonymousBurst                 = 40
	DefaultAnonymousMaxInFlight           = 8
	DefaultAnonymousPoolRequestsPerSecond = 500
	DefaultAnonymousPoolBurst             = 1000
	DefaultAnonymousPoolMaxInFlight       = 128
)

// Anonymous are the limits of readers without a token: each client
// address on its own (AddressRate, AddressMaxInFlight) and all of them
// together, the anonymous pool (PoolRate, PoolMaxInFlight). They are set
// by the operator only; no override changes them.
type Anonymous struct {
	AddressRate        Rate // requests of one client address, per node
	AddressMaxInFlight int  // requests of one client address in progress, per node; <= 0 unlimited
	PoolRate           Rate // requests of every anonymous reader together, per node
	PoolMaxInFlight    int  // requests of every anonymous reader together in progress, per node; <= 0 unlimited
}

// DefaultAnonymous returns the built-in anonymous limits.
func DefaultAnonymous() Anonymous {
	return Anonymous{
		AddressRate:        Rate{PerSecond: DefaultAnonymousRequestsPerSecond, Burst: DefaultAnonymousBurst},
		AddressMaxInFlight: DefaultAnonymousMaxInFlight,
		PoolRate:           Rate{PerSecond: DefaultAnonymousPoolRequestsPerSecond, Burst: DefaultAnonymousPoolBurst},
		PoolMaxInFlight:    DefaultAnonymousPoolMaxInFlight,
	}
}

// Limits returns a as the Limits a Gate applies with the client address
// as the credential and the pool as the tenant: the address's rate and
// in-flight cap as a credential's, the pool's rate and in-flight cap as a
// tenant's. Anonymous readers store nothing: the quota is 0.
func (a Anonymous) Limits() Limits {
	return Limits{
		CredentialRate:           a.AddressRate,
		MaxInFlightPerCredential: a.AddressMaxInFlight,
		TenantRate:               a.PoolRate,
		MaxInFlightPerTenant:     a.PoolMaxInFlight,
	}
}
