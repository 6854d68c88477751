package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"openxet/store/accounts"
	"openxet/xet"
)

// Repo settings, moves and duplicates (the Hub's update_repo_settings,
// move_repo and duplicate_repo). Each writes the bucket first (the records
// reindex reads), then changes the index in one transaction.

// ErrBadSetting means a repo setting has a value the store does not know.
var ErrBadSetting = errors.New("invalid repo setting")

// RepoSettings are the settings a change sets; nil fields stay as they are.
type RepoSettings struct {
	// Visibility is one of Visibilities.
	Visibility *string
	// Gated is "auto", "manual", or "" (not gated).
	Gated *string
}

// SetRepoSettings changes a repo's settings and returns its record;
// ErrNotFound for no such repo, ErrBadSetting for a value out of range.
// Visibility decides who else may read the repo (Repo.Shared,
// docs/sharing.md).
func (s *Store) SetRepoSettings(ctx context.Context, id RepoID, set RepoSettings) (Repo, error) {
	if v := set.Visibility; v != nil {
		if err := checkVisibility(*v); err != nil {
			return Repo{}, err
		}
	}
	if g := set.Gated; g != nil && *g != "" && *g != "auto" && *g != "manual" {
		return Repo{}, fmt.Errorf("%w: gated %q (want auto, manual or false)", ErrBadSetting, *g)
	}
	r, err := s.Repo(ctx, id)
	if err != nil {
		return Repo{}, err
	}
	if set.Visibility != nil {
		r.Visibility, r.Private = *set.Visibility, *set.Visibility == "private"
	}
	if set.Gated != nil {
		r.Gated = *set.Gated
	}
	rec, _ := json.Marshal(r)
	if _, err := s.writeObject(ctx, id.prefix()+"repo.json", rec, typeJSON, false); err != nil {
		return Repo{}, fmt.Errorf("settings of %s: %w", id, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE repos SET private = ?, visibility = ?, gated = ? WHERE tenant = ? AND type = ? AND name = ?`,
			boolInt(r.Private), r.Visibility, r.Gated, id.Tenant, id.Type, id.Name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("repo %s: %w", id, ErrNotFound)
		}
		return nil
	})
	return r, err
}

// repoHistory is every commit and ref of a repo, from the index.
type repoHistory struct {
	commits []Commit
	refs    map[string]string // ref → commit sha
}

// HistoryFiles is every Xet file a commit of id's history names, once
// each, in the order the history lists them: what a duplicate of id into
// another tenant copies first (DuplicateRepo).
func (s *Store) HistoryFiles(ctx context.Context, id RepoID) ([]FileCopy, error) {
	h, err := s.history(ctx, id)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []FileCopy
	for _, c := range h.commits {
		for _, e := range c.Tree {
			if e.XetHash == "" || seen[e.XetHash] {
				continue
			}
			seen[e.XetHash] = true
			x, err := xet.ParseHash(e.XetHash)
			if err != nil {
				return nil, fmt.Errorf("commit %s of %s names %s with Xet hash %q: %w", c.SHA, id, e.Path, e.XetHash, err)
			}
			out = append(out, FileCopy{Hash: x, SHA256: e.SHA256})
		}
	}
	return out, nil
}

func (s *Store) history(ctx context.Context, id RepoID) (repoHistory, error) {
	h := repoHistory{refs: map[string]string{}}
	aliases := map[string][]string{}
	err := eachRow(ctx, s.db, `SELECT old_sha, sha FROM commit_aliases WHERE tenant = ? AND type = ? AND name = ? ORDER BY old_sha`, func(r *sql.Rows) error {
		var old, sha string
		if err := r.Scan(&old, &sha); err != nil {
			return err
		}
		aliases[sha] = append(aliases[sha], old)
		return nil
	}, id.Tenant, id.Type, id.Name)
	if err != nil {
		return h, fmt.Errorf("commit aliases of %s: %w", id, dbErr(err))
	}
	rows, err := s.query(ctx, `SELECT sha, parent, summary, description, created, tree, object FROM commits WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return h, fmt.Errorf("commits of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			c       Commit
			created int64
			tree    []byte
		)
		if err := rows.Scan(&c.SHA, &c.Parent, &c.Summary, &c.Description, &created, &tree, &c.Object); err != nil {
			return h, fmt.Errorf("commits of %s: %w", id, dbErr(err))
		}
		c.Created = time.Unix(0, created).UTC()
		c.Aliases = aliases[c.SHA]
		readAuthor(&c)
		if err := decodeTree(tree, &c.Tree); err != nil {
			return h, fmt.Errorf("tree of %s: %w", c.SHA, err)
		}
		h.commits = append(h.commits, c)
	}
	if err := dbErr(rows.Err()); err != nil {
		return h, err
	}
	refs, err := s.query(ctx, `SELECT ref, commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	if err != nil {
		return h, fmt.Errorf("refs of %s: %w", id, err)
	}
	defer refs.Close()
	for refs.Next() {
		var ref, sha string
		if err := refs.Scan(&ref, &sha); err != nil {
			return h, dbErr(err)
		}
		h.refs[ref] = sha
	}
	return h, dbErr(refs.Err())
}

// writeRepoRecords writes the bucket records of repo r with history h:
// commits and refs first, repo.json last (reindex takes a folder for a
// repo only once its repo.json is there).
func (s *Store) writeRepoRecords(ctx context.Context, r Repo, h repoHistory) error {
	for _, c := range h.commits {
		rec, _ := json.Marshal(commitRecord{Repo: r.RepoID, Commit: c})
		if _, err := s.writeObject(ctx, r.prefix()+"commits/"+c.SHA+".json", rec, typeJSON, false); err != nil {
			return fmt.Errorf("write commit %s of %s: %w", c.SHA, r.RepoID, err)
		}
	}
	for ref, sha := range h.refs {
		rr, _ := json.Marshal(refRecord{RepoID: r.RepoID, Ref: ref, Commit: sha})
		if _, err := s.writeObject(ctx, r.prefix()+"refs/"+HashName(ref)+".json", rr, typeJSON, false); err != nil {
			return fmt.Errorf("write ref %s of %s: %w", ref, r.RepoID, err)
		}
	}
	rec, _ := json.Marshal(r)
	if _, err := s.writeObject(ctx, r.prefix()+"repo.json", rec, typeJSON, false); err != nil {
		return fmt.Errorf("write repo %s: %w", r.RepoID, err)
	}
	return nil
}

// insertHistory indexes history h as repo id's, touching the regular
// files' blobs so that a collection pass in flight keeps them.
func insertHistory(ctx context.Context, tx *sql.Tx, id RepoID, h repoHistory, now int64) error {
	blobs := map[string]bool{}
	for _, c := range h.commits {
		if err := insertCommit(ctx, tx, id, c); err != nil {
			return err
		}
		for _, e := range c.Tree {
			if e.XetHash == "" && e.SHA256 != "" {
				blobs["blobs/"+e.SHA256] = true
			}
		}
	}
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := touchTx(ctx, tx, now, keys...); err != nil {
		return err
	}
	for ref, sha := range h.refs {
		if err := setRef(ctx, tx, id, ref, sha); err != nil {
			return err
		}
	}
	return nil
}

// copySource reads what a move or a duplicate copies from a repo, its
// record and its history, once to is checked free (checkTarget).
func (s *Store) copySource(ctx context.Context, from, to RepoID) (Repo, repoHistory, error) {
	r, err := s.Repo(ctx, from)
	if err != nil {
		return Repo{}, repoHistory{}, err
	}
	if err := s.checkTarget(ctx, to); err != nil {
		return Repo{}, repoHistory{}, err
	}
	h, err := s.history(ctx, from)
	return r, h, err
}

// checkVisibility refuses a visibility out of range (ErrBadSetting).
func checkVisibility(v string) error {
	if !slices.Contains(Visibilities, v) {
		return fmt.Errorf("%w: visibility %q (want one of %s)", ErrBadSetting, v, strings.Join(Visibilities, ", "))
	}
	return nil
}

// checkTarget refuses a target name that is taken or not valid.
func (s *Store) checkTarget(ctx context.Context, to RepoID) error {
	if err := accounts.ValidTenant(to.Tenant); err != nil {
		return err
	}
	if err := ValidRepoName(to.Name); err != nil {
		return err
	}
	if _, err := s.Repo(ctx, to); err == nil {
		return fmt.Errorf("%s: %w", to, ErrRepoExists)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// repoTaken reports, inside tx, whether a repo named to exists.
func repoTaken(ctx context.Context, tx *sql.Tx, to RepoID) error {
	return repoTakenBut(ctx, tx, to, RepoID{})
}

// repoTakenBut is repoTaken for a name that may be taken by except (a repo
// renamed to its own name in another case). A name is taken by a repo of
// the same name in any letter case (FoldRepoID).
func repoTakenBut(ctx context.Context, tx *sql.Tx, to, except RepoID) error {
	if except.Name == to.Name {
		except = RepoID{} // not another case: the name itself is taken
	}
	var name string
	err := tx.QueryRowContext(ctx, `SELECT name FROM repos WHERE tenant = ? AND type = ? AND lower(name) = lower(?) AND name <> ?`,
		to.Tenant, to.Type, to.Name, except.Name).Scan(&name)
	if err == nil && name == to.Name {
		return fmt.Errorf("%s: %w", to, ErrRepoExists)
	}
	if err == nil {
		return fmt.Errorf("%s: %w: %s/%s differs from it only in letter case", to, ErrRepoExists, to.Tenant, name)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// MoveRepo renames a repo within its tenant and type, with its whole
// history (commit ids stay). ErrNotFound for no such repo, ErrRepoExists
// when to is taken, ErrBadRepoName for a bad name. The old name is free
// afterwards; MovedTo tells where it went until a repo takes that name
// again. The bucket gets the records under the new name first, then the
// index moves, then the old records go (repo.json first) and a move record
// takes their place: a crash in between can leave both names in the
// bucket, which a reindex would bring back; deleting the unwanted one
// settles it.
func (s *Store) MoveRepo(ctx context.Context, from, to RepoID) (Repo, error) {
	if from.Tenant != to.Tenant || from.Type != to.Type {
		return Repo{}, fmt.Errorf("move %s to %s: %w: a repo moves within its tenant and type", from, to, ErrBadRepoName)
	}
	r, h, err := s.copySource(ctx, from, to)
	if err != nil {
		return Repo{}, err
	}
	moved := r
	moved.RepoID = to
	if err := s.clearMoveRecord(ctx, to); err != nil {
		return Repo{}, err
	}
	if err := s.writeRepoRecords(ctx, moved, h); err != nil {
		return Repo{}, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := repoTakenBut(ctx, tx, to, from); err != nil {
			return err
		}
		if err := insertMove(ctx, tx, from, to.Name); err != nil {
			return err
		}
		if err := deleteMove(ctx, tx, to); err != nil {
			return err
		}
		for _, t := range []string{"repos", "commits", "refs", "commit_aliases"} {
			res, err := tx.ExecContext(ctx, `UPDATE `+t+` SET name = ? WHERE tenant = ? AND type = ? AND name = ?`, to.Name, from.Tenant, from.Type, from.Name)
			if err != nil {
				return fmt.Errorf("move %s: %w", t, err)
			}
			if n, _ := res.RowsAffected(); t == "repos" && n == 0 {
				return fmt.Errorf("repo %s: %w", from, ErrNotFound)
			}
		}
		return nil
	})
	if err != nil {
		return Repo{}, err
	}
	keys, err := s.bucket.ListKeys(ctx, from.prefix())
	if err != nil {
		return moved, err
	}
	sort.SliceStable(keys, func(i, j int) bool { return strings.HasSuffix(keys[i], "/repo.json") })
	for _, k := range keys {
		if err := s.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
			return moved, fmt.Errorf("delete %s: %w", k, bucketErr(err))
		}
	}
	rec, _ := json.Marshal(moveRecord{From: from, To: to.Name})
	if _, err := s.writeObject(ctx, from.prefix()+movedRecord, rec, typeJSON, false); err != nil {
		return moved, fmt.Errorf("write the move record of %s: %w", from, err)
	}
	return moved, nil
}

// movedRecord is the bucket record, in the folder of a repo's old name,
// that says where a moved repo went.
const movedRecord = "moved.json"

type moveRecord struct {
	From RepoID `json:"from"`
	To   string `json:"moved_to"`
}

func insertMove(ctx context.Context, tx *sql.Tx, from RepoID, to string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO repo_moves(tenant, type, name, moved_to) VALUES (?, ?, ?, ?)
		ON CONFLICT(tenant, type, name) DO UPDATE SET moved_to = excluded.moved_to`, from.Tenant, from.Type, from.Name, to)
	if err != nil {
		return fmt.Errorf("index the move of %s: %w", from, err)
	}
	return nil
}

func deleteMove(ctx context.Context, tx *sql.Tx, id RepoID) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM repo_moves WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name)
	return err
}

// clearMoveRecord deletes the move record of a name a repo is about to
// take again (a new repo, a move or a duplicate to it): a repo of that
// name wins over where an older one went.
func (s *Store) clearMoveRecord(ctx context.Context, id RepoID) error {
	if err := s.bucket.Delete(ctx, id.prefix()+movedRecord); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete the move record of %s: %w", id, bucketErr(err))
	}
	return nil
}

// maxMoveHops bounds how many moves MovedTo follows.
const maxMoveHops = 16

// MovedTo returns the repo a name was moved to, following later moves of
// that repo to where it is now; ErrNotFound when the name was not moved,
// or its repo was deleted since.
func (s *Store) MovedTo(ctx context.Context, id RepoID) (RepoID, error) {
	cur := id
	for range maxMoveHops {
		var to string
		err := s.queryRow(ctx, `SELECT moved_to FROM repo_moves WHERE tenant = ? AND type = ? AND name = ?`, cur.Tenant, cur.Type, cur.Name).Scan(&to)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return RepoID{}, fmt.Errorf("moves of %s: %w", cur, err)
		}
		cur.Name = to
		if _, err := s.Repo(ctx, cur); err == nil {
			return cur, nil
		} else if !errors.Is(err, ErrNotFound) {
			return RepoID{}, err
		}
	}
	return RepoID{}, fmt.Errorf("moves of %s: %w", id, ErrNotFound)
}

// DuplicateRepo copies a repo, its whole history, branches and tags, to a
// new repo. It copies no file: the duplicate's trees name the same Xet
// files and blobs, which to's tenant must already hold, so it costs no
// bytes and no quota. Within a tenant that is always so; into another
// tenant, the source must be Shared (else ErrNotFound, as for any reader)
// and the caller first registers the source's files for to's tenant with
// CopyFiles (HistoryFiles lists them): a Xet file to's tenant does not
// hold refuses the duplicate (ErrNotFound), nothing changed. visibility ""
// keeps the source's. Errors as MoveRepo's.
func (s *Store) DuplicateRepo(ctx context.Context, from, to RepoID, visibility string) (Repo, error) {
	if visibility != "" {
		if err := checkVisibility(visibility); err != nil {
			return Repo{}, err
		}
	}
	src, h, err := s.copySource(ctx, from, to)
	if err != nil {
		return Repo{}, err
	}
	if from.Tenant != to.Tenant && !src.Shared() {
		return Repo{}, fmt.Errorf("repo %s: %w", from, ErrNotFound)
	}
	dup := Repo{RepoID: to, Private: src.Private, Created: s.now().UTC().Truncate(time.Second), Visibility: src.Visibility, Gated: src.Gated}
	if visibility != "" {
		dup.Visibility, dup.Private = visibility, visibility == "private"
	}
	if err := s.clearMoveRecord(ctx, to); err != nil {
		return Repo{}, err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := repoTaken(ctx, tx, to); err != nil {
			return err
		}
		// The tenant must hold every Xet file (a deletion of the source
		// in between may have released some; another tenant's files must
		// have been copied).
		seen := map[string]bool{}
		for _, c := range h.commits {
			for _, e := range c.Tree {
				if e.XetHash == "" || seen[e.XetHash] {
					continue
				}
				seen[e.XetHash] = true
				var one int
				err := tx.QueryRowContext(ctx, `SELECT 1 FROM files WHERE tenant = ? AND hash = ?`, to.Tenant, e.XetHash).Scan(&one)
				if errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("file %s (%s) of %s is not held by tenant %s (released during the duplicate, or not copied); duplicate again: %w", e.Path, e.XetHash, from, to.Tenant, ErrNotFound)
				}
				if err != nil {
					return err
				}
			}
		}
		if err := claimRepo(ctx, tx, dup); err != nil {
			return err
		}
		if err := deleteMove(ctx, tx, to); err != nil {
			return err
		}
		if err := insertHistory(ctx, tx, to, h, s.now().Unix()); err != nil {
			return err
		}
		// The bucket's records while the transaction holds the name (as
		// createRepo): one of two racing duplicates writes them.
		return s.writeRepoRecords(ctx, dup, h)
	})
	return dup, err
}
