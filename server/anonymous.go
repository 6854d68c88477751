package server

import (
	"errors"
	"net/netip"

	"github.com/labstack/echo/v4"

	"openxet/limits"

	"openxet/store/accounts"
)

// Anonymous reads (hub.anonymous_reads, docs/sharing.md): with the setting
// on, the Hub's read routes of repos and listings admit a request without
// an Authorization header as an anonymous reader, which the Hub lets read
// public repos only, never through the CAS.

// anonymousTenant is the tenant the limits admit anonymous readers under:
// no tenant can have that name, so they share one pool. Its request rate
// and in-flight cap are Config.Anonymous's pool limits, its memory share
// Config.AnonymousMemoryShare (budget.Config.TenantShares); its work share
// and turns are a tenant's.
const anonymousTenant = ""

// guardPublic is guard("read") for the Hub's public read routes. A request
// that sends an Authorization header goes through guard as always; one
// without gets the anonymous identity of its client address when
// hub.anonymous_reads is on, and guard's 401 when it is off.
func (s *Server) guardPublic() echo.MiddlewareFunc {
	return s.guardAnonymous(accounts.ScopeRead, func() bool { return s.cfg.AnonymousReads })
}

// guardOpen is guard("") for the Hub routes that answer anyone, whatever
// hub.anonymous_reads says (POST /api/validate-yaml, which huggingface_hub
// sends without a token): a request with an Authorization header goes
// through guard as always (a bad token is refused), one without is an
// anonymous reader admitted through the anonymous pool's limits.
func (s *Server) guardOpen() echo.MiddlewareFunc {
	return s.guardAnonymous("", func() bool { return true })
}

// guardAnonymous is guard(scope) that admits a request without an
// Authorization header as the anonymous identity of its client address
// while open reports true.
func (s *Server) guardAnonymous(scope string, open func() bool) echo.MiddlewareFunc {
	authed := s.guard(scope)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		withToken := authed(next)
		return func(c echo.Context) error {
			if !open() || c.Request().Header.Get("Authorization") != "" {
				return withToken(c)
			}
			id := &identity{CredentialKey: "anonymous " + anonymousKey(c.RealIP()), Tenant: anonymousTenant, Account: anonymousTenant, anonymous: true}
			c.Set(identityKey, id)
			adm, err := s.gate.AdmitClock(id.CredentialKey, anonymousTenant, s.cfg.Anonymous.Limits(), s.now)
			if err != nil {
				return anonymousRefusal(err)
			}
			defer s.gate.Done(adm)
			if err := s.takeTurn(c, adm); err != nil {
				return err
			}
			w := c.Response()
			w.Writer = s.anonPace.wrap(w.Writer, c.Request().Context())
			return next(c)
		}
	}
}

// The names of the anonymous limits in a refusal (the "limit" field and
// the RateLimit headers): the Gate applies the client address's limits as
// a credential's and the pool's as a tenant's.
const (
	limitAnonymousAddress         = "anonymous_address"
	limitAnonymousAddressInFlight = "anonymous_address_in_flight"
	limitAnonymousPool            = "anonymous_pool"
	limitAnonymousPoolInFlight    = "anonymous_pool_in_flight"
)

// anonymousRefusal names the anonymous limit that refused a request in
// the Gate's refusal err; other errors pass unchanged.
func anonymousRefusal(err error) error {
	rl, ok := errors.AsType[*limits.RateError](err)
	if !ok {
		return err
	}
	named := *rl
	switch rl.Limit {
	case limits.LimitCredential:
		named.Limit = limitAnonymousAddress
	case limits.LimitInFlight:
		named.Limit = limitAnonymousAddressInFlight
	case limits.LimitTenant:
		named.Limit = limitAnonymousPool
	case limits.LimitTenantInFlight:
		named.Limit = limitAnonymousPoolInFlight
	}
	return &named
}

// inFlightLimit reports whether a refusal's limit caps requests in
// progress rather than a rate.
func inFlightLimit(name string) bool {
	switch name {
	case limits.LimitInFlight, limits.LimitTenantInFlight, limitAnonymousAddressInFlight, limitAnonymousPoolInFlight:
		return true
	}
	return false
}

// anonymousKey is the limiter key of an anonymous reader: its client
// address (c.RealIP, which trusts X-Forwarded-For only from
// server.trusted_proxies), an IPv6 address by its /64.
func anonymousKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
