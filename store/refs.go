// Refs: a repo's branches and tags, and the one place that creates and
// deletes them (CreateBranch, CreateTag, DeleteRef; names checked by
// ValidRefName in refname.go), and what they reach (unreachableAfter,
// dropUnreachable). Commits move a branch through setRef (commit.go);
// what a deleted ref releases is retention.go's; a squash is history.go's.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
)

// TagRef is the ref name a tag is stored under; branches are stored under
// their bare name.
func TagRef(tag string) string { return "refs/tags/" + tag }

// Ref is a branch or tag of a repo.
type Ref struct {
	Name   string // branch name, or the tag name for a tag
	Tag    bool
	Commit string
}

// Refs lists a repo's branches and tags, ordered by name.
func (s *Store) Refs(ctx context.Context, id RepoID) ([]Ref, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT ref, commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ? ORDER BY ref`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return nil, fmt.Errorf("refs of %s: %w", id, err)
	}
	defer rows.Close()
	var out []Ref
	for rows.Next() {
		var r Ref
		if err := rows.Scan(&r.Name, &r.Commit); err != nil {
			return nil, err
		}
		if tag, ok := strings.CutPrefix(r.Name, "refs/tags/"); ok {
			r.Name, r.Tag = tag, true
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func repoRefs(ctx context.Context, q queryer, id RepoID) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT ref, commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return nil, fmt.Errorf("refs of %s: %w", id, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var ref, sha string
		if err := rows.Scan(&ref, &sha); err != nil {
			return nil, err
		}
		out[ref] = sha
	}
	return out, rows.Err()
}

// DeleteRef deletes a branch or a tag (ref as stored: a branch name, or
// TagRef(tag)). The commits no ref reaches any more are dropped, and so is
// the retention of the files only they referenced. ErrNotFound when the
// repo has no such ref; deleting main is refused (ErrNotBranch).
func (s *Store) DeleteRef(ctx context.Context, id RepoID, ref string) error {
	if ref == "main" {
		return fmt.Errorf("%w: Cannot delete refs/heads/main, the default branch", ErrNotBranch) // the Hub's words
	}
	refs, err := repoRefs(ctx, s.db, id)
	if err != nil {
		return err
	}
	if _, ok := refs[ref]; !ok {
		return fmt.Errorf("ref %s of %s: %w", ref, id, ErrNotFound)
	}
	delete(refs, ref)
	dropped, err := unreachableAfter(ctx, s.db, id, refs, nil)
	if err != nil {
		return err
	}
	cands, err := s.candidatesAfter(ctx, id, dropped)
	if err != nil {
		return err
	}
	_, err = s.changeRevisions(ctx, revisionChange{
		tenant:     id.Tenant,
		candidates: cands,
		before: func(ctx context.Context) error {
			err := s.bucket.Delete(ctx, id.prefix()+"refs/"+HashName(ref)+".json")
			if err != nil && !isNotFound(err) {
				return fmt.Errorf("delete ref %s: %w", ref, err)
			}
			return nil
		},
		index: func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`, id.Tenant, id.Type, id.Name, ref); err != nil {
				return fmt.Errorf("delete ref %s: %w", ref, err)
			}
			gone, err := dropUnreachable(ctx, tx, id)
			dropped = gone
			return err
		},
		after: func(ctx context.Context) error { return s.deleteCommitRecords(ctx, id, dropped) },
	})
	return err
}

// CreateTag points a new tag at a commit. ErrBadRefName for a name
// ValidRefName refuses; ErrRefExists when the tag exists.
func (s *Store) CreateTag(ctx context.Context, id RepoID, tag string, c Commit) error {
	if err := ValidRefName(tag); err != nil {
		return err
	}
	ok, err := s.HasRef(ctx, id, TagRef(tag))
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("tag %s of %s: %w", tag, id, ErrRefExists)
	}
	return s.createRef(ctx, id, TagRef(tag), c)
}

func setRef(ctx context.Context, tx *sql.Tx, id RepoID, ref, sha string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO refs(tenant, type, name, ref, commit_sha) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(tenant, type, name, ref) DO UPDATE SET commit_sha = excluded.commit_sha`, id.Tenant, id.Type, id.Name, ref, sha)
	if err != nil {
		return fmt.Errorf("index ref %s: %w", ref, err)
	}
	return nil
}

// HasRef reports whether the repo has a ref (branch) of that name.
func (s *Store) HasRef(ctx context.Context, id RepoID, ref string) (bool, error) {
	var one int
	err := s.queryRow(ctx, `SELECT 1 FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`, id.Tenant, id.Type, id.Name, ref).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// CreateBranch points a new branch at a commit. ErrBadRefName for a name
// ValidRefName refuses; ErrNotFound when the commit is no longer in the
// index.
func (s *Store) CreateBranch(ctx context.Context, id RepoID, branch string, c Commit) error {
	if err := ValidRefName(branch); err != nil {
		return err
	}
	return s.createRef(ctx, id, branch, c)
}

// createRef points a new ref (a branch, or TagRef(tag)) at a commit.
func (s *Store) createRef(ctx context.Context, id RepoID, ref string, c Commit) error {
	if err := s.writeCommitRecords(ctx, id, ref, c); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := commitExists(ctx, tx, id, c.SHA); err != nil {
			return err
		}
		return setRef(ctx, tx, id, ref, c.SHA)
	})
}

// ErrNotBranch means a ref that must be a branch is not one (a tag, or a
// name under refs/).
var ErrNotBranch = errors.New("not a branch")

// unreachableAfter returns the commits of repo id that no ref reaches
// once the refs are as given (ref → commit; a missing ref is deleted), and
// the commits of extra (commit → parent: a push's, not indexed yet) are
// there too.
func unreachableAfter(ctx context.Context, q queryer, id RepoID, refs map[string]string, extra map[string]string) (map[string]bool, error) {
	parents := maps.Clone(extra)
	if parents == nil {
		parents = map[string]string{}
	}
	rows, err := q.QueryContext(ctx, `SELECT sha, parent FROM commits WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return nil, fmt.Errorf("commits of %s: %w", id, err)
	}
	for rows.Next() {
		var sha, parent string
		if err := rows.Scan(&sha, &parent); err != nil {
			rows.Close()
			return nil, err
		}
		parents[sha] = parent
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, head := range refs {
		for sha := head; sha != "" && !seen[sha]; {
			parent, ok := parents[sha]
			if !ok {
				break
			}
			seen[sha] = true
			sha = parent
		}
	}
	out := map[string]bool{}
	for sha := range parents {
		if _, pushed := extra[sha]; !seen[sha] && !pushed {
			out[sha] = true
		}
	}
	return out, nil
}

// dropUnreachable drops, in tx, the commits of id that no ref reaches any
// more (after a ref moved or went) and returns them and the ids they had
// before their git ids, for their records to be deleted once tx commits
// (deleteCommitRecords: a record of format 1 is named by its old id).
func dropUnreachable(ctx context.Context, tx *sql.Tx, id RepoID) (map[string]bool, error) {
	refs, err := repoRefs(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	gone, err := unreachableAfter(ctx, tx, id, refs, nil)
	if err != nil {
		return nil, err
	}
	for sha := range gone {
		olds, err := commitAliases(ctx, tx, id, sha)
		if err != nil {
			return nil, err
		}
		for _, o := range olds {
			gone[o] = true
		}
	}
	return gone, dropCommits(ctx, tx, id, gone)
}

// dropCommits deletes commit rows of a repo (those no ref reaches any
// more), with their aliases.
func dropCommits(ctx context.Context, tx *sql.Tx, id RepoID, shas map[string]bool) error {
	for sha := range shas {
		if _, err := tx.ExecContext(ctx, `DELETE FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, sha); err != nil {
			return fmt.Errorf("drop commit %s: %w", sha, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM commit_aliases WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, sha); err != nil {
			return fmt.Errorf("drop aliases of commit %s: %w", sha, err)
		}
	}
	return nil
}

// deleteCommitRecords removes the bucket records of dropped commits; a
// record left behind names a commit no ref reaches, which reindex ignores.
func (s *Store) deleteCommitRecords(ctx context.Context, id RepoID, shas map[string]bool) error {
	for sha := range shas {
		if err := s.bucket.Delete(ctx, id.prefix()+"commits/"+sha+".json"); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete commit %s: %w", sha, err)
		}
	}
	return nil
}

// repairRefRecord rewrites a ref's bucket record from the index, or
// deletes it when the index has no such ref.
func (s *Store) repairRefRecord(ctx context.Context, id RepoID, ref string) {
	var sha string
	err := s.db.QueryRowContext(ctx, `SELECT commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`, id.Tenant, id.Type, id.Name, ref).Scan(&sha)
	if errors.Is(err, sql.ErrNoRows) {
		s.bucket.Delete(ctx, id.prefix()+"refs/"+HashName(ref)+".json")
		return
	}
	if err != nil {
		return
	}
	rr, _ := json.Marshal(refRecord{RepoID: id, Ref: ref, Commit: sha})
	s.bucket.WriteAll(ctx, id.prefix()+"refs/"+HashName(ref)+".json", rr, nil)
}

// ErrRefExists means a branch or tag of that name already exists.
var ErrRefExists = errors.New("ref already exists")
