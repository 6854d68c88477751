package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"openxet/store/index"
	"openxet/store/objects"
)

// People (docs/people.md): every namespace is a user or an organization,
// and every namespace is a tenant. Users and organizations share the
// tenants' one name space: a tenant that is not a user is an organization,
// so the tenants a deployment had before users existed are organizations,
// and their credentials that organization's robot credentials, with no
// row or record changed. An organization made by CreateOrg also has a
// record (its creation time); one that came from a credential or limits
// does not need one.
//
// Bucket records: users/<sha256(name)> (User, as JSON), orgs/<sha256(name)>
// (Org) and memberships/<sha256(org)>/<sha256(user)> (Membership). Reindex
// restores their rows with RestoreUser, RestoreOrg and RestoreMembership.
const (
	PrefixUsers       = "users/"
	PrefixOrgs        = "orgs/"
	PrefixMemberships = "memberships/"
)

// UserKey is the bucket key of a user's record.
func UserKey(name string) string { return PrefixUsers + objects.HashName(name) }

// OrgKey is the bucket key of an organization's record.
func OrgKey(name string) string { return PrefixOrgs + objects.HashName(name) }

// MembershipKey is the bucket key of a user's membership of an organization.
func MembershipKey(org, user string) string {
	return PrefixMemberships + objects.HashName(org) + "/" + objects.HashName(user)
}

var (
	// ErrNameTaken means a namespace name is already a user's or an
	// organization's (a deleted user's name stays taken).
	ErrNameTaken = errors.New("name taken")
	// ErrReservedName means a name is one of the paths the Hub's own
	// routes and pages take (ReservedNames).
	ErrReservedName = errors.New("reserved name")
	// ErrNotOrg means a name is not an organization where one is needed
	// (a robot credential or a membership of a user's namespace).
	ErrNotOrg = errors.New("not an organization")
	// ErrBadRole means a role is not read, write or admin.
	ErrBadRole = errors.New("invalid role")
	// ErrLastAdmin means a change would leave an organization that has an
	// admin without one.
	ErrLastAdmin = errors.New("last admin of the organization")
	// ErrUserInactive means a user is suspended or deleted.
	ErrUserInactive = errors.New("user is suspended or deleted")
)

// ReservedNames are the names no user or organization may take: the first
// path segments of the Hub's routes and pages.
var reservedNames = []string{
	"api", "assets", "auth", "blog", "chunk", "chunks", "collections", "datasets", "docs",
	"healthz", "join", "login", "logout", "metrics", "models", "new", "notifications", "oauth",
	"organizations", "orgs", "papers", "pricing", "readyz", "reconstruction", "reconstructions",
	"search", "settings", "shard", "shards", "signin", "signup", "spaces", "static", "tokens",
	"users", "v1", "v2", "whoami", "xorb", "xorbs",
}

// ReservedNames returns the names no user or organization may take, sorted.
func ReservedNames() []string { return slices.Clone(reservedNames) }

// ValidNamespace checks a name a user or organization is created with: a
// valid tenant name (ValidTenant) that is not reserved.
func ValidNamespace(name string) error {
	if err := ValidTenant(name); err != nil {
		return err
	}
	if _, ok := slices.BinarySearch(reservedNames, name); ok {
		return fmt.Errorf("%w: %q is a path of the Hub's own", ErrReservedName, name)
	}
	return nil
}

// User is a person with a namespace of their own. Suspended and Deleted
// are zero while the user is active; a deleted user's record stays as a
// tombstone, so the name (and whatever its namespace still holds) is
// never someone else's.
type User struct {
	Name      string    `json:"name"`
	Email     string    `json:"email"`
	Admin     bool      `json:"admin,omitempty"`
	Created   time.Time `json:"created"`
	Suspended time.Time `json:"suspended,omitzero"`
	Deleted   time.Time `json:"deleted,omitzero"`
}

// Active reports whether the user is neither suspended nor deleted.
func (u User) Active() bool { return u.Suspended.IsZero() && u.Deleted.IsZero() }

// Org is an organization. Created is zero for one that came from a tenant
// (a credential or limits) rather than CreateOrg.
type Org struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created,omitzero"`
}

// CreateUser makes a user. A name that is reserved, or already a user's
// (deleted ones included) or an organization's, is refused with nothing
// written.
func (a *Accounts) CreateUser(ctx context.Context, name, email string, admin bool) (User, error) {
	if err := ValidNamespace(name); err != nil {
		return User{}, err
	}
	if email == "" {
		return User{}, errors.New("a user needs an email address")
	}
	u := User{Name: name, Email: email, Admin: admin, Created: a.now().UTC().Truncate(time.Second)}
	if err := a.claim(ctx, UserKey(name), name, u, func(tx *sql.Tx) error { return upsertUser(ctx, tx, u) }); err != nil {
		return User{}, err
	}
	return u, nil
}

// CreateOrg makes an organization, refused as CreateUser refuses a name.
func (a *Accounts) CreateOrg(ctx context.Context, name string) (Org, error) {
	if err := ValidNamespace(name); err != nil {
		return Org{}, err
	}
	o := Org{Name: name, Created: a.now().UTC().Truncate(time.Second)}
	if err := a.claim(ctx, OrgKey(name), name, o, func(tx *sql.Tx) error { return upsertOrg(ctx, tx, o) }); err != nil {
		return Org{}, err
	}
	return o, nil
}

// claim takes name for a new user or organization: its record is written
// only where none is, then one index transaction checks that no tenant,
// user or organization has the name and inserts the rows. A process that
// loses (the record was there, or the name is taken in the index) changes
// nothing; its own record is removed.
func (a *Accounts) claim(ctx context.Context, key, name string, rec any, insert func(tx *sql.Tx) error) error {
	taken := fmt.Errorf("%w: %q is already a user or an organization", ErrNameTaken, name)
	if _, err := a.namespaceKind(ctx, name); err == nil {
		return taken
	} else if !errors.Is(err, objects.ErrNotFound) {
		return err
	}
	data, _ := json.Marshal(rec)
	written, err := a.writeIfAbsent(ctx, key, data)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, objects.Err(err))
	}
	if !written {
		return taken
	}
	err = a.idx.Tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM tenants WHERE name = ?) + (SELECT COUNT(*) FROM users WHERE name = ?)
			+ (SELECT COUNT(*) FROM orgs WHERE name = ?)`, name, name, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return taken
		}
		return insert(tx)
	})
	if err != nil {
		a.bucket.Delete(context.WithoutCancel(ctx), key) // best effort: our own record
		return err
	}
	return nil
}

// Kinds of namespace.
const (
	KindOrg = "org"
	// KindUser (credentials.go) is also the kind of a user's namespace.
)

// NamespaceKind says whether name is a user's namespace (KindUser, deleted
// users included) or an organization's (KindOrg); objects.ErrNotFound when
// it is neither.
func (a *Accounts) NamespaceKind(ctx context.Context, name string) (string, error) {
	return a.namespaceKind(ctx, name)
}

func (a *Accounts) namespaceKind(ctx context.Context, name string) (string, error) {
	var users, orgs int
	err := a.idx.Reads().QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM users WHERE name = ?),
		(SELECT COUNT(*) FROM orgs WHERE name = ?) + (SELECT COUNT(*) FROM tenants WHERE name = ?)`, name, name, name).Scan(&users, &orgs)
	switch {
	case err != nil:
		return "", fmt.Errorf("namespace %s: %w", name, index.Err(err))
	case users > 0:
		return KindUser, nil
	case orgs > 0:
		return KindOrg, nil
	}
	return "", fmt.Errorf("namespace %s: %w", name, objects.ErrNotFound)
}

func upsertUser(ctx context.Context, tx *sql.Tx, u User) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO users(name, email, admin, created, suspended, deleted) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET email = excluded.email, admin = excluded.admin, suspended = excluded.suspended, deleted = excluded.deleted`,
		u.Name, u.Email, boolInt(u.Admin), u.Created.Unix(), unixOrNil(u.Suspended), unixOrNil(u.Deleted))
	if err != nil {
		return fmt.Errorf("index user %s: %w", u.Name, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, u.Name)
	return err
}

func upsertOrg(ctx context.Context, tx *sql.Tx, o Org) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO orgs(name, created) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET created = excluded.created`,
		o.Name, o.Created.Unix())
	if err != nil {
		return fmt.Errorf("index organization %s: %w", o.Name, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, o.Name)
	return err
}

// RestoreUser indexes a user record (reindex's step for PrefixUsers).
func RestoreUser(ctx context.Context, tx *sql.Tx, data []byte) error {
	var u User
	if err := json.Unmarshal(data, &u); err != nil {
		return err
	}
	if ValidTenant(u.Name) != nil {
		return fmt.Errorf("user record names %q", u.Name)
	}
	return upsertUser(ctx, tx, u)
}

// RestoreOrg indexes an organization record (reindex's step for PrefixOrgs).
func RestoreOrg(ctx context.Context, tx *sql.Tx, data []byte) error {
	var o Org
	if err := json.Unmarshal(data, &o); err != nil {
		return err
	}
	if ValidTenant(o.Name) != nil {
		return fmt.Errorf("organization record names %q", o.Name)
	}
	return upsertOrg(ctx, tx, o)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func unixOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Unix()
}

func timeOf(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.Unix(v.Int64, 0).UTC()
}
