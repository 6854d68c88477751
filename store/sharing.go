package store

import (
	"bytes"
	"context"
	"fmt"

	"openxet/xet"
)

// Sharing (docs/sharing.md): a repo whose visibility is internal or public
// may be read by every tenant of the deployment; its files are read through
// it, never by hash alone. Every check here reads the index when the
// request is served: a repo made private again is closed to the next read.

// Shared reports whether tenants other than r's may read r: its visibility
// was set, explicitly, to internal or public. A record without a
// visibility (written before sharing) and a protected repo are not.
func (r Repo) Shared() bool {
	return r.Visibility == "internal" || r.Visibility == "public"
}

// SharedFile returns the file of r's tenant whose hash is h, for a reader
// of another tenant: ErrNotFound unless r is Shared and one of its commits
// references h as a Xet file. A file of the owner that no revision of r
// names, or that r named only in revisions since dropped, is not found.
func (s *Store) SharedFile(ctx context.Context, r RepoID, h xet.Hash) (File, error) {
	repo, err := s.Repo(ctx, r)
	if err != nil {
		return File{}, err
	}
	if !repo.Shared() {
		return File{}, fmt.Errorf("repo %s is not shared: %w", r, ErrNotFound)
	}
	ok, err := s.References(ctx, r, h)
	if err != nil {
		return File{}, err
	}
	if !ok {
		return File{}, fmt.Errorf("file %s is not in repo %s: %w", h, r, ErrNotFound)
	}
	return s.File(ctx, r.Tenant, h)
}

// References reports whether a commit of r has a Xet file whose hash is h.
// The commits of a repo are its revisions: every commit a ref reaches, and
// only those (squash and ref deletion drop the others).
func (s *Store) References(ctx context.Context, r RepoID, h xet.Hash) (bool, error) {
	hash := h.String()
	needle := []byte(`"xet_hash":"` + hash + `"`)
	rows, err := s.query(s.lookupCtx(ctx), `SELECT tree FROM commits WHERE tenant = ? AND type = ? AND name = ?`, r.Tenant, r.Type, r.Name)
	if err != nil {
		return false, fmt.Errorf("commits of %s: %w", r, err)
	}
	defer rows.Close()
	for rows.Next() {
		var tree []byte
		if err := rows.Scan(&tree); err != nil {
			return false, fmt.Errorf("commits of %s: %w", r, dbErr(err))
		}
		// The text test skips the trees that cannot hold the hash; a tree
		// that may is decoded, so that only a Xet file's hash counts.
		if !bytes.Contains(tree, needle) {
			continue
		}
		var entries []TreeEntry
		if err := decodeTree(tree, &entries); err != nil {
			return false, fmt.Errorf("tree of a commit of %s: %w", r, err)
		}
		for _, e := range entries {
			if e.XetHash == hash {
				return true, nil
			}
		}
	}
	if err := dbErr(rows.Err()); err != nil {
		return false, fmt.Errorf("commits of %s: %w", r, err)
	}
	return false, nil
}
