package server

import (
	"cmp"
	"errors"
	"runtime/trace"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/hub"
	"openxet/limits"

	"openxet/store/accounts"
)

// guard authenticates a request, checks that its credential has scope, and
// admits it through the rate limits (docs/design.md §4 order). Handlers behind it
// find the identity with identityOf.
func (s *Server) guard(scope string) echo.MiddlewareFunc { return s.guardRated(scope, true, false) }

// guardURLToken is guard for routes whose clients send no Authorization
// header (the Hub's LFS basic upload URL, which huggingface_hub and
// @huggingface/hub PUT to bare): without the header, a CAS token in the
// query parameter "token" authenticates the request. Credentials are never
// taken from a URL, only the short-lived CAS tokens the server signs; the
// request log records the path without its query.
func (s *Server) guardURLToken(scope string) echo.MiddlewareFunc {
	return s.guardRated(scope, true, true)
}

// authOnly is guard without the rate limits and the in-flight cap, for
// requests that cost next to nothing and must not spend a tenant's
// allowance (hf_xet's telemetry). The auth-failure limit still applies.
func (s *Server) authOnly(scope string) echo.MiddlewareFunc { return s.guardRated(scope, false, false) }

func (s *Server) guardRated(scope string, rated, urlToken bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			attempt, err := s.gate.BeginAuth(c.RealIP(), s.now())
			if err != nil {
				return err
			}
			tok, ok := bearer(c.Request().Header.Get("Authorization"))
			if q := c.QueryParam("token"); !ok && urlToken && strings.HasPrefix(q, casTokenPrefix) {
				tok, ok = q, true
			}
			if !ok {
				err := refuse(errUnauthorized, "missing Authorization: Bearer token")
				if s.hub.IsGitPath(c.Request().URL.Path) {
					// git asks its credential helper only after a
					// challenge.
					c.Response().Header().Set("WWW-Authenticate", hub.GitRealm)
				}
				if s.hub.NamesRepo(c.Request().URL.Path) {
					// As the Hub answers for a repo it will not show:
					// huggingface_hub maps it to RepositoryNotFoundError.
					ae := toAPIError(err)
					ae.Headers = map[string]string{"X-Error-Code": "RepoNotFound"}
					err = ae
				}
				return s.authFailed(attempt, err)
			}
			id, err := s.authenticate(c.Request().Context(), tok)
			if err != nil {
				if errors.Is(err, errUnauthorized) {
					if s.hub.IsGitPath(c.Request().URL.Path) {
						c.Response().Header().Set("WWW-Authenticate", hub.GitRealm)
					}
					return s.authFailed(attempt, err)
				}
				attempt.Refund() // not the client's failure
				return err
			}
			attempt.Refund()
			c.Set(identityKey, id)
			if trace.IsEnabled() {
				trace.Log(c.Request().Context(), "tenant", id.Tenant)
			}
			if scope != "" && !id.has(scope) {
				return &scopeError{Tenant: id.Tenant, Have: id.Scopes, Need: scope}
			}
			if !rated {
				return next(c)
			}
			adm, err := s.admit(c, id, scope == accounts.ScopeAdmin)
			if err != nil {
				return err
			}
			defer s.gate.Done(adm)
			defer s.anonPace.tenantStarted()()
			stagesOf(c).since(stageAuth, start)
			if err := s.takeTurn(c, adm); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// authFailed ends a failed authentication attempt and returns err, or the
// auth-failure limit's refusal when the failure could not be recorded
// (limits.AuthFailures: the table is full of throttled addresses).
func (s *Server) authFailed(attempt limits.AuthAttempt, err error) error {
	if rerr := s.gate.AuthFailed(attempt, s.now()); rerr != nil {
		return rerr
	}
	return err
}

// admit refuses a suspended tenant, then runs the credential limiter, the
// tenant limiter and the in-flight cap for one request (limits.Gate: a
// refusal by one gives back what the others spent). The suspension comes
// first, so a suspended tenant's requests spend none of its allowance.
// adminRoute exempts the admin API from the suspension, so that an
// operator whose admin credential belongs to a suspended tenant can still
// resume it. The caller passes the admission to s.gate.Done when the
// request ends.
func (s *Server) admit(c echo.Context, id *identity, adminRoute bool) (limits.Admission, error) {
	lim, err := s.limitsFor(c, id.Account)
	if err != nil {
		return limits.Admission{}, err
	}
	if lim.Suspended && !adminRoute {
		return limits.Admission{}, refuse(limits.ErrTenantSuspended, "tenant %s is suspended by an operator: its requests are refused until it is resumed", id.Account)
	}
	if id.Tenant != id.Account && !adminRoute {
		// A personal token's CAS token acts in an organization's
		// namespace: a suspended organization takes no writes or reads
		// through its members either.
		if nl, err := s.limitsFor(c, id.Tenant); err != nil || nl.Suspended {
			return limits.Admission{}, cmp.Or(err, refuse(limits.ErrTenantSuspended, "tenant %s is suspended by an operator: its requests are refused until it is resumed", id.Tenant))
		}
	}
	return s.gate.AdmitClock(id.CredentialKey, id.Account, lim, s.now)
}
