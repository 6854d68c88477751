package server

import (
	"errors"
	"time"

	"github.com/labstack/echo/v4"
)

// guard authenticates a request, checks that its credential has scope, and
// admits it through the rate limits (design §4 order). Handlers behind it
// find the identity with identityOf.
func (s *Server) guard(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			ip := c.RealIP()
			if err := s.gate.CheckAuth(ip, s.now()); err != nil {
				return err
			}
			tok, ok := bearer(c.Request().Header.Get("Authorization"))
			if !ok {
				s.gate.AuthFailed(ip, s.now())
				return refuse(errUnauthorized, "missing Authorization: Bearer token")
			}
			id, err := s.authenticate(c.Request().Context(), tok)
			if err != nil {
				if errors.Is(err, errUnauthorized) {
					s.gate.AuthFailed(ip, s.now())
				}
				return err
			}
			c.Set(identityKey, id)
			if scope != "" && !id.has(scope) {
				return refuse(errForbidden, "this route needs the %s scope", scope)
			}
			release, err := s.admit(c, id)
			if err != nil {
				return err
			}
			defer release()
			stagesOf(c).since(stageAuth, start)
			return next(c)
		}
	}
}

// admit runs the credential limiter, the tenant limiter and the in-flight
// cap for one request (limits.Gate: a refusal by one gives back what the
// others spent). The caller calls release when the request ends.
func (s *Server) admit(c echo.Context, id *identity) (release func(), err error) {
	lim, err := s.limitsFor(c, id.Tenant)
	if err != nil {
		return nil, err
	}
	if _, err := s.gate.Admit(id.CredentialKey, id.Tenant, lim, s.now()); err != nil {
		return nil, err
	}
	key := id.CredentialKey
	return func() { s.gate.Done(key) }, nil
}
