package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	fastjson "github.com/segmentio/encoding/json"
)

// The git trees of commits, kept once built (docs/design.md §14): a clone
// walks every commit's trees, and building them from a commit's files
// costs a decode of its whole tree and a pass over every file, where git
// itself reads only the trees a commit changed. So the git server builds a
// commit's trees once, from its files, and keeps them in the index's
// git_trees, each with what it takes to serve the blobs it names. The
// table is a cache of values derived from the commits: a tree's id is the
// hash of its body, and its files are a function of that body (a blob id
// is the hash of its bytes), so rows are shared by every repo, never
// change, and reindex leaves the table out (it fills again as clones run).
// Nothing reaches a row but by its id, and the git server asks only for
// the trees its walk reached from the repo's own commits.

// GitTree is one git tree object and the files it names.
type GitTree struct {
	ID   string
	Body []byte
	// Files are the tree's own file entries (not its subtrees').
	Files []GitTreeFile
}

// GitTreeFile is what a git server needs of a blob a tree names: a regular
// file's content is read by its SHA-256; a pointer (a Xet or LFS file) is
// its git-lfs pointer, made from its SHA-256 and size.
type GitTreeFile struct {
	Blob    string `json:"b"`
	SHA256  string `json:"s"`
	Size    int64  `json:"n"`
	Pointer bool   `json:"p,omitempty"`
	Exec    bool   `json:"x,omitempty"`
}

// CommitObject is the git commit object of commit sha of repo r (its id,
// never an alias), without its tree of files; ErrNotFound when r has no
// such commit. A mirrored commit has no object (nil).
func (s *Store) CommitObject(ctx context.Context, r RepoID, sha string) ([]byte, error) {
	var obj []byte
	err := s.queryRow(ctx, `SELECT object FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
		r.Tenant, r.Type, r.Name, sha).Scan(&obj)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("commit %s of %s: %w", sha, r, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("commit %s of %s: %w", sha, r, err)
	}
	return obj, nil
}

// GitTree is the kept tree of id; ErrNotFound when none is kept.
func (s *Store) GitTree(ctx context.Context, id string) (GitTree, error) {
	t := GitTree{ID: id}
	var files []byte
	err := s.queryRow(ctx, `SELECT body, files FROM git_trees WHERE id = ?`, id).Scan(&t.Body, &files)
	if errors.Is(err, sql.ErrNoRows) {
		return GitTree{}, fmt.Errorf("git tree %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return GitTree{}, fmt.Errorf("git tree %s: %w", id, err)
	}
	if err := fastjson.Unmarshal(files, &t.Files); err != nil {
		return GitTree{}, fmt.Errorf("git tree %s: its files: %w", id, err)
	}
	return t, nil
}

// PutGitTrees keeps trees (those already kept stay as they are), in one
// transaction.
func (s *Store) PutGitTrees(ctx context.Context, trees []GitTree) error {
	rows := make([][]byte, len(trees))
	for i, t := range trees {
		b, err := fastjson.Marshal(t.Files)
		if err != nil {
			return fmt.Errorf("git tree %s: %w", t.ID, err)
		}
		rows[i] = b
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for i, t := range trees {
			if _, err := tx.ExecContext(ctx, `INSERT INTO git_trees(id, body, files) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
				t.ID, t.Body, rows[i]); err != nil {
				return fmt.Errorf("git tree %s: %w", t.ID, err)
			}
		}
		return nil
	})
}
