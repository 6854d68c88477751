package server

import (
	"net/netip"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// Anonymous reads (hub.anonymous_reads, docs/sharing.md): with the setting
// on, the Hub's read routes of repos and listings admit a request without
// an Authorization header as an anonymous reader, which the Hub lets read
// public repos only, never through the CAS.

// anonymousTenant is the tenant the limits admit anonymous readers under:
// no tenant can have that name, so they share one pool, with a tenant's
// default limits (request rate, memory and work shares, turns).
const anonymousTenant = ""

// guardPublic is guard("read") for the Hub's public read routes. A request
// that sends an Authorization header goes through guard as always; one
// without gets the anonymous identity of its client address when
// hub.anonymous_reads is on, and guard's 401 when it is off.
func (s *Server) guardPublic() echo.MiddlewareFunc {
	authed := s.guard(store.ScopeRead)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		withToken := authed(next)
		return func(c echo.Context) error {
			if !s.cfg.AnonymousReads || c.Request().Header.Get("Authorization") != "" {
				return withToken(c)
			}
			id := &identity{CredentialKey: "anonymous " + anonymousKey(c.RealIP()), Tenant: anonymousTenant, anonymous: true}
			c.Set(identityKey, id)
			adm, err := s.admit(c, id, false)
			if err != nil {
				return err
			}
			defer s.gate.Done(adm)
			if err := s.takeTurn(c, adm); err != nil {
				return err
			}
			return next(c)
		}
	}
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
