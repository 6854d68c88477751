package store

import (
	"database/sql"
	"errors"
	"strings"

	"openxet/xet"
)

// Reindex's part of the lifecycle (retention.go, gc.go): what the bucket
// says about releases, applied after the repos are rebuilt.

// presentOnly drops from a shard being replayed what names a xorb the
// bucket no longer has (collected, or named by a registration that never
// committed): its CAS blocks, and the files whose first term is in one
// (their dedup entry would name it). Files whose later terms name a gone
// xorb are dropped after the replay (lifecycle): a file without its bytes
// is not a file, and the live index never keeps one.
func (b *builder) presentOnly(tx *sql.Tx, sh *xet.Shard) (*xet.Shard, error) {
	have := map[xet.Hash]bool{}
	present := func(x xet.Hash) (bool, error) {
		if ok, seen := have[x]; seen {
			return ok, nil
		}
		var one int
		err := tx.QueryRowContext(b.ctx, `SELECT 1 FROM xorbs WHERE hash = ?`, x.String()).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		have[x] = err == nil
		return err == nil, nil
	}
	out := &xet.Shard{Footer: sh.Footer}
	for _, f := range sh.Files {
		if len(f.Terms) > 0 {
			ok, err := present(f.Terms[0].Xorb)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		out.Files = append(out.Files, f)
	}
	for _, c := range sh.Xorbs {
		ok, err := present(c.Xorb)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Xorbs = append(out.Xorbs, c)
		}
	}
	return out, nil
}

// lifecycle applies the release records: a file a tenant released (and did
// not register again since) is not retained unless a revision references
// it, and commits no ref reaches are not revisions.
func (b *builder) lifecycle() error {
	if err := b.restoreReleases(); err != nil {
		return err
	}
	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The records of format 1 commits get their git ids (gitcommit.go),
	// as the live index's did when it was first opened.
	if _, err := upgradeCommitIDs(b.ctx, tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(b.ctx, `DELETE FROM upgrades WHERE name = 'git-commit-ids'`); err != nil {
		return err
	}
	if err := b.dropUnreachableCommits(tx); err != nil {
		return err
	}
	if err := b.dropFilesMissingXorbs(tx); err != nil {
		return err
	}
	if err := b.dropReleasedFiles(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	b.progress("lifecycle", 1, 1)
	return nil
}

// restoreReleases indexes the bucket's file release records, but those of
// files their tenant registered again since.
func (b *builder) restoreReleases() error {
	type tf struct{ tenant, file string }
	registered := map[tf]int64{}
	err := b.each("file registrations", prefixFileRegistrations, func(tx *sql.Tx, key string) error {
		var rec fileRegistrationRecord
		if err := b.readJSON(key, &rec); err != nil {
			return err
		}
		registered[tf{rec.Tenant, rec.File}] = rec.Registered
		return nil
	})
	if err != nil {
		return err
	}
	return b.each("file releases", prefixFileReleases, func(tx *sql.Tx, key string) error {
		var rec fileReleaseRecord
		if err := b.readJSON(key, &rec); err != nil {
			return err
		}
		if registered[tf{rec.Tenant, rec.File}] > rec.Released {
			return nil // registered again since
		}
		_, err := tx.ExecContext(b.ctx, `INSERT INTO file_releases(tenant, hash, released) VALUES (?, ?, ?)
			ON CONFLICT(tenant, hash) DO UPDATE SET released = CASE WHEN excluded.released > file_releases.released THEN excluded.released ELSE file_releases.released END`, rec.Tenant, rec.File, rec.Released)
		return err
	})
}

// dropUnreachableCommits drops, in every repo, the commits no ref reaches.
func (b *builder) dropUnreachableCommits(tx *sql.Tx) error {
	repos, err := queryStrings(b.ctx, tx, `SELECT tenant || '/' || type || '/' || name FROM repos`)
	if err != nil {
		return err
	}
	for _, r := range repos {
		parts := strings.SplitN(r, "/", 3)
		id := RepoID{Tenant: parts[0], Type: parts[1], Name: parts[2]}
		refs, err := repoRefs(b.ctx, tx, id)
		if err != nil {
			return err
		}
		gone, err := unreachableAfter(b.ctx, tx, id, refs, nil)
		if err != nil {
			return err
		}
		if err := dropCommits(b.ctx, tx, id, gone); err != nil {
			return err
		}
	}
	return nil
}

// dropFilesMissingXorbs drops the files that name a xorb the index (rebuilt
// from the bucket) does not have.
func (b *builder) dropFilesMissingXorbs(tx *sql.Tx) error {
	g := newRefGraph()
	if err := g.readFiles(b.ctx, tx); err != nil {
		return err
	}
	have := map[string]bool{}
	present := func(x string) (bool, error) {
		if ok, seen := have[x]; seen {
			return ok, nil
		}
		var one int
		err := tx.QueryRowContext(b.ctx, `SELECT 1 FROM xorbs WHERE hash = ?`, x).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		have[x] = err == nil
		return err == nil, nil
	}
	for tenant, files := range g.files {
		for hash, f := range files {
			for _, x := range f.xorbs {
				ok, err := present(x.String())
				if err != nil {
					return err
				}
				if !ok {
					if _, err := tx.ExecContext(b.ctx, `DELETE FROM files WHERE tenant = ? AND hash = ?`, tenant, hash); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	return nil
}

// dropReleasedFiles drops the files their tenant released that no
// revision references.
func (b *builder) dropReleasedFiles(tx *sql.Tx) error {
	tenants, err := queryStrings(b.ctx, tx, `SELECT DISTINCT tenant FROM file_releases`)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		rev, err := loadRevisions(b.ctx, tx, t, nil)
		if err != nil {
			return err
		}
		files, err := queryStrings(b.ctx, tx, `SELECT hash FROM file_releases WHERE tenant = ?`, t)
		if err != nil {
			return err
		}
		for _, f := range files {
			if len(rev.files[f]) > 0 {
				continue
			}
			if _, err := tx.ExecContext(b.ctx, `DELETE FROM files WHERE tenant = ? AND hash = ?`, t, f); err != nil {
				return err
			}
		}
	}
	return nil
}
