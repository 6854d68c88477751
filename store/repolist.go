package store

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// RepoSummary is a repo as a listing shows it: its record and the head of
// its main branch.
type RepoSummary struct {
	Repo
	// HeadSHA is the commit main points at; "" if the repo has no main.
	HeadSHA string
	// Updated is when that commit was made (Created when there is none).
	Updated time.Time
}

// Repos lists a tenant's repos of one type, ordered by name. It returns an
// empty list for a tenant without repos; the caller decides who may see it.
func (s *Store) Repos(ctx context.Context, tenant, typ string) ([]RepoSummary, error) {
	return s.repoSummaries(ctx, "repos of "+tenant, `r.tenant = ? AND r.type = ?`, tenant, typ)
}

// SharedRepos lists the Shared repos (internal or public; public only
// with publicOnly) of one type of every tenant but except, ordered by
// tenant and name; with owner not "", only that tenant's (none when owner
// is except).
func (s *Store) SharedRepos(ctx context.Context, typ, except, owner string, publicOnly bool) ([]RepoSummary, error) {
	where, args := `r.type = ? AND r.tenant <> ? AND r.visibility IN ('internal', 'public')`, []any{typ, except}
	if publicOnly {
		where = `r.type = ? AND r.tenant <> ? AND r.visibility = 'public'`
	}
	if owner != "" {
		where, args = where+` AND r.tenant = ?`, append(args, owner)
	}
	return s.repoSummaries(ctx, "shared repos", where, args...)
}

// NewestPublicRepos lists at most n public repos of every type and
// tenant, the most recently updated first (its main branch's head commit,
// or its creation), then by tenant, type and name: the landing page's list.
func (s *Store) NewestPublicRepos(ctx context.Context, n int) ([]RepoSummary, error) {
	if n <= 0 {
		return []RepoSummary{}, nil
	}
	return s.repoSummariesOrdered(ctx, "newest public repos", `r.visibility = 'public'`,
		`COALESCE(c.created, r.created) DESC, r.tenant, r.type, r.name LIMIT `+strconv.Itoa(n))
}

func (s *Store) repoSummaries(ctx context.Context, what, where string, args ...any) ([]RepoSummary, error) {
	return s.repoSummariesOrdered(ctx, what, where, `r.tenant, r.name`, args...)
}

// repoSummariesOrdered is repoSummaries with its ORDER BY clause (and
// LIMIT) given; order is a constant of this package, never input.
func (s *Store) repoSummariesOrdered(ctx context.Context, what, where, order string, args ...any) ([]RepoSummary, error) {
	rows, err := s.query(ctx, `SELECT r.tenant, r.type, r.name, r.private, r.created, r.visibility, r.gated, COALESCE(c.sha, ''), COALESCE(c.created, 0)
		FROM repos r
		LEFT JOIN refs f ON f.tenant = r.tenant AND f.type = r.type AND f.name = r.name AND f.ref = 'main'
		LEFT JOIN commits c ON c.tenant = r.tenant AND c.type = r.type AND c.name = r.name AND c.sha = f.commit_sha
		WHERE `+where+` ORDER BY `+order, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out := []RepoSummary{}
	for rows.Next() {
		var (
			r                RepoSummary
			created, updated int64
		)
		if err := rows.Scan(&r.Tenant, &r.Type, &r.Name, &r.Private, &created, &r.Visibility, &r.Gated, &r.HeadSHA, &updated); err != nil {
			return nil, fmt.Errorf("%s: %w", what, dbErr(err))
		}
		r.Created = time.Unix(created, 0).UTC()
		r.Updated = r.Created
		if r.HeadSHA != "" {
			r.Updated = time.Unix(0, updated).UTC()
		}
		out = append(out, r)
	}
	if err := dbErr(rows.Err()); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
