package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/store"

	"openxet/store/accounts"
)

// LimitsDoc is a tenant's overrides as the admin API and the bucket record
// carry them: limits.Overrides, whose JSON names are the [limits] keys. A
// nil field is not overridden; quota_bytes -1 means unlimited.
type LimitsDoc = limits.Overrides

// overrideSource reads tenant overrides from the index for limits.Effective.
type overrideSource struct{ st *store.Store }

// TenantOverrides reads a tenant's stored overrides document. It is the one
// place a stored document is decoded.
func (o overrideSource) TenantOverrides(ctx context.Context, tenant string) (limits.Overrides, bool, error) {
	doc, ok, err := o.st.TenantLimits(ctx, tenant)
	if err != nil || !ok {
		return limits.Overrides{}, false, err
	}
	var d LimitsDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return limits.Overrides{}, false, fmt.Errorf("limits of %s: %w", tenant, err)
	}
	return d, true, nil
}

// maxLimitsDocBytes bounds a limits document in a request.
const maxLimitsDocBytes = 64 << 10

// decodeLimitsDoc reads a limits document from a request body: exactly one
// JSON object with known fields, nothing after it but whitespace, and valid
// values. Anything else (null, an array, trailing data such as a second
// object) is a bad_request, so that a malformed body never applies part of
// itself.
func decodeLimitsDoc(c echo.Context) (LimitsDoc, error) {
	var d LimitsDoc
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, maxLimitsDocBytes))
	if err != nil {
		return d, refuse(errBadRequest, "the body is not a limits document: %v", err)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return d, refuse(errBadRequest, "the body is not a limits document: want one JSON object like {\"quota_bytes\": 10737418240}")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return LimitsDoc{}, refuse(errBadRequest, "the body is not a limits document: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return LimitsDoc{}, refuse(errBadRequest, "the body is not a limits document: data after the JSON object")
	}
	if err := d.Validate(); err != nil {
		return LimitsDoc{}, refuse(errBadRequest, "%v", err)
	}
	return d, nil
}

// EffectiveLimits is the admin view of one tenant.
type EffectiveLimits struct {
	Tenant                      string            `json:"tenant"`
	QuotaBytes                  int64             `json:"quota_bytes"`
	UsageBytes                  int64             `json:"usage_bytes"`
	TenantRequestsPerSecond     float64           `json:"tenant_requests_per_second"`
	TenantBurst                 int               `json:"tenant_burst"`
	CredentialRequestsPerSecond float64           `json:"credential_requests_per_second"`
	CredentialBurst             int               `json:"credential_burst"`
	MaxInFlightPerCredential    int               `json:"max_in_flight_per_credential"`
	Suspended                   bool              `json:"suspended"`
	Overrides                   LimitsDoc         `json:"overrides"`
	Source                      map[string]string `json:"source"`
}

// CredentialView is a credential as the admin API shows it (never the secret).
type CredentialView struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Scopes  []string  `json:"scopes"`
	Created time.Time `json:"created"`
	Revoked time.Time `json:"revoked,omitzero"`
	Token   string    `json:"token,omitempty"` // only in the answer that creates it
}

func viewCredential(c accounts.Credential) CredentialView {
	return CredentialView{ID: c.ID, Tenant: c.Tenant, Scopes: c.Scopes, Created: c.Created, Revoked: c.Revoked}
}

func (s *Server) adminRoutes(e *echo.Echo) {
	g := e.Group("/api/openxet/v1/admin", s.guard(accounts.ScopeAdmin))
	g.GET("/tenants", s.listTenants)
	g.GET("/tenants/:tenant/limits", s.getLimits)
	g.PUT("/tenants/:tenant/limits", s.putLimits)
	g.DELETE("/tenants/:tenant/limits", s.deleteLimits)
	g.GET("/credentials", s.listCredentials)
	g.POST("/credentials", s.createCredential)
	g.DELETE("/credentials/:id", s.revokeCredential)
	g.GET("/repos/:type/:tenant/:name/visibility", s.getRepoVisibility)
	g.PUT("/repos/:type/:tenant/:name/visibility", s.putRepoVisibility)
	g.GET("/mirror", s.listMirrored)
	g.POST("/mirror/pull", s.pullMirrored)
}

// RepoVisibilityView is a repo's visibility as the admin API shows and
// takes it (docs/sharing.md).
type RepoVisibilityView struct {
	Repo       string `json:"repo"` // tenant/name
	Type       string `json:"type"` // model, dataset or space
	Visibility string `json:"visibility"`
}

// adminRepoID reads the repo of an admin repo route: type (model, dataset
// or space), tenant and name.
func adminRepoID(c echo.Context) (store.RepoID, error) {
	typ := c.Param("type")
	if typ != "model" && typ != "dataset" && typ != "space" {
		return store.RepoID{}, refuse(errBadRequest, "repo type %q is not model, dataset or space", typ)
	}
	t, err := tenantParam(c)
	if err != nil {
		return store.RepoID{}, err
	}
	return store.RepoID{Type: typ, Tenant: t, Name: c.Param("name")}, nil
}

func repoVisibilityView(r store.Repo) RepoVisibilityView {
	return RepoVisibilityView{Repo: r.Tenant + "/" + r.Name, Type: r.Type, Visibility: r.VisibilityOf()}
}

// getRepoVisibility answers a repo's visibility; 404 for no such repo.
func (s *Server) getRepoVisibility(c echo.Context) error {
	id, err := adminRepoID(c)
	if err != nil {
		return err
	}
	r, err := s.store.Repo(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, repoVisibilityView(r))
}

// putRepoVisibility sets a repo's visibility, as its owner's
// update_repo_settings does, for an operator: {"visibility": "public"}.
// It applies to the next request on every node (docs/sharing.md).
func (s *Server) putRepoVisibility(c echo.Context) error {
	id, err := adminRepoID(c)
	if err != nil {
		return err
	}
	var body struct {
		Visibility *string `json:"visibility"`
	}
	dec := json.NewDecoder(io.LimitReader(c.Request().Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Visibility == nil {
		return refuse(errBadRequest, "the body must be {\"visibility\": \"private\" | \"internal\" | \"public\" | \"protected\"}")
	}
	r, err := s.store.SetRepoSettings(c.Request().Context(), id, store.RepoSettings{Visibility: body.Visibility})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, repoVisibilityView(r))
}

// effectiveView reads a tenant's overrides and usage for the admin API.
func (s *Server) effectiveView(ctx context.Context, tenant string) (EffectiveLimits, error) {
	d, _, err := overrideSource{s.store}.TenantOverrides(ctx, tenant)
	if err != nil {
		return EffectiveLimits{}, err
	}
	return s.viewOf(ctx, tenant, d)
}

// viewOf is the admin view of a tenant whose overrides are d.
func (s *Server) viewOf(ctx context.Context, tenant string, d LimitsDoc) (EffectiveLimits, error) {
	lim := d.Apply(s.cfg.Limits)
	usage, err := s.store.Usage(ctx, tenant)
	if err != nil {
		return EffectiveLimits{}, err
	}
	src := func(set bool) string {
		if set {
			return "override"
		}
		return "default"
	}
	return EffectiveLimits{
		Tenant: tenant, QuotaBytes: lim.QuotaBytes, UsageBytes: usage,
		TenantRequestsPerSecond: lim.TenantRate.PerSecond, TenantBurst: lim.TenantRate.Burst,
		CredentialRequestsPerSecond: lim.CredentialRate.PerSecond, CredentialBurst: lim.CredentialRate.Burst,
		MaxInFlightPerCredential: lim.MaxInFlightPerCredential,
		Suspended:                lim.Suspended,
		Overrides:                d,
		Source: map[string]string{
			"quota_bytes":                    src(d.QuotaBytes != nil),
			"tenant_requests_per_second":     src(d.TenantRequestsPerSecond != nil),
			"tenant_burst":                   src(d.TenantBurst != nil),
			"credential_requests_per_second": src(d.CredentialRequestsPerSecond != nil),
			"credential_burst":               src(d.CredentialBurst != nil),
			"max_in_flight_per_credential":   src(d.MaxInFlightPerCredential != nil),
			"suspended":                      src(d.Suspended),
		},
	}, nil
}

func (s *Server) listTenants(c echo.Context) error {
	ts, err := s.store.Tenants(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]EffectiveLimits, 0, len(ts))
	for _, t := range ts {
		v, err := s.effectiveView(c.Request().Context(), t.Name)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	return c.JSON(http.StatusOK, map[string]any{"tenants": out})
}

func tenantParam(c echo.Context) (string, error) {
	t := c.Param("tenant")
	if err := accounts.ValidTenant(t); err != nil {
		return "", err
	}
	return t, nil
}

// knownTenant returns the tenant of the path if the index knows it
// (store.TenantKnown), else 404 not_found, so that a typo in a tenant name
// neither shows default limits nor sets limits nobody has. create lets a
// PUT make an unknown tenant known.
func (s *Server) knownTenant(c echo.Context, create bool) (string, error) {
	t, err := tenantParam(c)
	if err != nil {
		return "", err
	}
	if create {
		return t, nil
	}
	known, err := s.store.TenantKnown(c.Request().Context(), t)
	if err != nil {
		return "", err
	}
	if !known {
		return "", &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("tenant %s is unknown: it has no credentials, stored data, repos or limits", t),
			Hint:    "check the name; to set limits before a tenant has anything, PUT with ?create=1 (openxet limits set --create)"}
	}
	return t, nil
}

func (s *Server) getLimits(c echo.Context) error {
	t, err := s.knownTenant(c, false)
	if err != nil {
		return err
	}
	v, err := s.effectiveView(c.Request().Context(), t)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// putLimits replaces a tenant's overrides with the body's (fields left out
// are not overridden); the bucket record first, then the index, then this
// node's cache at once. An unknown tenant is 404 unless the query says
// create=1.
func (s *Server) putLimits(c echo.Context) error {
	create := false
	if v := c.QueryParam("create"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return refuse(errBadRequest, "create=%q is not a boolean (1 or 0)", v)
		}
		create = b
	}
	t, err := s.knownTenant(c, create)
	if err != nil {
		return err
	}
	d, err := decodeLimitsDoc(c)
	if err != nil {
		return err
	}
	var doc []byte
	if !d.IsZero() {
		doc, _ = json.Marshal(d)
	}
	ctx := c.Request().Context()
	if err := s.store.PutTenantLimits(ctx, t, doc, d.QuotaBytes); err != nil {
		return err
	}
	s.effective.Invalidate(t)
	v, err := s.viewOf(ctx, t, d)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) deleteLimits(c echo.Context) error {
	t, err := s.knownTenant(c, false)
	if err != nil {
		return err
	}
	if err := s.store.PutTenantLimits(c.Request().Context(), t, nil, nil); err != nil {
		return err
	}
	s.effective.Invalidate(t)
	return s.getLimits(c)
}

func (s *Server) listCredentials(c echo.Context) error {
	cs, err := s.store.Credentials(c.Request().Context(), c.QueryParam("tenant"))
	if err != nil {
		return err
	}
	out := make([]CredentialView, len(cs))
	for i, cr := range cs {
		out[i] = viewCredential(cr)
	}
	return c.JSON(http.StatusOK, map[string]any{"credentials": out})
}

func (s *Server) createCredential(c echo.Context) error {
	var req struct {
		Tenant string   `json:"tenant"`
		Scopes []string `json:"scopes"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 64<<10)).Decode(&req); err != nil {
		return refuse(errBadRequest, "the body is not {\"tenant\", \"scopes\"}: %v", err)
	}
	cr, tok, err := s.store.CreateCredential(c.Request().Context(), req.Tenant, req.Scopes)
	if err != nil {
		if errors.Is(err, accounts.ErrBadTenant) {
			return err
		}
		return refuse(errBadRequest, "%v", err)
	}
	v := viewCredential(cr)
	v.Token = tok
	return c.JSON(http.StatusCreated, v)
}

func (s *Server) revokeCredential(c echo.Context) error {
	cr, err := s.store.RevokeCredential(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	s.creds.forget(cr.ID)
	return c.JSON(http.StatusOK, viewCredential(cr))
}
