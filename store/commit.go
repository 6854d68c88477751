package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"openxet/gitobj"
)

// Commits. A commit is a list of changes applied to a branch's head: Commit
// checks them against the head as it is (writing nothing, so a commit the
// head refuses leaves no object), stores the regular files' contents, and
// then, in one index transaction, applies them to the head the branch has
// at that moment, checks the new tree's files against retention, writes the
// commit record and moves the branch. The head may have moved between the
// check and the transaction; the changes apply to the new head unless the
// commit named the parent it expects.

// ChangeOp is what one Change of a commit does.
type ChangeOp int

const (
	// PutFile puts Change.Entry at Change.Path, replacing the file there.
	PutFile ChangeOp = iota + 1
	// DeleteFile deletes the file at Change.Path (ErrEntryNotFound when
	// there is none).
	DeleteFile
	// DeleteFolder deletes every file under Change.Path + "/"
	// (ErrEntryNotFound when there is none).
	DeleteFolder
)

// Change is one operation of a commit.
type Change struct {
	Op ChangeOp
	// Path is the file's (or for DeleteFolder the folder's) path in the
	// repo, without a leading or trailing "/".
	Path string
	// Entry is the file PutFile puts (its Path is set to Path).
	Entry TreeEntry
	// Content is the bytes of a regular file PutFile puts (Entry.XetHash
	// ""), stored as the blob Entry.SHA256 names before the index changes;
	// nil when that blob is already stored (PutBlob).
	Content []byte
}

// NewCommit is what Commit applies to a branch.
type NewCommit struct {
	// Parent is the head the branch must have (ErrRefMoved otherwise);
	// "" applies the changes to whatever head the branch has.
	Parent               string
	Summary, Description string
	Changes              []Change
	// Author is who makes the commit; none: the repo's tenant
	// (TenantAuthor).
	Author Person
}

// ErrEntryNotFound means a commit deletes a file or folder the branch's
// head does not have. It is an ErrNotFound.
var ErrEntryNotFound = fmt.Errorf("entry %w", ErrNotFound)

// ErrNoBranch means a commit names a branch the repo does not have. It is
// an ErrNotFound.
var ErrNoBranch = fmt.Errorf("branch %w", ErrNotFound)

// ErrNoRepo means the repo a write names is not there (it was deleted
// while the write was checked). It is an ErrNotFound.
var ErrNoRepo = fmt.Errorf("repo %w", ErrNotFound)

// Commit applies nc's changes to the head of branch and records the result
// as a new commit on it, which it returns. Errors, each before anything is
// written: ErrNotBranch when branch names a tag or a ref under refs/;
// ErrBadRefName for a name ValidRefName refuses; ErrNoBranch when the repo
// has no such branch; ErrRefMoved when nc.Parent is set and is not the
// head; ErrEntryNotFound when a deletion names nothing. A file the tenant
// released since the caller looked it up is ErrNotFound, a regular file
// being collected ErrCollecting.
func (s *Store) Commit(ctx context.Context, id RepoID, branch string, nc NewCommit) (Commit, error) {
	if err := commitBranchName(branch); err != nil {
		return Commit{}, err
	}
	nc.Changes = slices.Clone(nc.Changes)
	for i, ch := range nc.Changes {
		if ch.Op < PutFile || ch.Op > DeleteFolder || ch.Path == "" {
			return Commit{}, fmt.Errorf("commit to %s of %s: change %+v has no operation or path", branch, id, ch)
		}
		// The git blob id of a file is its LFS pointer's (a Xet file) or
		// its content's, whatever the caller says.
		switch {
		case ch.Op != PutFile:
		case ch.Entry.XetHash != "":
			nc.Changes[i].Entry.GitOID = gitobj.BlobID(gitobj.LFSPointer(ch.Entry.SHA256, ch.Entry.SizeBytes))
		case ch.Content != nil:
			nc.Changes[i].Entry.GitOID = gitobj.BlobID(ch.Content)
		}
	}
	// Against the head as it is, before anything is written. A head that
	// moved under this read is no refusal of a commit without a parent:
	// the transaction applies the changes to the head it finds.
	if _, _, err := applyToHead(ctx, s.db, id, branch, nc); err != nil && (nc.Parent != "" || !errors.Is(err, ErrRefMoved)) {
		return Commit{}, err
	}
	stored := map[string]bool{}
	for _, ch := range nc.Changes {
		if ch.Op != PutFile || ch.Content == nil || ch.Entry.XetHash != "" || stored[ch.Entry.SHA256] {
			continue
		}
		if err := s.PutBlob(ctx, ch.Entry.SHA256, ch.Content); err != nil {
			return Commit{}, err
		}
		stored[ch.Entry.SHA256] = true
	}
	if err := s.step("commit checked"); err != nil {
		return Commit{}, err
	}
	var c Commit
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		head, tree, err := applyToHead(ctx, tx, id, branch, nc)
		if err != nil {
			return err
		}
		now := s.now().UTC()
		if err := checkNewTree(ctx, tx, id, head.Tree, tree, now.Unix()); err != nil {
			return err
		}
		c = Commit{Parent: head.SHA, Summary: nc.Summary, Description: nc.Description, Created: now, Tree: tree, Author: nc.Author}
		if c.Author == (Person{}) {
			c.Author = TenantAuthor(id.Tenant)
		}
		if err := makeGitCommit(&c); err != nil {
			return fmt.Errorf("commit to %s of %s: %w", branch, id, err)
		}
		// The commit record goes before the index has the commit: reindex
		// never finds a head without its record.
		rec, _ := json.Marshal(commitRecord{Repo: id, Commit: c})
		if _, err := s.writeObject(ctx, id.prefix()+"commits/"+c.SHA+".json", rec, typeJSON, false); err != nil {
			return fmt.Errorf("write commit: %w", err)
		}
		if err := insertCommit(ctx, tx, id, c); err != nil {
			return err
		}
		if err := setRef(ctx, tx, id, branch, c.SHA); err != nil {
			return err
		}
		// The ref record goes to the bucket before the index moves the
		// ref, while this transaction holds it: the bucket is never behind
		// what the index serves. A bucket that fails here fails the commit
		// (the transaction rolls back, nothing is applied); only a failure
		// of the index's own COMMIT can leave the bucket one commit ahead,
		// a commit no client was told of, which reindex --check reports
		// and a reindex would apply.
		rr, _ := json.Marshal(refRecord{RepoID: id, Ref: branch, Commit: c.SHA})
		if _, err := s.writeObject(ctx, id.prefix()+"refs/"+HashName(branch)+".json", rr, typeJSON, false); err != nil {
			return fmt.Errorf("write ref %s: %w", branch, err)
		}
		return nil
	})
	if err != nil {
		return Commit{}, err
	}
	return c, nil
}

// commitBranchName refuses a name a commit cannot go to: a tag, another
// ref under refs/ (a pull request), or a name that is no branch name.
func commitBranchName(branch string) error {
	if tag, ok := strings.CutPrefix(branch, "refs/tags/"); ok {
		return fmt.Errorf("%s is a tag: %w: tags cannot be committed to, only branches", tag, ErrNotBranch)
	}
	if strings.HasPrefix(branch, "refs/") {
		return fmt.Errorf("%s: %w: commits go to branches", branch, ErrNotBranch)
	}
	return ValidRefName(branch)
}

// applyToHead reads the head of branch through q and applies nc's changes
// to its tree: the head and the new tree, sorted by path.
func applyToHead(ctx context.Context, q queryer, id RepoID, branch string, nc NewCommit) (Commit, []TreeEntry, error) {
	var sha string
	err := q.QueryRowContext(ctx, `SELECT commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`,
		id.Tenant, id.Type, id.Name, branch).Scan(&sha)
	if errors.Is(err, sql.ErrNoRows) {
		var one int
		err := q.QueryRowContext(ctx, `SELECT 1 FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref = ?`,
			id.Tenant, id.Type, id.Name, TagRef(branch)).Scan(&one)
		if err == nil {
			return Commit{}, nil, fmt.Errorf("%s is a tag of %s: %w: tags cannot be committed to, only branches", branch, id, ErrNotBranch)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Commit{}, nil, fmt.Errorf("ref %s: %w", branch, err)
		}
		if gone, err := repoGone(ctx, q, id); err != nil || gone {
			return Commit{}, nil, cmp.Or(err, fmt.Errorf("%s: %w", id, ErrNoRepo))
		}
		return Commit{}, nil, fmt.Errorf("%s of %s: %w", branch, id, ErrNoBranch)
	}
	if err != nil {
		return Commit{}, nil, fmt.Errorf("ref %s: %w", branch, err)
	}
	if nc.Parent != "" && nc.Parent != sha && isCommitID(nc.Parent) {
		// An id the head had before it had its git id names it too.
		alias, err := aliasOf(ctx, q, id, nc.Parent)
		if err != nil {
			return Commit{}, nil, fmt.Errorf("parent %s: %w", nc.Parent, err)
		}
		if alias == sha {
			nc.Parent = sha
		}
	}
	if nc.Parent != "" && nc.Parent != sha {
		return Commit{}, nil, fmt.Errorf("parent commit %s is not the head of %s (%s): %w", nc.Parent, branch, sha, ErrRefMoved)
	}
	head := Commit{SHA: sha}
	var blob []byte
	err = q.QueryRowContext(ctx, `SELECT tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
		id.Tenant, id.Type, id.Name, sha).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		// Read outside a transaction (Commit's check before it writes),
		// the head can go between the two reads: the repo was deleted, or
		// the branch moved and its old head was dropped.
		if gone, err := repoGone(ctx, q, id); err != nil || gone {
			return Commit{}, nil, cmp.Or(err, fmt.Errorf("%s: %w", id, ErrNoRepo))
		}
		return Commit{}, nil, fmt.Errorf("head %s of %s moved while the commit was checked: %w", sha, branch, ErrRefMoved)
	}
	if err != nil {
		return Commit{}, nil, fmt.Errorf("head %s of %s: %w", sha, branch, err)
	}
	if err := decodeTree(blob, &head.Tree); err != nil {
		return Commit{}, nil, fmt.Errorf("tree of %s: %w", sha, err)
	}
	tree, err := applyChanges(head.Tree, nc.Changes)
	if err != nil {
		return Commit{}, nil, fmt.Errorf("commit to %s of %s: %w", branch, id, err)
	}
	return head, tree, nil
}

// repoGone reports whether the repo id is not in the index.
func repoGone(ctx context.Context, q queryer, id RepoID) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM repos WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// applyChanges applies changes in order to tree (which it does not change)
// and returns the result sorted by path. A deletion of a file or folder
// that is not there (at that point of the list) is ErrEntryNotFound.
func applyChanges(tree []TreeEntry, changes []Change) ([]TreeEntry, error) {
	files := make(map[string]TreeEntry, len(tree)+len(changes))
	for _, e := range tree {
		files[e.Path] = e
	}
	for _, ch := range changes {
		switch ch.Op {
		case PutFile:
			e := ch.Entry
			e.Path = ch.Path
			if old, ok := files[ch.Path]; ok && e.Mode == "" {
				e.Mode = old.Mode // new content keeps the file's mode, as in git
			}
			files[ch.Path] = e
		case DeleteFile:
			if _, ok := files[ch.Path]; ok {
				delete(files, ch.Path)
				continue
			}
			// A deletedFile naming a folder deletes the folder, as the
			// Hub does (huggingface_hub's delete_file of a folder's path).
			if deleteFolder(files, ch.Path) == 0 {
				return nil, fmt.Errorf("no file %s to delete: %w", ch.Path, ErrEntryNotFound)
			}
		case DeleteFolder:
			if deleteFolder(files, ch.Path) == 0 {
				return nil, fmt.Errorf("no folder %s to delete: %w", ch.Path, ErrEntryNotFound)
			}
		default:
			return nil, fmt.Errorf("change of %s: unknown operation %d", ch.Path, ch.Op)
		}
	}
	out := make([]TreeEntry, 0, len(files))
	for _, e := range files {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	if err := fileFolderClash(out); err != nil {
		return nil, err
	}
	return out, nil
}

// deleteFolder deletes every file under folder dir from files and returns
// how many it deleted.
func deleteFolder(files map[string]TreeEntry, dir string) int {
	prefix, n := dir+"/", 0
	for p := range files {
		if strings.HasPrefix(p, prefix) {
			delete(files, p)
			n++
		}
	}
	return n
}

// ErrPathClash means a tree would hold a file and a folder of one name
// (fd and fd/child): git cannot record it and no client can check it out.
var ErrPathClash = errors.New("a file and a folder of one name")

// fileFolderClash refuses a tree, sorted by path, in which a file's path
// is also a folder of another file's.
func fileFolderClash(tree []TreeEntry) error {
	files := make(map[string]bool, len(tree))
	for _, e := range tree {
		files[e.Path] = true
	}
	for _, e := range tree {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			if files[dir] {
				return fmt.Errorf("%w: %s is a file, so %s cannot be in a folder of that name", ErrPathClash, dir, e.Path)
			}
		}
	}
	return nil
}

// checkNewTree is Commit's hook, in its transaction: every xet file the new
// tree adds to the head's must still be retained by the tenant (a release
// may have dropped it since the commit looked it up), and every regular
// file it adds is touched (refused while being collected).
func checkNewTree(ctx context.Context, tx *sql.Tx, id RepoID, head, tree []TreeEntry, now int64) error {
	old := make(map[string]TreeEntry, len(head))
	for _, e := range head {
		old[e.Path] = e
	}
	for _, e := range tree {
		if o, ok := old[e.Path]; ok && o.XetHash == e.XetHash && o.SHA256 == e.SHA256 {
			continue // the head retains it
		}
		if e.XetHash != "" {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM files WHERE tenant = ? AND hash = ?`, id.Tenant, e.XetHash).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("file %s (%s) was released before the commit; upload it again: %w", e.Path, e.XetHash, ErrNotFound)
			}
			if err != nil {
				return err
			}
		} else if e.SHA256 != "" {
			// The commit stored it (PutBlob touched it) before this
			// transaction; a blob whose row is gone was collected since
			// (nothing referenced it yet), and a commit naming it would name
			// a missing object: the client stores it again.
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM gc_objects WHERE key = ?`, "blobs/"+e.SHA256).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("blob %s of %s was collected after it was stored; store it and commit again: %w", e.SHA256, e.Path, ErrCollecting)
			}
			if err != nil {
				return err
			}
			if err := touchTx(ctx, tx, now, "blobs/"+e.SHA256); err != nil {
				return err
			}
		}
	}
	return nil
}
