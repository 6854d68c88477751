package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A commit's history is the chain of its parents, newest first. It ends at
// a commit without a parent, or at one whose parent the index no longer
// holds (super-squash and branch deletion drop the commits only they
// reached).

// History returns up to limit commits of the history of sha, newest first,
// after skipping the first skip of them, without their trees, and the
// length of the whole history. ErrNotFound when the repo has no commit
// sha.
func (s *Store) History(ctx context.Context, id RepoID, sha string, skip, limit int) (commits []Commit, total int, err error) {
	// CROSS JOIN keeps chain the outer loop on SQLite, so that each step is
	// one primary-key lookup of the parent; with a plain JOIN the planner
	// scanned the commits table, trees and all, at every step (202 commits
	// of a 1,500-file tree: 11.8 s instead of 0.34 s).
	const chain = `WITH RECURSIVE chain(sha, parent, summary, description, created, depth) AS (
		SELECT sha, parent, summary, description, created, 0 FROM commits WHERE tenant = ?1 AND type = ?2 AND name = ?3 AND sha = ?4
		UNION ALL
		SELECT c.sha, c.parent, c.summary, c.description, c.created, chain.depth + 1 FROM chain CROSS JOIN commits c
			WHERE c.tenant = ?1 AND c.type = ?2 AND c.name = ?3 AND c.sha = chain.parent)`
	if err := s.queryRow(ctx, chain+` SELECT count(*) FROM chain`, id.Tenant, id.Type, id.Name, sha).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("history of %s: %w", sha, err)
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("commit %s of %s: %w", sha, id, ErrNotFound)
	}
	rows, err := s.query(ctx, chain+` SELECT sha, parent, summary, description, created FROM chain ORDER BY depth LIMIT ?5 OFFSET ?6`,
		id.Tenant, id.Type, id.Name, sha, limit, skip)
	if err != nil {
		return nil, 0, fmt.Errorf("history of %s: %w", sha, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			c       Commit
			created int64
		)
		if err := rows.Scan(&c.SHA, &c.Parent, &c.Summary, &c.Description, &created); err != nil {
			return nil, 0, fmt.Errorf("history of %s: %w", sha, dbErr(err))
		}
		c.Created = time.Unix(0, created).UTC()
		commits = append(commits, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("history of %s: %w", sha, dbErr(err))
	}
	return commits, total, nil
}

// WalkHistory calls fn with each commit of the history of sha, newest
// first, each with its tree, one commit read at a time, until fn returns
// false or an error (which WalkHistory returns), or the history ends.
// ErrNotFound when the repo has no commit sha.
func (s *Store) WalkHistory(ctx context.Context, id RepoID, sha string, fn func(Commit) (bool, error)) error {
	for first := true; sha != ""; first = false {
		c, err := s.commitBySHA(ctx, id, sha)
		if errors.Is(err, ErrNotFound) && !first {
			return nil // the history ends where the index dropped a commit
		}
		if err != nil {
			return err
		}
		if more, err := fn(c); err != nil || !more {
			return err
		}
		sha = c.Parent
	}
	return nil
}

// commitBySHA reads one commit of a repo with its tree; ErrNotFound when
// there is none.
func (s *Store) commitBySHA(ctx context.Context, id RepoID, sha string) (Commit, error) {
	var (
		c       Commit
		created int64
		tree    []byte
	)
	err := s.queryRow(ctx, `SELECT sha, parent, summary, description, created, tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
		id.Tenant, id.Type, id.Name, sha).Scan(&c.SHA, &c.Parent, &c.Summary, &c.Description, &created, &tree)
	if errors.Is(err, sql.ErrNoRows) {
		return Commit{}, fmt.Errorf("commit %s of %s: %w", sha, id, ErrNotFound)
	}
	if err != nil {
		return Commit{}, fmt.Errorf("commit %s: %w", sha, err)
	}
	c.Created = time.Unix(0, created).UTC()
	if err := json.Unmarshal(tree, &c.Tree); err != nil {
		return Commit{}, fmt.Errorf("tree of %s: %w", sha, err)
	}
	return c, nil
}
