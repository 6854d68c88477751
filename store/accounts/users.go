package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"openxet/store/index"
	"openxet/store/objects"
)

// User returns the user with that name (a deleted one too: see
// User.Deleted), or objects.ErrNotFound.
func (a *Accounts) User(ctx context.Context, name string) (User, error) {
	us, err := a.queryUsers(ctx, `WHERE name = ?`, name)
	if err != nil {
		return User{}, err
	}
	if len(us) == 0 {
		return User{}, fmt.Errorf("user %s: %w", name, objects.ErrNotFound)
	}
	return us[0], nil
}

// Users lists every user, deleted ones included, by name.
func (a *Accounts) Users(ctx context.Context) ([]User, error) {
	return a.queryUsers(ctx, `ORDER BY name`)
}

func (a *Accounts) queryUsers(ctx context.Context, where string, args ...any) ([]User, error) {
	rows, err := a.idx.Reads().QueryContext(ctx, `SELECT name, email, admin, created, suspended, deleted FROM users `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("users: %w", index.Err(err))
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		var (
			u                  User
			admin              int
			created            int64
			suspended, deleted sql.NullInt64
		)
		if err := rows.Scan(&u.Name, &u.Email, &admin, &created, &suspended, &deleted); err != nil {
			return nil, fmt.Errorf("users: %w", index.Err(err))
		}
		u.Admin, u.Created, u.Suspended, u.Deleted = admin != 0, time.Unix(created, 0).UTC(), timeOf(suspended), timeOf(deleted)
		out = append(out, u)
	}
	return out, index.Err(rows.Err())
}

// SuspendUser suspends a user: from then on (and on every node within the
// server's cache bound) none of their tokens acts. Suspending a suspended
// user keeps the first time; a deleted user is ErrUserInactive.
func (a *Accounts) SuspendUser(ctx context.Context, name string) (User, error) {
	return a.changeUser(ctx, name, func(u *User) bool {
		if !u.Suspended.IsZero() {
			return false
		}
		u.Suspended = a.now().UTC().Truncate(time.Second)
		return true
	})
}

// ResumeUser ends a suspension; a deleted user is ErrUserInactive.
func (a *Accounts) ResumeUser(ctx context.Context, name string) (User, error) {
	return a.changeUser(ctx, name, func(u *User) bool {
		if u.Suspended.IsZero() {
			return false
		}
		u.Suspended = time.Time{}
		return true
	})
}

// changeUser applies change to a live user and stores it (record, then
// row) when change reports a change.
func (a *Accounts) changeUser(ctx context.Context, name string, change func(u *User) bool) (User, error) {
	u, err := a.User(ctx, name)
	if err != nil {
		return User{}, err
	}
	if !u.Deleted.IsZero() {
		return User{}, fmt.Errorf("user %s: %w", name, ErrUserInactive)
	}
	if !change(&u) {
		return u, nil
	}
	return u, a.writeUser(ctx, u)
}

func (a *Accounts) writeUser(ctx context.Context, u User) error {
	rec, _ := json.Marshal(u)
	if err := a.write(ctx, UserKey(u.Name), rec); err != nil {
		return fmt.Errorf("write user %s: %w", u.Name, err)
	}
	return a.idx.Tx(ctx, func(tx *sql.Tx) error { return upsertUser(ctx, tx, u) })
}

// DeleteUser deletes a user: their record stays as a tombstone (so the
// name is never reused), every personal token of theirs is revoked and
// every membership removed. A user who is the last admin of an
// organization is refused (ErrLastAdmin) with nothing changed. What their
// namespace stores is the store's tenant deletion's to release.
func (a *Accounts) DeleteUser(ctx context.Context, name string) (User, error) {
	u, err := a.User(ctx, name)
	if err != nil {
		return User{}, err
	}
	ms, err := a.MembershipsOf(ctx, name)
	if err != nil {
		return User{}, err
	}
	for _, m := range ms {
		if err := a.checkNotLastAdmin(ctx, a.idx.Reads(), m.Org, name, ""); err != nil {
			return User{}, err
		}
	}
	if u.Deleted.IsZero() {
		u.Deleted = a.now().UTC().Truncate(time.Second)
		if err := a.writeUser(ctx, u); err != nil {
			return User{}, err
		}
	}
	toks, err := a.Tokens(ctx, name)
	if err != nil {
		return User{}, err
	}
	for _, t := range toks {
		if _, err := a.RevokeCredential(ctx, t.ID); err != nil {
			return User{}, err
		}
	}
	for _, m := range ms {
		if err := a.dropMembership(ctx, m); err != nil && !errors.Is(err, objects.ErrNotFound) {
			return User{}, err
		}
	}
	return u, nil
}

// Org returns the organization with that name (one that came from a
// tenant has a zero Created), or objects.ErrNotFound; a user's namespace
// is ErrNotOrg.
func (a *Accounts) Org(ctx context.Context, name string) (Org, error) {
	kind, err := a.namespaceKind(ctx, name)
	if err != nil {
		return Org{}, err
	}
	if kind != KindOrg {
		return Org{}, fmt.Errorf("%s is a user: %w", name, ErrNotOrg)
	}
	var created sql.NullInt64
	err = a.idx.Reads().QueryRowContext(ctx, `SELECT created FROM orgs WHERE name = ?`, name).Scan(&created)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Org{}, fmt.Errorf("organization %s: %w", name, index.Err(err))
	}
	return Org{Name: name, Created: timeOf(created)}, nil
}

// Orgs lists every organization by name: those made by CreateOrg and
// every tenant that is not a user.
func (a *Accounts) Orgs(ctx context.Context) ([]Org, error) {
	rows, err := a.idx.Reads().QueryContext(ctx, `SELECT t.name, o.created FROM tenants t LEFT JOIN orgs o ON o.name = t.name
		WHERE NOT EXISTS (SELECT 1 FROM users u WHERE u.name = t.name) ORDER BY t.name`)
	if err != nil {
		return nil, fmt.Errorf("organizations: %w", index.Err(err))
	}
	defer rows.Close()
	var out []Org
	for rows.Next() {
		var o Org
		var created sql.NullInt64
		if err := rows.Scan(&o.Name, &created); err != nil {
			return nil, fmt.Errorf("organizations: %w", index.Err(err))
		}
		o.Created = timeOf(created)
		out = append(out, o)
	}
	return out, index.Err(rows.Err())
}
