package server

import (
	"context"
	"errors"

	"github.com/labstack/echo/v4"

	"openxet/store"

	"openxet/store/accounts"
)

// This file is how a request acting with a user's personal access token
// gets its rights (docs/people.md): the token's grant intersected with
// its owner's roles now (accounts.Access), the owner read through a cache
// of at most LimitsCacheTTL, so that a removal, a suspension or a revoked
// token takes effect on every node within that bound. Every failure to
// read the owner refuses the request (fail closed).

// owner reads the owner of personal token cred through the cache.
// A deleted or unknown owner, or a suspended one, is a 401: the token no
// longer acts for anyone.
func (s *Server) owner(ctx context.Context, cred accounts.Credential) (accounts.Person, error) {
	p, err := s.persons.get(ctx, cred.Tenant)
	if errors.Is(err, store.ErrNotFound) {
		return p, refuse(errUnauthorized, "the owner of this token no longer exists")
	}
	if err != nil {
		return p, err
	}
	if !p.User.Active() {
		return p, refuse(errUnauthorized, "the owner of this token is suspended or deleted: its tokens act for no one")
	}
	if cred.ExpiredAt(s.now()) {
		return p, refuse(errUnauthorized, "the token expired")
	}
	return p, nil
}

// personalIdentity completes the identity of a request that sent personal
// token cred itself: its account is the owner, its scopes what its grant
// could reach anywhere (a fine-grained token's best grant), its level in
// each namespace and repo accounts.Access of the owner's roles now, and
// nothing in a namespace whose organization an operator suspended.
func (s *Server) personalIdentity(ctx context.Context, id *identity, cred accounts.Credential) (*identity, error) {
	p, err := s.owner(ctx, cred)
	if err != nil {
		return nil, err
	}
	id.person, id.fineGrained = &p, len(cred.Grants) > 0
	if id.fineGrained {
		id.Scopes = []string{accounts.ScopeRead}
		for _, g := range cred.Grants {
			if g.Role == accounts.RoleWrite {
				id.Scopes = []string{accounts.ScopeRead, accounts.ScopeWrite}
			}
		}
	}
	id.access = func(ns, typ, name string) accounts.Level {
		lvl := accounts.Access(cred, p, s.now(), ns, typ, name)
		if lvl > accounts.NoAccess && ns != cred.Tenant {
			lim, _, err := s.effective.For(ctx, ns)
			if err != nil || lim.Suspended {
				return accounts.NoAccess
			}
		}
		return lvl
	}
	return id, nil
}

// personalCASIdentity checks a CAS token handed out for personal token
// cred against what the token and its owner may do now: the namespace it
// acts in (or its one repo, forRepo) at the level of its scope, or, for a
// read token of another namespace's Shared repo, an owner still active.
// Its account is the owner.
func (s *Server) personalCASIdentity(ctx context.Context, id *identity, cred accounts.Credential) (*identity, error) {
	p, err := s.owner(ctx, cred)
	if err != nil {
		return nil, err
	}
	id.Account, id.person, id.fineGrained = cred.Tenant, &p, len(cred.Grants) > 0
	if id.shared != nil {
		// It reads the one Shared repo it names (fileOf), and no repo
		// of its owner's own: the token behind it may not reach them.
		id.access = func(string, string, string) accounts.Level { return accounts.NoAccess }
		return id, nil
	}
	need := accounts.ReadAccess
	if id.has(accounts.ScopeWrite) {
		need = accounts.WriteAccess
	}
	r := store.RepoID{Tenant: id.Tenant}
	if id.forRepo != nil {
		r = *id.forRepo
	}
	if accounts.Access(cred, p, s.now(), r.Tenant, r.Type, r.Name) < need {
		return nil, refuse(errUnauthorized, "the token of this CAS token may no longer %s %s", map[bool]string{true: "write", false: "read"}[need == accounts.WriteAccess], r.Tenant)
	}
	id.access = func(ns, typ, name string) accounts.Level {
		if ns != r.Tenant || (id.forRepo != nil && (typ != r.Type || name != r.Name)) {
			return accounts.NoAccess
		}
		return need
	}
	return id, nil
}

// guardOwn is guard(scope) for the routes that act in the caller's own
// namespace without naming it (the CAS, usage, file release): a personal
// token sent there directly must reach its owner's namespace at the
// scope's level, so that a fine-grained token, or a read token, acts on
// nothing its grant does not cover. A CAS token was checked for its
// namespace or repo when it authenticated (personalCASIdentity).
func (s *Server) guardOwn(scope string) echo.MiddlewareFunc {
	guard := s.guard(scope)
	need := accounts.LevelOf(scope)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return guard(func(c echo.Context) error {
			id := identityOf(c)
			if id.access != nil && !id.viaCASToken && id.access(id.Tenant, "", "") < need {
				return refuse(errForbidden, "this token does not reach namespace %s at the %s level: upload and download through the Hub's xet token routes of a repo it reaches", id.Tenant, scope)
			}
			return next(c)
		})
	}
}
