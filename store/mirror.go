package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"openxet/store/accounts"
)

// Mirrored repos (docs/mirror.md, docs/design.md §12). A repo the mirror
// serves is an ordinary repo of the mirror's tenant, written with the same
// records as any other (repo.json, commits/{sha}.json, refs/…), so that
// reindex rebuilds it; what differs is how its commits arrive: a commit is
// the upstream's, with the upstream's sha and tree, recorded as it is
// (RecordCommit), and the Xet files its tree names are registered later,
// when they are first read. Regular files are stored (PutBlob) before the
// commit that names them.

// HasTenant reports whether the index knows a tenant of that name (it has a
// credential, owns bytes, has limits or repos).
func (s *Store) HasTenant(ctx context.Context, name string) (bool, error) {
	var one int
	err := s.queryRow(ctx, `SELECT 1 FROM tenants WHERE name = ?`, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("tenant %s: %w", name, dbErr(err))
	}
	return true, nil
}

// RecordCommit records c, a commit made elsewhere (its SHA and tree as they
// are), in repo id, creating the repo with visibility when it does not
// exist yet, and points each of refs at it. The regular files of c's tree
// must be stored already (PutBlob); they are touched, so that collection
// keeps them. Its Xet files need not be registered yet. Recording a commit
// the repo has again only moves the refs. Order, as for Commit: the repo
// and commit records, then the index, then the ref records (a crash between
// leaves the bucket one ref behind, which reindex repairs to the older
// state).
func (s *Store) RecordCommit(ctx context.Context, id RepoID, visibility string, c Commit, refs ...string) error {
	if err := accounts.ValidTenant(id.Tenant); err != nil {
		return err
	}
	if err := ValidRepoName(id.Name); err != nil {
		return err
	}
	if !isCommitID(c.SHA) {
		return fmt.Errorf("record commit in %s: %q is not a commit id", id, c.SHA)
	}
	if err := checkVisibility(visibility); err != nil {
		return err
	}
	tree := append([]TreeEntry(nil), c.Tree...)
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	c.Tree = tree
	c.Created = c.Created.UTC()
	repo, err := s.Repo(ctx, id)
	created := errors.Is(err, ErrNotFound)
	if err != nil && !created {
		return err
	}
	now := s.now().UTC()
	if created {
		repo = Repo{RepoID: id, Private: visibility == "private", Created: now.Truncate(time.Second), Visibility: visibility}
		rec, _ := json.Marshal(repo)
		if _, err := s.writeObject(ctx, id.prefix()+"repo.json", rec, typeJSON, false); err != nil {
			return fmt.Errorf("create repo %s: %w", id, err)
		}
	}
	rec, _ := json.Marshal(commitRecord{Repo: id, Commit: c})
	if _, err := s.writeObject(ctx, id.prefix()+"commits/"+c.SHA+".json", rec, typeJSON, false); err != nil {
		return fmt.Errorf("write commit %s: %w", c.SHA, err)
	}
	var blobs []string
	for _, e := range c.Tree {
		if e.XetHash == "" && e.SHA256 != "" {
			blobs = append(blobs, "blobs/"+e.SHA256)
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if created {
			if err := insertRepo(ctx, tx, repo); err != nil {
				return err
			}
		}
		for _, b := range blobs {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM gc_objects WHERE key = ?`, b).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%s of commit %s was collected after it was stored; store it again: %w", b, c.SHA, ErrCollecting)
			}
			if err != nil {
				return err
			}
		}
		if err := touchTx(ctx, tx, now.Unix(), blobs...); err != nil {
			return err
		}
		if err := insertCommit(ctx, tx, id, c); err != nil {
			return err
		}
		for _, ref := range refs {
			if err := setRef(ctx, tx, id, ref, c.SHA); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ref := range refs {
		rr, _ := json.Marshal(refRecord{RepoID: id, Ref: ref, Commit: c.SHA})
		if _, err := s.writeObject(ctx, id.prefix()+"refs/"+HashName(ref)+".json", rr, typeJSON, false); err != nil {
			return fmt.Errorf("write ref %s: %w", ref, err)
		}
	}
	return nil
}

// RefsTo lists the refs of repo id that point at commit sha.
func (s *Store) RefsTo(ctx context.Context, id RepoID, sha string) ([]string, error) {
	refs, err := repoRefs(ctx, s.db, id)
	if err != nil {
		return nil, err
	}
	var out []string
	for ref, at := range refs {
		if at == sha {
			out = append(out, ref)
		}
	}
	sort.Strings(out)
	return out, nil
}

// EntryByHash finds a Xet file of repo r by its hash: the commit whose tree
// names it (the first found) and its entry. ErrNotFound when no revision of
// r has it.
func (s *Store) EntryByHash(ctx context.Context, r RepoID, hash string) (string, TreeEntry, error) {
	return s.entryWhere(ctx, r, xetHashNeedle(hash), func(e TreeEntry) bool { return e.XetHash == hash })
}

// EntryBySHA256 finds a Xet file of repo r by its SHA-256 (its LFS oid), as
// EntryByHash finds one by its Xet hash.
func (s *Store) EntryBySHA256(ctx context.Context, r RepoID, sha256 string) (string, TreeEntry, error) {
	return s.entryWhere(ctx, r, []byte(`"sha256":"`+sha256+`"`), func(e TreeEntry) bool { return e.XetHash != "" && e.SHA256 == sha256 })
}

// entryWhere is the first entry that match takes of the trees of r's
// commits that hold needle, and its commit.
func (s *Store) entryWhere(ctx context.Context, r RepoID, needle []byte, match func(TreeEntry) bool) (string, TreeEntry, error) {
	rows, err := s.query(ctx, `SELECT sha, tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND instr(tree, ?) > 0`,
		r.Tenant, r.Type, r.Name, needle)
	if err != nil {
		return "", TreeEntry{}, fmt.Errorf("commits of %s: %w", r, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sha string
		var tree []byte
		if err := rows.Scan(&sha, &tree); err != nil {
			return "", TreeEntry{}, fmt.Errorf("commits of %s: %w", r, dbErr(err))
		}
		var entries []TreeEntry
		if err := decodeTree(tree, &entries); err != nil {
			return "", TreeEntry{}, fmt.Errorf("tree of %s of %s: %w", sha, r, err)
		}
		for _, e := range entries {
			if match(e) {
				return sha, e, nil
			}
		}
	}
	if err := dbErr(rows.Err()); err != nil {
		return "", TreeEntry{}, fmt.Errorf("commits of %s: %w", r, err)
	}
	return "", TreeEntry{}, fmt.Errorf("file %s in %s: %w", needle, r, ErrNotFound)
}

// xetHashNeedle is the bytes a stored tree holds where an entry names the
// Xet file hash (json.Marshal of TreeEntry): the trees that may name it
// are found by the index (instr, a byte search; on PostgreSQL the function
// of that name the migrations define), so only those leave it and are
// decoded. A mirror's trees are KiB to MiB each and a relayed plan waits
// for this scan (BenchmarkEntriesByHash).
func xetHashNeedle(hash string) []byte { return []byte(`"xet_hash":"` + hash + `"`) }

// HashEntry is a tree entry of a commit of a repo (EntriesByHash).
type HashEntry struct {
	Repo  RepoID
	SHA   string
	Entry TreeEntry
}

// EntriesByHash returns every tree entry that names the Xet file hash in
// the commits of tenant's repos: the mirror checks that an upstream's
// claims about one content (its size and SHA-256) agree everywhere before
// it relays or stores it.
func (s *Store) EntriesByHash(ctx context.Context, tenant, hash string) ([]HashEntry, error) {
	rows, err := s.query(ctx, `SELECT type, name, sha, tree FROM commits WHERE tenant = ? AND instr(tree, ?) > 0`, tenant, xetHashNeedle(hash))
	if err != nil {
		return nil, fmt.Errorf("commits of %s: %w", tenant, err)
	}
	defer rows.Close()
	var out []HashEntry
	for rows.Next() {
		r := RepoID{Tenant: tenant}
		var sha string
		var tree []byte
		if err := rows.Scan(&r.Type, &r.Name, &sha, &tree); err != nil {
			return nil, fmt.Errorf("commits of %s: %w", tenant, dbErr(err))
		}
		var entries []TreeEntry
		if err := decodeTree(tree, &entries); err != nil {
			return nil, fmt.Errorf("tree of %s of %s: %w", sha, r, err)
		}
		for _, e := range entries {
			if e.XetHash == hash {
				out = append(out, HashEntry{Repo: r, SHA: sha, Entry: e})
			}
		}
	}
	if err := dbErr(rows.Err()); err != nil {
		return nil, fmt.Errorf("commits of %s: %w", tenant, err)
	}
	return out, nil
}

// TenantUsage is the stored bytes the index bills to tenant (0 for a
// tenant it does not know).
func (s *Store) TenantUsage(ctx context.Context, tenant string) (int64, error) {
	var n int64
	err := s.queryRow(ctx, `SELECT usage_bytes FROM tenants WHERE name = ?`, tenant).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("usage of %s: %w", tenant, dbErr(err))
	}
	return n, nil
}
