package accounts

import (
	"context"
	"time"
)

// Level is what a request may do to a namespace or one of its repos,
// ordered: each level includes the ones below it.
type Level int

const (
	NoAccess    Level = iota
	ReadAccess        // see private repos
	WriteAccess       // also commit and create repos
	AdminAccess       // also members, settings, visibility, robot credentials
)

// LevelOf is the level of a role (read, write, admin); NoAccess for any
// other string.
func LevelOf(role string) Level {
	switch role {
	case RoleRead:
		return ReadAccess
	case RoleWrite:
		return WriteAccess
	case RoleAdmin:
		return AdminAccess
	}
	return NoAccess
}

func (l Level) String() string {
	return [...]string{"none", RoleRead, RoleWrite, RoleAdmin}[max(0, min(int(l), 3))]
}

// Person is a user as an access decision sees them at one moment: their
// state and their role in each organization they belong to.
type Person struct {
	User  User
	Roles map[string]Level // organization → role
}

// Level is what p may do in namespace ns: nothing while suspended or
// deleted; admin of their own namespace; their role in an organization.
func (p Person) Level(ns string) Level {
	if p.User.Name == "" || !p.User.Active() {
		return NoAccess
	}
	if ns == p.User.Name {
		return AdminAccess
	}
	return p.Roles[ns]
}

// Person reads user name and their memberships now (two index reads):
// what Access takes as a personal token's owner. The server caches it
// for its documented bound (docs/people.md).
func (a *Accounts) Person(ctx context.Context, name string) (Person, error) {
	u, err := a.User(ctx, name)
	if err != nil {
		return Person{}, err
	}
	ms, err := a.MembershipsOf(ctx, name)
	if err != nil {
		return Person{}, err
	}
	p := Person{User: u, Roles: make(map[string]Level, len(ms))}
	for _, m := range ms {
		p.Roles[m.Org] = LevelOf(m.Role)
	}
	return p, nil
}

// Access is the one decision of what credential c may do at now to the
// repo typ/ns/name, or to namespace ns itself when name is "": nothing
// once c is revoked or expired. A robot credential acts in its own
// organization only, with its scopes. A personal token acts with the
// intersection of its grant and its owner's roles now (owner, read with
// Person; an owner other than c's is nothing): a read token up to read, a
// write token up to all its owner's roles, a fine-grained one up to the
// best of its grants that covers the repo (or, for the namespace itself,
// a grant of the whole namespace).
func Access(c Credential, owner Person, now time.Time, ns, typ, name string) Level {
	if c.IsRevoked() || c.ExpiredAt(now) {
		return NoAccess
	}
	if !c.Personal() {
		switch {
		case c.Tenant != ns:
			return NoAccess
		case c.Has(ScopeWrite):
			return WriteAccess
		case c.Has(ScopeRead):
			return ReadAccess
		}
		return NoAccess
	}
	if owner.User.Name != c.Tenant {
		return NoAccess
	}
	grant := NoAccess
	switch {
	case len(c.Grants) > 0:
		for _, g := range c.Grants {
			if g.Covers(ns, typ, name) {
				grant = max(grant, LevelOf(g.Role))
			}
		}
	case c.Has(ScopeWrite):
		grant = AdminAccess
	case c.Has(ScopeRead):
		grant = ReadAccess
	}
	return min(grant, owner.Level(ns))
}
