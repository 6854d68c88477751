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

// Roles of a member of an organization, as the Hub names them: read sees
// the organization's private repos, write also commits and creates repos,
// admin also manages members, settings and robot credentials.
const (
	RoleRead  = "read"
	RoleWrite = "write"
	RoleAdmin = "admin"
)

// Membership is a user's role in an organization.
type Membership struct {
	Org     string    `json:"org"`
	User    string    `json:"user"`
	Role    string    `json:"role"`
	Created time.Time `json:"created"`
}

// CheckRole checks a role name (read, write or admin).
func CheckRole(role string) error {
	switch role {
	case RoleRead, RoleWrite, RoleAdmin:
		return nil
	}
	return fmt.Errorf("%w: %q (want read, write or admin)", ErrBadRole, role)
}

// SetMember makes user a member of org with role, or changes their role.
// org must be an organization (ErrNotOrg for a user's namespace,
// objects.ErrNotFound for no namespace), user a user who is not deleted.
// Demoting the last admin of org is refused (ErrLastAdmin); a refusal
// changes nothing.
func (a *Accounts) SetMember(ctx context.Context, org, user, role string) (Membership, error) {
	if err := CheckRole(role); err != nil {
		return Membership{}, err
	}
	if _, err := a.Org(ctx, org); err != nil {
		return Membership{}, err
	}
	u, err := a.User(ctx, user)
	if err != nil {
		return Membership{}, err
	}
	if !u.Deleted.IsZero() {
		return Membership{}, fmt.Errorf("user %s was deleted: %w", user, ErrUserInactive)
	}
	prev, had, err := a.membership(ctx, org, user)
	if err != nil {
		return Membership{}, err
	}
	if had && prev.Role == role {
		return prev, nil
	}
	if err := a.checkNotLastAdmin(ctx, a.idx.Reads(), org, user, role); err != nil {
		return Membership{}, err
	}
	m := Membership{Org: org, User: user, Role: role, Created: a.now().UTC().Truncate(time.Second)}
	if had {
		m.Created = prev.Created
	}
	rec, _ := json.Marshal(m)
	if err := a.write(ctx, MembershipKey(org, user), rec); err != nil {
		return Membership{}, fmt.Errorf("write membership %s/%s: %w", org, user, err)
	}
	err = a.idx.Tx(ctx, func(tx *sql.Tx) error {
		if err := a.checkNotLastAdmin(ctx, tx, org, user, role); err != nil {
			return err
		}
		return upsertMembership(ctx, tx, m)
	})
	if err != nil {
		a.undoMembership(ctx, prev, had)
		return Membership{}, err
	}
	return m, nil
}

// RemoveMember removes user from org; objects.ErrNotFound when they are
// not a member. Removing the last admin is refused (ErrLastAdmin) with
// nothing changed.
func (a *Accounts) RemoveMember(ctx context.Context, org, user string) error {
	m, had, err := a.membership(ctx, org, user)
	if err != nil {
		return err
	}
	if !had {
		return fmt.Errorf("%s is not a member of %s: %w", user, org, objects.ErrNotFound)
	}
	if err := a.checkNotLastAdmin(ctx, a.idx.Reads(), org, user, ""); err != nil {
		return err
	}
	return a.dropMembership(ctx, m)
}

// dropMembership removes a membership: its record, then (checking again
// that an admin remains) its row; a refusal puts the record back.
func (a *Accounts) dropMembership(ctx context.Context, m Membership) error {
	if err := a.idx.Writable(); err != nil {
		return err
	}
	if err := a.bucket.Delete(ctx, MembershipKey(m.Org, m.User)); err != nil && !objects.IsNotFound(err) {
		return fmt.Errorf("delete membership %s/%s: %w", m.Org, m.User, objects.Err(err))
	}
	err := a.idx.Tx(ctx, func(tx *sql.Tx) error {
		if err := a.checkNotLastAdmin(ctx, tx, m.Org, m.User, ""); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM memberships WHERE org = ? AND member = ?`, m.Org, m.User)
		return err
	})
	if err != nil {
		a.undoMembership(ctx, m, true)
	}
	return err
}

// undoMembership puts back the record a refused change replaced (best
// effort: the index kept the row it had).
func (a *Accounts) undoMembership(ctx context.Context, prev Membership, had bool) {
	ctx = context.WithoutCancel(ctx)
	if !had {
		a.bucket.Delete(ctx, MembershipKey(prev.Org, prev.User))
		return
	}
	rec, _ := json.Marshal(prev)
	a.bucket.WriteCRC(ctx, MembershipKey(prev.Org, prev.User), rec, typeJSON, false, nil)
}

// querier is a read pool or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkNotLastAdmin refuses giving user the role newRole in org ("" for
// removing them) when they are its admin and no other member is.
func (a *Accounts) checkNotLastAdmin(ctx context.Context, q querier, org, user, newRole string) error {
	if newRole == RoleAdmin {
		return nil
	}
	var self, others int
	err := q.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM memberships WHERE org = ? AND member = ? AND role = 'admin'),
		(SELECT COUNT(*) FROM memberships WHERE org = ? AND member <> ? AND role = 'admin')`, org, user, org, user).Scan(&self, &others)
	if err != nil {
		return fmt.Errorf("admins of %s: %w", org, index.Err(err))
	}
	if self > 0 && others == 0 {
		return fmt.Errorf("%w: %s is the only admin of %s; make another member admin first", ErrLastAdmin, user, org)
	}
	return nil
}

func (a *Accounts) membership(ctx context.Context, org, user string) (Membership, bool, error) {
	ms, err := a.queryMemberships(ctx, `WHERE org = ? AND member = ?`, org, user)
	if err != nil || len(ms) == 0 {
		return Membership{}, false, err
	}
	return ms[0], true, nil
}

// Members lists the members of org by user name.
func (a *Accounts) Members(ctx context.Context, org string) ([]Membership, error) {
	return a.queryMemberships(ctx, `WHERE org = ? ORDER BY member`, org)
}

// MembershipsOf lists the organizations user is a member of, by name.
func (a *Accounts) MembershipsOf(ctx context.Context, user string) ([]Membership, error) {
	return a.queryMemberships(ctx, `WHERE member = ? ORDER BY org`, user)
}

func (a *Accounts) queryMemberships(ctx context.Context, where string, args ...any) ([]Membership, error) {
	rows, err := a.idx.Reads().QueryContext(ctx, `SELECT org, member, role, created FROM memberships `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("memberships: %w", index.Err(err))
	}
	defer rows.Close()
	var out []Membership
	for rows.Next() {
		var m Membership
		var created int64
		if err := rows.Scan(&m.Org, &m.User, &m.Role, &created); err != nil {
			return nil, fmt.Errorf("memberships: %w", index.Err(err))
		}
		m.Created = time.Unix(created, 0).UTC()
		out = append(out, m)
	}
	return out, index.Err(rows.Err())
}

func upsertMembership(ctx context.Context, tx *sql.Tx, m Membership) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO memberships(org, member, role, created) VALUES (?, ?, ?, ?)
		ON CONFLICT(org, member) DO UPDATE SET role = excluded.role`, m.Org, m.User, m.Role, m.Created.Unix())
	if err != nil {
		return fmt.Errorf("index membership %s/%s: %w", m.Org, m.User, err)
	}
	return nil
}

// RestoreMembership indexes a membership record (reindex's step for
// PrefixMemberships).
func RestoreMembership(ctx context.Context, tx *sql.Tx, data []byte) error {
	var m Membership
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if ValidTenant(m.Org) != nil || ValidTenant(m.User) != nil || CheckRole(m.Role) != nil {
		return errors.New("membership record is not one")
	}
	return upsertMembership(ctx, tx, m)
}
