package store

import (
	"context"
	"fmt"
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
	rows, err := s.query(ctx, `SELECT r.name, r.private, r.created, r.visibility, r.gated, COALESCE(c.sha, ''), COALESCE(c.created, 0)
		FROM repos r
		LEFT JOIN refs f ON f.tenant = r.tenant AND f.type = r.type AND f.name = r.name AND f.ref = 'main'
		LEFT JOIN commits c ON c.tenant = r.tenant AND c.type = r.type AND c.name = r.name AND c.sha = f.commit_sha
		WHERE r.tenant = ? AND r.type = ? ORDER BY r.name`, tenant, typ)
	if err != nil {
		return nil, fmt.Errorf("repos of %s: %w", tenant, err)
	}
	defer rows.Close()
	out := []RepoSummary{}
	for rows.Next() {
		var (
			r                RepoSummary
			created, updated int64
		)
		if err := rows.Scan(&r.Name, &r.Private, &created, &r.Visibility, &r.Gated, &r.HeadSHA, &updated); err != nil {
			return nil, fmt.Errorf("repos of %s: %w", tenant, dbErr(err))
		}
		r.Tenant, r.Type = tenant, typ
		r.Created = time.Unix(created, 0).UTC()
		r.Updated = r.Created
		if r.HeadSHA != "" {
			r.Updated = time.Unix(0, updated).UTC()
		}
		out = append(out, r)
	}
	if err := dbErr(rows.Err()); err != nil {
		return nil, fmt.Errorf("repos of %s: %w", tenant, err)
	}
	return out, nil
}
