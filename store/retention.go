package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"openxet/store/accounts"
	"openxet/xet"
)

// Retention (docs/design.md §9).
//
// A file (tenant, xet hash) is retained while its row is in the files
// table. A shard registration adds the row; only a release removes it, and
// a release happens only when a caller asks for it:
//
//   - a change that drops revisions (DeleteRepo, SquashHistory, DeleteRef)
//     releases the files those revisions referenced that no revision left
//     in any of the tenant's repos references;
//   - ReleaseFile releases one file that no revision references (the
//     CAS-only rule: a file registered through the CAS API alone is kept
//     until the tenant or an operator deletes it, so an acknowledged upload
//     is never lost to a commit that did not come, or came late);
//   - DeleteTenant releases every file of the tenant.
//
// A file that any revision (a commit reachable from a branch or tag) of one
// of its tenant's repos references is never released, whatever asked.
//
// In the bucket a release is a record file-releases/{sha256(tenant)}/{file}
// written before the index row goes (a crash leaves the index retaining
// more than the bucket says, never less); registering the file again
// removes the record before the index takes the row back. Reindex keeps a
// registered file unless a release record names it and no revision
// references it.
//
// Releasing a file changes no usage counter: the collector (gc.go) later
// releases the tenant's xorbs that no retained file of the tenant
// references, and collects objects nobody owns or references.

// ErrFileInRepo means a file cannot be released on its own: a revision of
// one of the tenant's repos references it.
var ErrFileInRepo = errors.New("file is referenced by a repo revision")

// ErrCollecting means the collector is deleting an object (or releasing
// the owner record) the request needs; retrying shortly succeeds.
var ErrCollecting = errors.New("being collected")

const prefixFileReleases = "file-releases/"

func fileReleaseKey(tenant, file string) string {
	return prefixFileReleases + HashName(tenant) + "/" + file
}

type fileReleaseRecord struct {
	Tenant   string `json:"tenant"`
	File     string `json:"file"`
	Released int64  `json:"released"`
}

// treeFiles returns the xet hashes the commits of one repo name.
func treeFiles(ctx context.Context, q queryer, id RepoID, shas map[string]bool) (map[string]bool, error) {
	out := map[string]bool{}
	rows, err := q.QueryContext(ctx, `SELECT sha, tree FROM commits WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return nil, fmt.Errorf("commits of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sha string
		var tree []byte
		if err := rows.Scan(&sha, &tree); err != nil {
			return nil, err
		}
		if shas != nil && !shas[sha] {
			continue
		}
		var entries []TreeEntry
		if err := decodeTree(tree, &entries); err != nil {
			return nil, fmt.Errorf("tree of %s: %w", sha, err)
		}
		for _, e := range entries {
			if e.XetHash != "" {
				out[e.XetHash] = true
			}
		}
	}
	return out, rows.Err()
}

// revisionChange is a change that may drop revisions of tenant's repos and
// with them the retention of the files only they referenced.
type revisionChange struct {
	tenant string
	// candidates are the files the dropped revisions (or the caller)
	// name; those no revision left references are released.
	candidates map[string]bool
	// before changes the bucket after the release records are written and
	// before the index changes.
	before func(ctx context.Context) error
	// index changes the index; the release of the candidates follows in
	// the same transaction, checked against the revisions it leaves.
	index func(ctx context.Context, tx *sql.Tx) error
	// after cleans the bucket up once the index changed (best effort:
	// what it leaves is invisible to reindex).
	after func(ctx context.Context) error
	// refuseReferenced makes a referenced candidate an error (ReleaseFile)
	// instead of a file that stays retained.
	refuseReferenced bool
}

// changeRevisions runs a revisionChange and returns the files it released.
// Order: release intents in the index, release records in the bucket,
// before, then one index transaction (the change, then the release of
// every candidate no revision references), then after. A crash at any
// point leaves the index retaining at least what the bucket retains.
func (s *Store) changeRevisions(ctx context.Context, ch revisionChange) ([]string, error) {
	var cands []string
	for f := range ch.candidates {
		var one int
		err := s.db.QueryRowContext(ctx, `SELECT 1 FROM files WHERE tenant = ? AND hash = ?`, ch.tenant, f).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", f, err)
		}
		cands = append(cands, f)
	}
	sort.Strings(cands)
	if len(cands) > 0 {
		// The intent first, with the release's time: a shard registering
		// one of these files again supersedes it (registerAgain), and a
		// release that started after the shard was prepared makes the
		// shard wait.
		intents := map[string]int64{}
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			at := s.now().UnixNano()
			for _, f := range cands {
				var t int64
				if err := tx.QueryRowContext(ctx, `INSERT INTO file_releases(tenant, hash, released) VALUES (?, ?, ?)
					ON CONFLICT(tenant, hash) DO UPDATE SET released = CASE WHEN excluded.released > file_releases.released THEN excluded.released ELSE file_releases.released + 1 END
					RETURNING released`, ch.tenant, f, at).Scan(&t); err != nil {
					return fmt.Errorf("release intent %s: %w", f, err)
				}
				intents[f] = t
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, f := range cands {
			rec, _ := json.Marshal(fileReleaseRecord{Tenant: ch.tenant, File: f, Released: intents[f]})
			if err := s.bucket.WriteAll(ctx, fileReleaseKey(ch.tenant, f), rec, nil); err != nil {
				return nil, fmt.Errorf("write release of %s: %w", f, err)
			}
		}
	}
	if ch.before != nil {
		if err := ch.before(ctx); err != nil {
			return nil, err
		}
	}
	var released []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		released = released[:0]
		if ch.index != nil {
			if err := ch.index(ctx, tx); err != nil {
				return err
			}
		}
		if len(cands) == 0 {
			return nil
		}
		rev, err := loadRevisions(ctx, tx, ch.tenant, nil)
		if err != nil {
			return err
		}
		for _, f := range cands {
			if repos := rev.files[f]; len(repos) > 0 {
				if ch.refuseReferenced {
					return refuseInRepo(ch.tenant, f, repos)
				}
				continue
			}
			// A registration since the intent superseded it (the shard
			// deleted the intent row): the file stays.
			var t int64
			err := tx.QueryRowContext(ctx, `SELECT released FROM file_releases WHERE tenant = ? AND hash = ?`, ch.tenant, f).Scan(&t)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			ok, err := releaseFileRow(ctx, tx, ch.tenant, f)
			if err != nil {
				return err
			}
			if ok {
				released = append(released, f)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ch.after != nil {
		if err := ch.after(ctx); err != nil {
			return released, err
		}
	}
	return released, nil
}

// releaseFileRow drops a file's row and notes its xorbs as dropped by the
// tenant, so that the next collection releases them without waiting for
// the grace period (gc.go).
func releaseFileRow(ctx context.Context, tx *sql.Tx, tenant, file string) (bool, error) {
	var terms []byte
	err := tx.QueryRowContext(ctx, `SELECT terms FROM files WHERE tenant = ? AND hash = ?`, tenant, file).Scan(&terms)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release %s: %w", file, err)
	}
	ts, err := decodeTerms(terms)
	if err != nil {
		return false, fmt.Errorf("release %s: %w", file, err)
	}
	for _, t := range ts {
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_dropped(tenant, xorb) VALUES (?, ?) ON CONFLICT DO NOTHING`, tenant, t.Xorb.String()); err != nil {
			return false, fmt.Errorf("release %s: %w", file, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM files WHERE tenant = ? AND hash = ?`, tenant, file); err != nil {
		return false, fmt.Errorf("release %s: %w", file, err)
	}
	return true, nil
}

// ReleaseFile releases one file of tenant that no revision of its repos
// references (the CAS-only rule's delete). ErrNotFound when tenant has no
// such file; ErrFileInRepo when a revision references it. The tenant's
// usage changes when the collector next releases the xorbs no retained
// file of the tenant references.
func (s *Store) ReleaseFile(ctx context.Context, tenant string, file xet.Hash) error {
	if err := accounts.ValidTenant(tenant); err != nil {
		return err
	}
	if _, err := s.File(ctx, tenant, file); err != nil {
		return fmt.Errorf("file %s of %s: %w", file, tenant, ErrNotFound)
	}
	rev, err := loadRevisions(ctx, s.db, tenant, nil)
	if err != nil {
		return err
	}
	if len(rev.files[file.String()]) > 0 {
		return refuseInRepo(tenant, file.String(), rev.files[file.String()]) // before any record is written
	}
	released, err := s.changeRevisions(ctx, revisionChange{tenant: tenant, candidates: map[string]bool{file.String(): true}, refuseReferenced: true})
	if err != nil {
		return err
	}
	if len(released) == 0 {
		return fmt.Errorf("file %s of %s: %w", file, tenant, ErrNotFound)
	}
	return nil
}

func refuseInRepo(tenant, file string, repos []repoKey) error {
	names := make([]string, len(repos))
	for i, k := range repos {
		names[i] = tenant + "/" + k.Name + " (" + k.Type + ")"
	}
	return fmt.Errorf("file %s of %s: %w: %s; delete it there (and squash the history) or delete the repo", file, tenant, ErrFileInRepo, strings.Join(names, ", "))
}

// RepoIDs lists the names of a tenant's repos of every type (Repos lists one
// type with the heads a listing shows).
func (s *Store) RepoIDs(ctx context.Context, tenant string) ([]RepoID, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT type, name FROM repos WHERE tenant = ? ORDER BY type, name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("repos of %s: %w", tenant, err)
	}
	defer rows.Close()
	var out []RepoID
	for rows.Next() {
		r := RepoID{Tenant: tenant}
		if err := rows.Scan(&r.Type, &r.Name); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// candidatesAfter returns the files the dropped commits of a repo
// reference (a first cut: the index transaction keeps those a surviving
// revision references).
func (s *Store) candidatesAfter(ctx context.Context, id RepoID, dropped map[string]bool) (map[string]bool, error) {
	if len(dropped) == 0 {
		return nil, nil
	}
	return treeFiles(ctx, s.db, id, dropped)
}
