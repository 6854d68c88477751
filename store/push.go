package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Pushes (docs/git.md): the commits a git push brings, kept byte for byte
// (Commit.Object is the pushed object, Commit.SHA its id), and the refs it
// moves, in one index transaction: every ref moves, or none does. Like a
// commit, a push stores its regular files' blobs first and writes the
// commit records before the index has them, and each ref's record while
// its transaction holds it.

// ErrNotFastForward means a push would move a branch to a commit that does
// not descend from its head.
var ErrNotFastForward = errors.New("not a fast-forward")

// PushUpdate is one ref a push moves.
type PushUpdate struct {
	// Ref as the store names it: a branch's name, or TagRef(tag).
	Ref string
	// Old is the commit the ref has ("" when it is created), New the one
	// it gets.
	Old, New string
	// Commits are the new commits New brings, parents first, each with its
	// whole tree and its Object.
	Commits []Commit
	// Force lets a branch move to a commit that does not descend from Old
	// (git push --force): the commits no ref reaches any more are dropped,
	// and the retention of the files only they referenced, as DeleteRef
	// drops them.
	Force bool
}

// Push applies updates to repo id in one transaction, after storing
// blobs (SHA-256 → content: the pushed regular files the repo may not
// have). Refusals, before anything is applied: ErrRefMoved when a ref is
// not at Old any more (another push or commit moved it); ErrRefExists for
// a tag that is there already; ErrNotFastForward when New does not descend
// from Old and the update is not forced; ErrNotFound for a Xet file the
// tenant released, as for Commit. Deletions are DeleteRef's.
func (s *Store) Push(ctx context.Context, id RepoID, updates []PushUpdate, blobs map[string][]byte) error {
	for _, u := range updates {
		if u.New == "" {
			return fmt.Errorf("push to %s of %s: a deletion is DeleteRef's", u.Ref, id)
		}
		for _, c := range u.Commits {
			if c.Object == nil || !isCommitID(c.SHA) {
				return fmt.Errorf("push to %s of %s: commit %q has no object", u.Ref, id, c.SHA)
			}
		}
	}
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := s.PutBlob(ctx, k, blobs[k]); err != nil {
			return err
		}
	}
	for _, u := range updates {
		for _, c := range u.Commits {
			rec, _ := json.Marshal(commitRecord{Repo: id, Commit: c})
			if _, err := s.writeObject(ctx, id.prefix()+"commits/"+c.SHA+".json", rec, typeJSON, false); err != nil {
				return fmt.Errorf("write commit %s: %w", c.SHA, err)
			}
		}
	}
	if err := s.step("push checked"); err != nil {
		return err
	}
	var written []string
	apply := func(ctx context.Context, tx *sql.Tx) error {
		now := s.now().UTC().Unix()
		for _, u := range updates {
			if err := s.pushRef(ctx, tx, id, u, now); err != nil {
				return err
			}
		}
		// Every ref can move: their records go to the bucket while this
		// transaction holds the refs, after every check (a refusal of the
		// second ref must not leave the first one's record ahead).
		written = written[:0]
		for _, u := range updates {
			written = append(written, u.Ref)
			rr, _ := json.Marshal(refRecord{RepoID: id, Ref: u.Ref, Commit: u.New})
			if _, err := s.writeObject(ctx, id.prefix()+"refs/"+HashName(u.Ref)+".json", rr, typeJSON, false); err != nil {
				return fmt.Errorf("write ref %s: %w", u.Ref, err)
			}
		}
		return nil
	}
	err := s.applyPush(ctx, id, updates, apply)
	if err != nil {
		// A bucket write that failed after others (or an index COMMIT that
		// failed): put the records written back as the index has them.
		for _, ref := range written {
			s.repairRefRecord(context.WithoutCancel(ctx), id, ref)
		}
	}
	return err
}

// applyPush runs apply in one transaction; when a forced update may leave
// commits no ref reaches, through changeRevisions, which drops them and
// releases what only they retained.
func (s *Store) applyPush(ctx context.Context, id RepoID, updates []PushUpdate, apply func(context.Context, *sql.Tx) error) error {
	forced := false
	for _, u := range updates {
		forced = forced || u.Force && u.Old != ""
	}
	if !forced {
		return s.inTx(ctx, func(tx *sql.Tx) error { return apply(ctx, tx) })
	}
	refs, err := repoRefs(ctx, s.db, id)
	if err != nil {
		return err
	}
	pushed := map[string]string{}
	keep := map[string]bool{}
	for _, u := range updates {
		refs[u.Ref] = u.New
		for _, c := range u.Commits {
			pushed[c.SHA] = c.Parent
			for _, e := range c.Tree {
				keep[e.XetHash] = true
			}
		}
	}
	dropped, err := unreachableAfter(ctx, s.db, id, refs, pushed)
	if err != nil {
		return err
	}
	cands, err := s.candidatesAfter(ctx, id, dropped)
	if err != nil {
		return err
	}
	for h := range keep {
		delete(cands, h) // the pushed commits name them
	}
	_, err = s.changeRevisions(ctx, revisionChange{
		tenant:     id.Tenant,
		candidates: cands,
		index: func(ctx context.Context, tx *sql.Tx) error {
			if err := apply(ctx, tx); err != nil {
				return err
			}
			gone, err := dropUnreachable(ctx, tx, id)
			dropped = gone
			return err
		},
		after: func(ctx context.Context) error { return s.deleteCommitRecords(ctx, id, dropped) },
	})
	return err
}

// pushRef applies one update in tx.
func (s *Store) pushRef(ctx context.Context, tx *sql.Tx, id RepoID, u PushUpdate, now int64) error {
	var cur string
	err := tx.QueryRowContext(ctx, `SELECT commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`, id.Tenant, id.Type, id.Name, u.Ref).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("ref %s: %w", u.Ref, err)
	}
	if strings.HasPrefix(u.Ref, "refs/tags/") && cur != "" {
		return fmt.Errorf("tag %s of %s: %w (tags do not move)", strings.TrimPrefix(u.Ref, "refs/tags/"), id, ErrRefExists)
	}
	if cur != u.Old {
		return fmt.Errorf("%s of %s is at %.12s, not %.12s as the push says: %w", u.Ref, id, cur, u.Old, ErrRefMoved)
	}
	if gone, err := repoGone(ctx, tx, id); err != nil || gone {
		return cmp.Or(err, fmt.Errorf("%s: %w", id, ErrNoRepo))
	}
	parents := map[string]string{}
	var prevTree []TreeEntry
	for i, c := range u.Commits {
		parents[c.SHA] = c.Parent
		if i == 0 {
			prevTree = nil
			if c.Parent != "" {
				p, err := commitTreeTx(ctx, tx, id, c.Parent)
				if err != nil {
					return err
				}
				prevTree = p
			}
		}
		if err := checkNewTree(ctx, tx, id, prevTree, c.Tree, now); err != nil {
			return err
		}
		if err := insertCommit(ctx, tx, id, c); err != nil {
			return err
		}
		prevTree = c.Tree
	}
	if u.Old != "" && !u.Force {
		ok, err := descends(ctx, tx, id, u.New, u.Old, parents)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s of %s: %.12s does not descend from %.12s: %w", u.Ref, id, u.New, u.Old, ErrNotFastForward)
		}
	}
	return setRef(ctx, tx, id, u.Ref, u.New)
}

// commitTreeTx is the tree of commit sha of repo id, in tx.
func commitTreeTx(ctx context.Context, tx *sql.Tx, id RepoID, sha string) ([]TreeEntry, error) {
	var blob []byte
	err := tx.QueryRowContext(ctx, `SELECT tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, sha).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("parent %s of %s: %w", sha, id, ErrRefMoved)
	}
	if err != nil {
		return nil, err
	}
	var tree []TreeEntry
	if err := decodeTree(blob, &tree); err != nil {
		return nil, fmt.Errorf("tree of %s: %w", sha, err)
	}
	return tree, nil
}

// descends reports whether commit sha has ancestor old (or is it),
// following parents (the push's new ones, then the index's).
func descends(ctx context.Context, tx *sql.Tx, id RepoID, sha, old string, parents map[string]string) (bool, error) {
	for seen := 0; sha != ""; seen++ {
		if sha == old {
			return true, nil
		}
		if p, ok := parents[sha]; ok {
			sha = p
			continue
		}
		err := tx.QueryRowContext(ctx, `SELECT parent FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, sha).Scan(&sha)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}
