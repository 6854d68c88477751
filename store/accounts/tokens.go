package accounts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"openxet/store/objects"
)

// Grant is one entry of a fine-grained personal token: a namespace, or
// one repo of it (Type and Name set), with role read or write.
type Grant struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type,omitempty"` // model, dataset or space; with Name
	Name      string `json:"name,omitempty"`
	Role      string `json:"role"`
}

// Covers reports whether g names namespace ns (every repo of it when name
// is "") or the repo typ/ns/name.
func (g Grant) Covers(ns, typ, name string) bool {
	if g.Namespace != ns {
		return false
	}
	return g.Name == "" || (name != "" && g.Type == typ && g.Name == name)
}

// ParseGrant reads a grant as the CLI takes it: NAMESPACE or
// [TYPE/]NAMESPACE/NAME (TYPE models, datasets or spaces; models when
// absent), then an optional ":read" or ":write" (read when absent).
func ParseGrant(s string) (Grant, error) {
	target, role, ok := strings.Cut(s, ":")
	if !ok {
		role = RoleRead
	}
	g := Grant{Role: role}
	parts := strings.Split(target, "/")
	switch len(parts) {
	case 1:
		g.Namespace = parts[0]
	case 2:
		g.Namespace, g.Type, g.Name = parts[0], "model", parts[1]
	case 3:
		typ, ok := map[string]string{"models": "model", "datasets": "dataset", "spaces": "space"}[parts[0]]
		if !ok {
			return Grant{}, fmt.Errorf("grant %q: unknown repo type %q (models, datasets or spaces)", s, parts[0])
		}
		g.Namespace, g.Type, g.Name = parts[1], typ, parts[2]
	default:
		return Grant{}, fmt.Errorf("grant %q: want NAMESPACE or [TYPE/]NAMESPACE/NAME", s)
	}
	return g, g.check()
}

func (g Grant) check() error {
	if err := ValidTenant(g.Namespace); err != nil {
		return err
	}
	if g.Role != RoleRead && g.Role != RoleWrite {
		return fmt.Errorf("%w: grant role %q (want read or write)", ErrBadRole, g.Role)
	}
	if (g.Name == "") != (g.Type == "") || strings.Contains(g.Name, "/") {
		return fmt.Errorf("grant %+v: a repo grant names a type and a name", g)
	}
	return nil
}

// TokenSpec is what a personal access token is made with.
type TokenSpec struct {
	// Name is the token's label, as the user calls it ("laptop").
	Name string
	// Role is read or write (acting with the owner's current roles, up to
	// read for a read token), or "" for a fine-grained token of Grants.
	Role   string
	Grants []Grant
	// Expires is when the token stops acting; zero for never.
	Expires time.Time
}

// Token roles as the Hub reports them (whoami's auth.accessToken.role).
const TokenFineGrained = "fineGrained"

// TokenRole is the Hub's name for the kind of a personal token: read,
// write or fineGrained.
func (c Credential) TokenRole() string {
	switch {
	case len(c.Grants) > 0:
		return TokenFineGrained
	case c.Has(ScopeWrite):
		return RoleWrite
	}
	return RoleRead
}

// CreateToken makes a personal access token of user and returns it with
// its token, which is shown once and never stored (only its secret's
// SHA-256, as for credentials). The user must exist and be active
// (ErrUserInactive); a token that has already expired is refused.
func (a *Accounts) CreateToken(ctx context.Context, user string, spec TokenSpec) (Credential, string, error) {
	u, err := a.User(ctx, user)
	if err != nil {
		return Credential{}, "", err
	}
	if !u.Active() {
		return Credential{}, "", fmt.Errorf("user %s: %w", user, ErrUserInactive)
	}
	now := a.now().UTC().Truncate(time.Second)
	c := Credential{Tenant: user, Kind: KindUser, Name: spec.Name, Created: now, Expires: spec.Expires.UTC().Truncate(time.Second)}
	switch {
	case spec.Role == RoleRead && len(spec.Grants) == 0:
		c.Scopes = []string{ScopeRead}
	case spec.Role == RoleWrite && len(spec.Grants) == 0:
		c.Scopes = []string{ScopeRead, ScopeWrite}
	case spec.Role == "" && len(spec.Grants) > 0:
		for _, g := range spec.Grants {
			if err := g.check(); err != nil {
				return Credential{}, "", err
			}
		}
		c.Grants = spec.Grants
	default:
		return Credential{}, "", fmt.Errorf("%w: a token has role read or write, or a list of grants (got role %q and %d grants)", ErrBadRole, spec.Role, len(spec.Grants))
	}
	if c.ExpiredAt(now) {
		return Credential{}, "", errors.New("the token would expire before it is made")
	}
	id, secret := randomHex(8), randomHex(32)
	sum := sha256.Sum256([]byte(secret))
	c.ID, c.SecretSHA256 = id, hex.EncodeToString(sum[:])
	if err := a.writeCredential(ctx, c); err != nil {
		return Credential{}, "", err
	}
	return c, TokenPrefix + id + "_" + secret, nil
}

// Tokens lists a user's personal access tokens, revoked and expired ones
// included.
func (a *Accounts) Tokens(ctx context.Context, user string) ([]Credential, error) {
	return a.queryCredentials(ctx, `WHERE tenant = ? AND kind = ? ORDER BY created, id`, user, KindUser)
}

// RevokeToken revokes one of user's personal tokens; another's token, or
// a robot credential, is objects.ErrNotFound, as is an unknown id.
func (a *Accounts) RevokeToken(ctx context.Context, user, id string) (Credential, error) {
	c, err := a.Credential(ctx, id)
	if err != nil {
		return Credential{}, err
	}
	if !c.Personal() || c.Tenant != user {
		return Credential{}, fmt.Errorf("token %s of %s: %w", id, user, objects.ErrNotFound)
	}
	return a.RevokeCredential(ctx, id)
}
