package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"openxet/store/index"
	"openxet/store/objects"
)

// Scopes of a credential. write implies read; admin is separate.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
	ScopeAdmin = "admin"
)

// TokenPrefix starts every credential token ("hf_" because the JS client
// refuses tokens without it).
const TokenPrefix = "hf_oxt_"

// ErrBadToken means a token is not of the credential form.
var ErrBadToken = errors.New("malformed credential token")

// ErrBadTenant means a tenant name is not of the allowed form.
var ErrBadTenant = errors.New("invalid tenant name")

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidTenant checks a tenant name ([a-z0-9][a-z0-9._-]{0,62}).
func ValidTenant(name string) error {
	if !tenantRE.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("%w: %q (want [a-z0-9][a-z0-9._-]{0,62})", ErrBadTenant, name)
	}
	return nil
}

// Credential is a stored credential. The secret itself is never stored.
//
// A robot credential (Kind "") belongs to the organization Tenant and acts
// with its Scopes. A personal access token (Kind KindUser, tokens.go)
// belongs to the user Tenant and acts with its owner's current roles,
// capped by its Scopes (read or write) or, when Grants is not empty, by
// its grants alone (fine-grained; Scopes is then empty).
type Credential struct {
	ID           string    `json:"id"`
	Tenant       string    `json:"tenant"`
	Scopes       []string  `json:"scopes"`
	SecretSHA256 string    `json:"secret_sha256"`
	Created      time.Time `json:"created"`
	Revoked      time.Time `json:"revoked,omitzero"`
	Kind         string    `json:"kind,omitempty"`
	Name         string    `json:"name,omitempty"`
	Grants       []Grant   `json:"grants,omitempty"`
	Expires      time.Time `json:"expires,omitzero"`
}

// KindUser is the Kind of a personal access token.
const KindUser = "user"

// Personal reports whether c is a personal access token of a user.
func (c Credential) Personal() bool { return c.Kind == KindUser }

// ExpiredAt reports whether c has an expiry and now is at or past it.
func (c Credential) ExpiredAt(now time.Time) bool {
	return !c.Expires.IsZero() && !now.Before(c.Expires)
}

// Has reports whether the credential carries scope (write implies read).
func (c Credential) Has(scope string) bool {
	if slices.Contains(c.Scopes, scope) {
		return true
	}
	return scope == ScopeRead && slices.Contains(c.Scopes, ScopeWrite)
}

// IsRevoked reports whether the credential was revoked.
func (c Credential) IsRevoked() bool { return !c.Revoked.IsZero() }

// ParseToken splits a credential token into its id and secret.
func ParseToken(token string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", "", ErrBadToken
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 64 || !isHex(id) || !isHex(secret) {
		return "", "", ErrBadToken
	}
	return id, secret, nil
}

// CheckSecret reports whether secret belongs to the credential, in constant time.
func (c Credential) CheckSecret(secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	want, err := hex.DecodeString(c.SecretSHA256)
	return err == nil && subtle.ConstantTimeCompare(sum[:], want) == 1
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// randomHex is n random bytes in hex: a credential's id and secret.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// NormalizeScopes validates scopes and returns them sorted without repeats.
func NormalizeScopes(scopes []string) ([]string, error) {
	if len(scopes) == 0 {
		return nil, errors.New("a credential needs at least one scope (read, write, admin)")
	}
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		switch s {
		case ScopeRead, ScopeWrite, ScopeAdmin:
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		default:
			return nil, fmt.Errorf("unknown scope %q (want read, write or admin)", s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CreateCredential makes a credential for tenant with scopes and returns it
// with its token, which is shown once and never stored.
func (a *Accounts) CreateCredential(ctx context.Context, tenant string, scopes []string) (Credential, string, error) {
	if err := ValidTenant(tenant); err != nil {
		return Credential{}, "", err
	}
	scopes, err := NormalizeScopes(scopes)
	if err != nil {
		return Credential{}, "", err
	}
	id, secret := randomHex(8), randomHex(32)
	sum := sha256.Sum256([]byte(secret))
	c := Credential{ID: id, Tenant: tenant, Scopes: scopes, SecretSHA256: hex.EncodeToString(sum[:]), Created: a.now().UTC().Truncate(time.Second)}
	if err := a.writeCredential(ctx, c); err != nil {
		return Credential{}, "", err
	}
	return c, TokenPrefix + id + "_" + secret, nil
}

// CreateFirstCredential makes a credential for tenant with scopes only if
// the store has no credential at all, and returns it with its token.
// created is false, and nothing is left behind, when a credential exists,
// made before or at the same moment by this or another process.
//
// The index decides who is first: the row is inserted only if the
// credentials table is empty, in one statement of one (immediate)
// transaction, so of several processes starting on an empty store exactly
// one creates it. Its bucket record is written before that (docs/design.md §3),
// revoked: a process that loses removes it, and one that stops before the
// transaction leaves a record that reindex restores as a revoked credential
// whose token nobody was shown. The winner rewrites its record unrevoked
// after the commit and only then returns the token.
func (a *Accounts) CreateFirstCredential(ctx context.Context, tenant string, scopes []string) (c Credential, token string, created bool, err error) {
	if n, err := a.CountCredentials(ctx); err != nil || n > 0 {
		return Credential{}, "", false, err
	}
	if err := ValidTenant(tenant); err != nil {
		return Credential{}, "", false, err
	}
	if scopes, err = NormalizeScopes(scopes); err != nil {
		return Credential{}, "", false, err
	}
	id, secret := randomHex(8), randomHex(32)
	sum := sha256.Sum256([]byte(secret))
	now := a.now().UTC().Truncate(time.Second)
	c = Credential{ID: id, Tenant: tenant, Scopes: scopes, SecretSHA256: hex.EncodeToString(sum[:]), Created: now}
	pending := c
	pending.Revoked = now
	rec, _ := json.Marshal(pending)
	if err := a.bucket.WriteAll(ctx, CredentialKey(id), rec, nil); err != nil {
		return Credential{}, "", false, fmt.Errorf("write credential %s: %w", id, err)
	}
	err = a.idx.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO credentials(id, tenant, scopes, secret_sha256, created, revoked)
			SELECT ?, ?, ?, ?, ?, NULL WHERE NOT EXISTS (SELECT 1 FROM credentials)`,
			c.ID, c.Tenant, strings.Join(c.Scopes, ","), c.SecretSHA256, c.Created.Unix())
		if err != nil {
			return fmt.Errorf("index credential %s: %w", c.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			created = false
			return err
		}
		created = true
		_, err = tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, c.Tenant)
		return err
	})
	if err != nil || !created {
		// Best effort: a record left here is a revoked credential.
		a.bucket.Delete(context.WithoutCancel(ctx), CredentialKey(id))
		return Credential{}, "", false, err
	}
	rec, _ = json.Marshal(c)
	if err := a.bucket.WriteAll(ctx, CredentialKey(id), rec, nil); err != nil {
		return Credential{}, "", false, fmt.Errorf("write credential %s: %w", id, err)
	}
	return c, TokenPrefix + id + "_" + secret, true, nil
}

// writeCredential stores c: its record, then its row. A robot credential
// that acts (not revoked) must belong to an organization: one for a
// user's namespace is refused (ErrNotOrg) before anything is written, and
// again in the transaction (its record then removed).
func (a *Accounts) writeCredential(ctx context.Context, c Credential) error {
	robot := !c.Personal() && !c.IsRevoked()
	if robot {
		if kind, err := a.namespaceKind(ctx, c.Tenant); err == nil && kind == KindUser {
			return notOrg(c.Tenant)
		}
	}
	rec, _ := json.Marshal(c)
	if err := a.write(ctx, CredentialKey(c.ID), rec); err != nil {
		return fmt.Errorf("write credential %s: %w", c.ID, err)
	}
	err := a.idx.Tx(ctx, func(tx *sql.Tx) error {
		if robot {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE name = ?`, c.Tenant).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return notOrg(c.Tenant)
			}
		}
		return upsertCredential(ctx, tx, c)
	})
	if err != nil && errors.Is(err, ErrNotOrg) {
		a.bucket.Delete(context.WithoutCancel(ctx), CredentialKey(c.ID))
	}
	return err
}

func notOrg(name string) error {
	return fmt.Errorf("%w: %s is a user; robot credentials belong to organizations, a user makes personal tokens", ErrNotOrg, name)
}

// RestoreCredential indexes the credential record data (the JSON of a
// credential's bucket object, as writeCredential writes it): reindex's
// step for each object under PrefixCredentials.
func RestoreCredential(ctx context.Context, tx *sql.Tx, data []byte) error {
	var c Credential
	if err := json.Unmarshal(data, &c); err != nil {
		return err
	}
	return upsertCredential(ctx, tx, c)
}

func upsertCredential(ctx context.Context, tx *sql.Tx, c Credential) error {
	var revoked, expires, grants any
	if !c.Revoked.IsZero() {
		revoked = c.Revoked.Unix()
	}
	if !c.Expires.IsZero() {
		expires = c.Expires.Unix()
	}
	if len(c.Grants) > 0 {
		g, _ := json.Marshal(c.Grants)
		grants = string(g)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO credentials(id, tenant, scopes, secret_sha256, created, revoked, kind, name, grants, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET tenant = excluded.tenant, scopes = excluded.scopes, secret_sha256 = excluded.secret_sha256, revoked = excluded.revoked,
			kind = excluded.kind, name = excluded.name, grants = excluded.grants, expires = excluded.expires`,
		c.ID, c.Tenant, strings.Join(c.Scopes, ","), c.SecretSHA256, c.Created.Unix(), revoked, c.Kind, c.Name, grants, expires)
	if err != nil {
		return fmt.Errorf("index credential %s: %w", c.ID, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, c.Tenant)
	return err
}

// Credential returns the credential with that id, or ErrNotFound.
func (a *Accounts) Credential(ctx context.Context, id string) (Credential, error) {
	cs, err := a.queryCredentials(ctx, `WHERE id = ?`, id)
	if err != nil {
		return Credential{}, err
	}
	if len(cs) == 0 {
		return Credential{}, fmt.Errorf("credential %s: %w", id, objects.ErrNotFound)
	}
	return cs[0], nil
}

// Credentials lists credentials, of one tenant when tenant is not "".
func (a *Accounts) Credentials(ctx context.Context, tenant string) ([]Credential, error) {
	if tenant == "" {
		return a.queryCredentials(ctx, `ORDER BY tenant, created, id`)
	}
	return a.queryCredentials(ctx, `WHERE tenant = ? ORDER BY created, id`, tenant)
}

func (a *Accounts) queryCredentials(ctx context.Context, where string, args ...any) ([]Credential, error) {
	rows, err := a.idx.Reads().QueryContext(ctx, `SELECT id, tenant, scopes, secret_sha256, created, revoked, kind, name, grants, expires FROM credentials `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", index.Err(err))
	}
	defer rows.Close()
	var out []Credential
	for rows.Next() {
		var (
			c                Credential
			scopes           string
			created          int64
			revoked, expires sql.NullInt64
			grants           sql.NullString
		)
		if err := rows.Scan(&c.ID, &c.Tenant, &scopes, &c.SecretSHA256, &created, &revoked, &c.Kind, &c.Name, &grants, &expires); err != nil {
			return nil, fmt.Errorf("credentials: %w", index.Err(err))
		}
		if scopes != "" {
			c.Scopes = strings.Split(scopes, ",")
		}
		c.Created = time.Unix(created, 0).UTC()
		if revoked.Valid {
			c.Revoked = time.Unix(revoked.Int64, 0).UTC()
		}
		if expires.Valid {
			c.Expires = time.Unix(expires.Int64, 0).UTC()
		}
		if grants.Valid {
			if err := json.Unmarshal([]byte(grants.String), &c.Grants); err != nil {
				return nil, fmt.Errorf("credential %s: grants: %w", c.ID, err)
			}
		}
		out = append(out, c)
	}
	return out, index.Err(rows.Err())
}

// RevokeCredential marks a credential revoked (bucket record, then index).
func (a *Accounts) RevokeCredential(ctx context.Context, id string) (Credential, error) {
	c, err := a.Credential(ctx, id)
	if err != nil {
		return Credential{}, err
	}
	if c.IsRevoked() {
		return c, nil
	}
	c.Revoked = a.now().UTC().Truncate(time.Second)
	if err := a.writeCredential(ctx, c); err != nil {
		return Credential{}, err
	}
	return c, nil
}

// CountCredentials returns how many credentials exist (revoked included).
func (a *Accounts) CountCredentials(ctx context.Context) (int, error) {
	var n int
	err := a.idx.Reads().QueryRowContext(ctx, `SELECT COUNT(*) FROM credentials`).Scan(&n)
	return n, index.Err(err)
}
