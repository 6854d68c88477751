package server

import (
	"errors"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
)

// guard authenticates a request, checks that its credential has scope, and
// admits it through the rate limits (design §4 order). Handlers behind it
// find the identity with identityOf.
func (s *Server) guard(scope string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ip := c.RealIP()
			if d := s.authFailures.Check(ip, s.now()); !d.Allowed {
				return s.refused(&limits.RateError{Limit: "auth_failures", Decision: d})
			}
			tok, ok := bearer(c.Request().Header.Get("Authorization"))
			if !ok {
				s.authFailures.Fail(ip, s.now())
				return refuse(errUnauthorized, "missing Authorization: Bearer token")
			}
			id, err := s.authenticate(c.Request().Context(), tok)
			if err != nil {
				if errors.Is(err, errUnauthorized) {
					s.authFailures.Fail(ip, s.now())
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
			return next(c)
		}
	}
}

// admit runs the credential limiter, the tenant limiter and the in-flight cap
// for one request. A request refused by one of them uses up none of the
// others' allowance: each is peeked before any is charged.
func (s *Server) admit(c echo.Context, id *identity) (release func(), err error) {
	lim, err := s.limitsFor(c, id.Tenant)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if d := s.credLimiter.Peek(id.CredentialKey, lim.CredentialRate, now); !d.Allowed {
		return nil, s.refused(&limits.RateError{Limit: "credential", Decision: d})
	}
	if d := s.tenantLimiter.Peek(id.Tenant, lim.TenantRate, now); !d.Allowed {
		return nil, s.refused(&limits.RateError{Limit: "tenant", Decision: d})
	}
	if !s.inFlight.Acquire(id.CredentialKey, lim.MaxInFlightPerCredential) {
		d := limits.Decision{RetryAfter: time.Second, Limit: limits.Rate{Burst: lim.MaxInFlightPerCredential}}
		return nil, s.refused(&limits.RateError{Limit: "in_flight", Decision: d})
	}
	if d := s.credLimiter.Allow(id.CredentialKey, lim.CredentialRate, now); !d.Allowed {
		s.inFlight.Release(id.CredentialKey)
		return nil, s.refused(&limits.RateError{Limit: "credential", Decision: d})
	}
	if d := s.tenantLimiter.Allow(id.Tenant, lim.TenantRate, now); !d.Allowed {
		s.inFlight.Release(id.CredentialKey)
		return nil, s.refused(&limits.RateError{Limit: "tenant", Decision: d})
	}
	key := id.CredentialKey
	return func() { s.inFlight.Release(key) }, nil
}

// refused counts a rate refusal for metrics and returns it.
func (s *Server) refused(e *limits.RateError) error {
	s.metrics.refusals.WithLabelValues(e.Limit).Inc()
	return e
}
