package hub

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/refusal"
	"openxet/store"

	"openxet/store/accounts"
)

// Principal is who a request acts as, found by the server's guard: a
// robot credential of an organization (a tenant) with its scopes, or a
// user's personal access token (docs/people.md), whose rights in each
// namespace Access gives.
type Principal struct {
	CredentialID string
	// Tenant is the caller's own namespace: a robot credential's
	// organization, a personal token's owner, or for a CAS token the
	// namespace it was handed out for. It is where a request that names no
	// namespace (create_repo without organization, whoami, list) acts.
	Tenant string
	Scopes []string
	// ViaCASToken is true when the request carried a CAS token rather than
	// the credential itself.
	ViaCASToken bool
	// Anonymous is a reader without a token (GuardPublic): it reads public
	// repos only; Tenant and CredentialID are "".
	Anonymous bool
	// Access is what the principal may do to the repo typ/ns/name, or to
	// namespace ns itself when name is "" (accounts.Access, evaluated now).
	// Nil is a robot credential's rule: its scopes in Tenant, nothing
	// elsewhere.
	Access func(ns, typ, name string) accounts.Level
	// User is the personal token's owner and what they belong to; nil for
	// a robot credential, a CAS token or an anonymous reader.
	User *accounts.Person
	// FineGrained is a personal token of a list of grants: it reaches
	// nothing outside them but public repos (docs/people.md).
	FineGrained bool
}

// Level is what p may do to repo r (r.Name "": the namespace r.Tenant).
// A robot credential's write scope manages its organization's repos
// (settings, visibility, moves, deletion), as it always has: its level
// there is admin.
func (p *Principal) Level(r store.RepoID) accounts.Level {
	if p == nil || p.Anonymous {
		return accounts.NoAccess
	}
	if p.Access != nil {
		return p.Access(r.Tenant, r.Type, r.Name)
	}
	cred := accounts.Credential{Scopes: p.Scopes}
	switch {
	case r.Tenant != p.Tenant:
		return accounts.NoAccess
	case cred.Has(accounts.ScopeWrite):
		return accounts.AdminAccess
	case cred.Has(accounts.ScopeRead):
		return accounts.ReadAccess
	}
	return accounts.NoAccess
}

// Author is the git author of a commit p makes through the API: the user
// of a personal token (their email, or name@openxet.invalid); for a robot
// credential, none (the store's default, the repo's namespace).
func (p *Principal) Author() store.Person {
	if p == nil || p.User == nil {
		return store.Person{}
	}
	email := p.User.User.Email
	if email == "" {
		email = p.User.User.Name + "@openxet.invalid"
	}
	return store.Person{Name: p.User.User.Name, Email: email}
}

// Member reports whether p reads namespace ns as its own or as a member
// would (every repo of it, private ones included), rather than only what
// ns shares.
func (p *Principal) Member(ns string) bool {
	return p.Level(store.RepoID{Tenant: ns}) >= accounts.ReadAccess
}

// Config is what the Hub needs of the server that mounts it. Every field
// but Mirror, DefaultVisibility, AnonymousReads, Version and ReservedNamespaces is required.
type Config struct {
	Store *store.Store

	// Guard returns the middleware that authenticates a request, checks
	// that its credential has scope ("" for any) and admits it through the
	// rate limits; handlers behind it find the caller with Principal.
	Guard func(scope string) echo.MiddlewareFunc
	// GuardURLToken is Guard for a route whose clients send no headers (the
	// LFS basic upload URL): a request without an Authorization header
	// authenticates with the CAS token in its "token" query parameter.
	GuardURLToken func(scope string) echo.MiddlewareFunc
	// GuardPublic is Guard("read") for the read routes of repos and the
	// listings, which also admits a request without a token as an
	// Anonymous principal when the operator turned hub.anonymous_reads on.
	GuardPublic func() echo.MiddlewareFunc
	// GuardOpen is Guard("") for the routes that answer anyone (POST
	// /api/validate-yaml): a request without a token is admitted as an
	// Anonymous principal through the anonymous pool's limits, whatever
	// AnonymousReads says; one with a token is authenticated as by Guard.
	GuardOpen func() echo.MiddlewareFunc
	// Principal returns who a request acts as; nil when no guard
	// authenticated it (a repo page without a token).
	Principal func(c echo.Context) *Principal
	// BaseURL is the public base URL of the server for a request, without
	// a trailing slash.
	BaseURL func(c echo.Context) string
	// Reserve takes bytes from the memory budget for the request's
	// credential and tenant, waiting as the budget does; the caller calls
	// release once the bytes are no longer held. Its errors are the
	// budget's (memory_busy, payload_too_large).
	Reserve func(c echo.Context, bytes int64) (release func(), err error)
	// ReserveBuffer is Reserve for memory wanted as one buffer of n bytes,
	// taken from the budget's pool of released buffers when it can be;
	// nothing may keep a slice of it after release.
	ReserveBuffer func(c echo.Context, n int64) (buf []byte, release func(), err error)
	// Work takes one of the node's work slots for the request's tenant, for
	// a section of CPU or index work (never across a read of the body);
	// release gives it back. It waits until a slot is granted or the
	// request ends.
	Work func(c echo.Context) (release func(), err error)
	// TenantLimits returns a tenant's effective limits (its quota).
	TenantLimits func(c echo.Context, tenant string) (limits.Limits, error)
	// CASToken signs a CAS token of one scope for p to act on repo r,
	// which p may act on (repoID checked it); expiry is Unix seconds. The
	// token is of r's namespace when p reads it as a member (bound to r
	// when p's grant reaches r alone); else it is a read token for a
	// Shared repo of another namespace, which reconstructs only the files
	// r references, while r is Shared.
	CASToken func(p *Principal, scope string, r store.RepoID) (token string, expiry int64)
	// Credential reads a credential by id, through the server's cache;
	// store.ErrNotFound when there is none.
	Credential func(ctx context.Context, id string) (accounts.Credential, error)
	// ServeXetFile answers a GET or HEAD of a Xet file of tenant (or the
	// Range the request asks for), reconstructed on the server.
	ServeXetFile func(c echo.Context, tenant string, e store.TreeEntry) error
	// ReadXetRange is bytes [start, end) of the Xet file e of tenant,
	// reconstructed on the server (the safetensors headers); the caller
	// has reserved the memory of the answer.
	ReadXetRange func(c echo.Context, tenant string, e store.TreeEntry, start, end int64) ([]byte, error)
	// Released tells the collector that revisions were dropped, so that a
	// pass soon gives their quota back.
	Released func()
	// Ready reports whether the index and the bucket answer (the landing
	// page shows it).
	Ready func(ctx context.Context) bool
	// Uploads returns the server's settings for the uploads the Hub stores
	// itself (the LFS basic transfer).
	Uploads func() UploadConfig

	// Mirror serves the repos of an upstream Hub whose namespace is not a
	// local tenant (mirror.go); nil when mirror.upstream is off.
	Mirror Mirror

	// DefaultVisibility is the visibility of a repo created without one:
	// private (also for ""), internal or public (docs/sharing.md).
	DefaultVisibility string
	// AnonymousReads: the server serves public repos to readers without a
	// token (hub.anonymous_reads); the landing page then lists the newest
	// public repos.
	AnonymousReads bool
	// Version is shown on the landing page.
	Version string
	// ReservedNamespaces are the first path segments of the mounting
	// server's own routes (CAS API, probes, metrics): a path under one is
	// never a repo page. "api" is always reserved.
	ReservedNamespaces []string
}

// UploadConfig is what an upload the Hub stores itself takes from the
// server's configuration.
type UploadConfig struct {
	// DedupGlobal is server.dedup_scope = "global": stored bytes may
	// reference any tenant's chunks.
	DedupGlobal bool
	// DefaultQuotaBytes is the quota of a tenant without an override
	// (store.Unlimited for none).
	DefaultQuotaBytes int64
	// BodyReadTimeout is how long a client has to send each 64 MiB of an
	// LFS object (server.body_read_timeout); 0 for no limit.
	BodyReadTimeout time.Duration
}

// Hub serves the Hub API. Create it with New, add its routes to an echo
// app with Mount.
type Hub struct {
	cfg      Config
	store    *store.Store
	reserved map[string]bool
	pages    *template.Template
}

// New checks cfg and builds the Hub; it does no I/O.
func New(cfg Config) (*Hub, error) {
	if cfg.Store == nil || cfg.Guard == nil || cfg.GuardURLToken == nil || cfg.GuardPublic == nil || cfg.GuardOpen == nil || cfg.Uploads == nil || cfg.Principal == nil || cfg.BaseURL == nil || cfg.Reserve == nil || cfg.ReserveBuffer == nil || cfg.Work == nil ||
		cfg.TenantLimits == nil || cfg.CASToken == nil || cfg.Credential == nil || cfg.ServeXetFile == nil ||
		cfg.Released == nil || cfg.Ready == nil {
		return nil, errors.New("hub.New: every Config field but DefaultVisibility, Version and ReservedNamespaces is required")
	}
	if cfg.ReadXetRange == nil {
		return nil, errors.New("hub.New: ReadXetRange is required")
	}
	switch cfg.DefaultVisibility {
	case "", "private", "internal", "public":
	default:
		return nil, fmt.Errorf("hub.New: DefaultVisibility %q is not private, internal or public", cfg.DefaultVisibility)
	}
	reserved := map[string]bool{"api": true}
	for _, ns := range cfg.ReservedNamespaces {
		reserved[ns] = true
	}
	return &Hub{cfg: cfg, store: cfg.Store, reserved: reserved, pages: parsePages()}, nil
}

// Mount adds the Hub's routes to e.
func (h *Hub) Mount(e *echo.Echo) {
	h.repoRoutes(e)
	h.gitRoutes(e)
	h.lifecycleRoutes(e)
	h.pathRoutes(e)
	h.readRoutes(e)
	h.pageRoutes(e)
	h.settingsRoutes(e)
	h.safetensorsRoutes(e)
	h.notServedRoutes(e)
}

// Owns reports whether a path belongs to the Hub, where refusals follow
// the Hub's convention (docs/design.md §7): everything under /api/, the file
// routes (resolve, raw), the LFS batch route and the repo pages. A server
// that serves an API of its own under /api/ (openxet's admin API) decides
// for those paths itself.
func (h *Hub) Owns(p string) bool {
	return strings.HasPrefix(p, "/api/") || strings.Contains(p, "/resolve/") || strings.Contains(p, "/raw/") ||
		strings.Contains(p, ".git/") || h.isRepoPagePath(p)
}

// badRequest refuses a request with 400 bad_request and a sentence.
func badRequest(format string, args ...any) error {
	return refusal.Wrap(refusal.ErrBadRequest, format, args...)
}

// NamesRepo reports whether a request path names a repo: the repo routes
// under /api/{models,datasets,spaces}/{ns}/{name} and the file routes
// (resolve, raw). The server answers a request without a token there as
// the Hub answers for a repo it will not show (401 with X-Error-Code
// RepoNotFound), so that huggingface_hub's repo_exists and file_exists
// return False.
func (h *Hub) NamesRepo(p string) bool {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) >= 4 && parts[0] == "api" {
		_, ok := repoTypePlural[parts[1]]
		return ok && parts[2] != "" && parts[3] != ""
	}
	if len(parts) > 0 && (parts[0] == "datasets" || parts[0] == "spaces") {
		parts = parts[1:]
	}
	return len(parts) >= 4 && (parts[2] == "resolve" || parts[2] == "raw") && !h.reserved[parts[0]]
}
