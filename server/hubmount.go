package server

import (
	"context"

	"github.com/labstack/echo/v4"

	"openxet/hub"
	"openxet/store"

	"openxet/store/accounts"
)

// The Hub API is package hub; the server mounts it and lends it what the
// server owns: the guard and who a request acts as, memory reservations,
// tenant limits, CAS tokens, the reconstructed file stream, the collector
// and readiness. The server renders the Hub's errors (errors.go, isHubPath).

// ownNamespaces are the first path segments of the server's own routes
// other than /api/: a path under one is never a Hub repo page.
func ownNamespaces() []string {
	return []string{"v1", "v2", "xorbs", "xorb", "shards", "shard", "reconstructions", "reconstruction",
		"chunks", "chunk", "healthz", "readyz", "metrics"}
}

func (s *Server) newHub() (*hub.Hub, error) {
	return hub.New(hub.Config{
		Store:              s.store,
		Guard:              s.guard,
		GuardURLToken:      s.guardURLToken,
		GuardPublic:        s.guardPublic,
		GuardOpen:          s.guardOpen,
		Uploads:            s.hubUploads,
		Principal:          principalOf,
		BaseURL:            s.base,
		Reserve:            s.reserve,
		ReserveBuffer:      s.reserveBuffer,
		Work:               s.hubWork,
		TenantLimits:       s.limitsFor,
		CASToken:           s.casTokenFor,
		Credential:         s.credential,
		ServeXetFile:       s.serveXetFile,
		ReadXetRange:       s.readXetRange,
		Released:           s.gc.poke,
		Ready:              s.ready,
		Mirror:             s.hubMirror(),
		DefaultVisibility:  s.cfg.DefaultVisibility,
		AnonymousReads:     s.cfg.AnonymousReads,
		Version:            s.cfg.Version,
		ReservedNamespaces: ownNamespaces(),
	})
}

// hubMirror is the Hub's view of the mirror: nil (not a nil interface
// value of a nil pointer) without one.
func (s *Server) hubMirror() hub.Mirror {
	if s.cfg.Mirror == nil {
		return nil
	}
	return s.cfg.Mirror
}

// hubUploads is the server's part of the uploads the Hub stores itself.
func (s *Server) hubUploads() hub.UploadConfig {
	return hub.UploadConfig{DedupGlobal: s.cfg.DedupScope == "global", DefaultQuotaBytes: s.cfg.Limits.QuotaBytes,
		BodyReadTimeout: s.cfg.BodyReadTimeout}
}

// principalOf is the Hub's view of the request's identity; nil when no
// guard authenticated the request.
func principalOf(c echo.Context) *hub.Principal {
	id := identityOf(c)
	if id == nil {
		return nil
	}
	return &hub.Principal{CredentialID: id.CredentialID, Tenant: id.Tenant, Scopes: id.Scopes, ViaCASToken: id.viaCASToken, Anonymous: id.anonymous,
		Access: id.access, User: id.person, FineGrained: id.fineGrained}
}

// reserve takes n bytes from the memory budget for the request's
// credential and tenant.
func (s *Server) reserve(c echo.Context, n int64) (release func(), err error) {
	res, err := s.budget.Reserve(c.Request().Context(), budgetKey(identityOf(c)), n)
	if err != nil {
		return nil, err
	}
	return res.Release, nil
}

// reserveBuffer takes an n-byte buffer from the memory budget (and its
// pool) for the request's credential and tenant.
func (s *Server) reserveBuffer(c echo.Context, n int64) ([]byte, func(), error) {
	res, buf, err := s.budget.ReserveBuffer(c.Request().Context(), budgetKey(identityOf(c)), n)
	if err != nil {
		return nil, nil, err
	}
	return buf, res.Release, nil
}

// hubWork takes a work slot for a section of an upload the Hub stores
// itself. Its body is under way, so it waits until a slot is granted or
// the request ends (answerSlot) rather than refusing after work_wait.
func (s *Server) hubWork(c echo.Context) (func(), error) {
	slot, err := s.answerSlot(c)
	if err != nil {
		return nil, err
	}
	return slot.Release, nil
}

// casTokenFor signs a CAS token of one scope for a credential to act on
// repo r, valid for TokenTTL; the expiry is in Unix seconds. A token for
// a repo the caller has no level in (a Shared repo of another namespace)
// names it (casClaims.Repo), is of the caller's own tenant and has the
// read scope only. A personal token's is of r's namespace, and names r
// (casClaims.For) when the token's grant reaches r but not its namespace.
func (s *Server) casTokenFor(p *hub.Principal, scope string, r store.RepoID) (string, int64) {
	exp := s.now().Add(s.cfg.TokenTTL).Unix()
	cl := casClaims{CredentialID: p.CredentialID, Tenant: p.Tenant, Scopes: []string{scope}, Expiry: exp}
	switch {
	case p.Level(r) < accounts.ReadAccess:
		cl.Repo, cl.Scopes = &r, []string{accounts.ScopeRead}
	case p.User != nil && !p.Member(r.Tenant):
		cl.Tenant, cl.For = r.Tenant, &r
	case p.User != nil:
		cl.Tenant = r.Tenant
	}
	return s.signer.casToken(cl), exp
}

// credential reads a credential through the cache auth uses.
func (s *Server) credential(ctx context.Context, id string) (accounts.Credential, error) {
	e, err := s.creds.get(ctx, id)
	return e.cred, err
}

// ready reports whether the index and the bucket answer within
// readyTimeout, as /readyz checks them.
func (s *Server) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.store.Ping(ctx) == nil
}
