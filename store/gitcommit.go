package store

import (
	"context"
	"crypto/sha1"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"openxet/gitobj"
)

// Git commit ids (docs/design.md §14). A commit's id is the id of a real
// git commit object: its tree is the git tree of its files (a regular
// file's own blob, a Xet file's LFS pointer: TreeEntry.GitOID), its parent
// the parent's id, its author and committer the Person who made it at its
// time (UTC), its message the summary, a blank line and the description
// (gitobj.Message). The object's body is kept with the commit (Commit.Object,
// the index's commits.object, the bucket's commit record), so it is served
// byte for byte whatever the encoder does later.
//
// Commits made before (format 1) had the SHA-1 of a JSON document as their
// id. They are upgraded once, in the index, when a store first opens it
// (Open, the "git-commit-ids" row of upgrades) and again each time reindex
// rebuilds an index from their records, which stay in the bucket as they
// are: the upgrade is a function of the records alone, so both give the
// same ids. An upgraded commit keeps its old id as an alias
// (commit_aliases), which resolves wherever a revision does (Resolve, a
// commit's expected parent), forever. A mirrored commit already has a git
// id, the upstream's, and is left as it is: it is told from a format 1
// commit by its id, which is not the SHA-1 of its JSON document.

// Person is who made a commit: its git author and committer.
type Person struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// TenantAuthor is the author of the commits a tenant's credentials make,
// and of the commits made before commits had authors (until people have
// accounts: docs/design.md §13).
func TenantAuthor(tenant string) Person {
	return Person{Name: tenant, Email: tenant + "@openxet.invalid"}
}

// ErrBadTree means a commit's tree cannot be a git tree: a path git
// refuses (a component ".", ".." or ".git", an empty one) or two files of
// one path.
var ErrBadTree = errors.New("the tree is no valid git tree")

// gitTree is the git trees of a commit's files.
func gitTree(tree []TreeEntry) (gitobj.Trees, error) {
	files := make([]gitobj.File, len(tree))
	for i, e := range tree {
		oid := e.GitOID
		if oid == "" && e.XetHash != "" {
			oid = gitobj.BlobID(gitobj.LFSPointer(e.SHA256, e.SizeBytes))
		}
		if !isCommitID(oid) {
			return gitobj.Trees{}, fmt.Errorf("%w: %s has no git blob id", ErrBadTree, e.Path)
		}
		if e.Mode != "" && e.Mode != ModeExecutable {
			return gitobj.Trees{}, fmt.Errorf("%w: %s has mode %s", ErrBadTree, e.Path, e.Mode)
		}
		files[i] = gitobj.File{Path: e.Path, Blob: oid, Exec: e.Mode == ModeExecutable}
	}
	t, err := gitobj.BuildTrees(files)
	if err != nil {
		return gitobj.Trees{}, fmt.Errorf("%w: %w", ErrBadTree, err)
	}
	return t, nil
}

// TreeIDs is the git tree id of each folder of c's tree ("" for the top).
func (c Commit) TreeIDs() (map[string]string, error) {
	t, err := gitTree(c.Tree)
	if err != nil {
		return nil, err
	}
	return t.Dirs, nil
}

// makeGitCommit sets c's SHA and Object from its tree, parent, summary,
// description, author and time (to the second, as git records it; c.Created
// keeps its fraction, which orders commits made within one second).
func makeGitCommit(c *Commit) error {
	t, err := gitTree(c.Tree)
	if err != nil {
		return err
	}
	c.Created = c.Created.UTC()
	sig := gitobj.Signature{Name: c.Author.Name, Email: c.Author.Email, When: c.Created.Truncate(time.Second)}
	gc := gitobj.Commit{Tree: t.Root, Author: sig, Committer: sig, Message: gitobj.Message(c.Summary, c.Description)}
	if c.Parent != "" {
		gc.Parents = []string{c.Parent}
	}
	body, err := gc.Encode()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadTree, err)
	}
	c.SHA, c.Object = gitobj.CommitID(body), body
	return nil
}

// readAuthor sets c.Author from c.Object, when it has one.
func readAuthor(c *Commit) {
	if c.Object == nil {
		return
	}
	if gc, err := gitobj.DecodeCommit(c.Object); err == nil {
		c.Author = Person{Name: gc.Author.Name, Email: gc.Author.Email}
	}
}

// formatOneSHA is the id a commit had in format 1: the SHA-1 of a JSON
// document of its parent, message, time and tree. tree is the tree's JSON
// as the index holds it (json.Marshal of the entries), so that the
// document does not change with TreeEntry.
func formatOneSHA(parent, summary, description string, created int64, tree []byte) string {
	b, _ := json.Marshal(struct {
		Parent, Summary, Description string
		Created                      int64
		Tree                         json.RawMessage
	}{parent, summary, description, created, tree})
	h := sha1.Sum(b)
	return hex.EncodeToString(h[:])
}

// upgradeCommitIDs gives every format 1 commit of the index its git id,
// in tx: the commit's row changes id (and its parent's id), the old id
// becomes an alias, and refs follow. It returns how many commits it
// upgraded. It holds one repo's ids and one commit's tree at a time: an
// index of many large trees upgrades in the memory of one.
func upgradeCommitIDs(ctx context.Context, tx *sql.Tx) (int, error) {
	var repos []RepoID
	err := eachRow(ctx, tx, `SELECT DISTINCT tenant, type, name FROM commits WHERE object IS NULL`, func(r *sql.Rows) error {
		var id RepoID
		err := r.Scan(&id.Tenant, &id.Type, &id.Name)
		repos = append(repos, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("upgrade commit ids: %w", err)
	}
	n := 0
	for _, id := range repos {
		done, err := upgradeRepoCommitIDs(ctx, tx, id)
		if err != nil {
			return 0, fmt.Errorf("upgrade commit ids of %s: %w", id, err)
		}
		n += done
	}
	return n, nil
}

// upgradeRepoCommitIDs upgrades the format 1 commits of repo id, parents
// first.
func upgradeRepoCommitIDs(ctx context.Context, tx *sql.Tx, id RepoID) (int, error) {
	parents := map[string]string{} // of the commits without an object
	var shas []string
	err := eachRow(ctx, tx, `SELECT sha, parent FROM commits WHERE tenant = ? AND type = ? AND name = ? AND object IS NULL ORDER BY sha`, func(r *sql.Rows) error {
		var sha, parent string
		err := r.Scan(&sha, &parent)
		parents[sha] = parent
		shas = append(shas, sha)
		return err
	}, id.Tenant, id.Type, id.Name)
	if err != nil {
		return 0, err
	}
	renamed := make(map[string]string, len(shas))
	n := 0
	for _, sha := range shas {
		// Parents first, without recursion: a history is as long as it
		// is (thousands of commits).
		var chain []string
		for c := sha; c != ""; c = parents[c] {
			if _, done := renamed[c]; done {
				break
			}
			if _, legacy := parents[c]; !legacy {
				break
			}
			chain = append(chain, c)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			up, err := upgradeCommit(ctx, tx, id, chain[i], renamed)
			if err != nil {
				return 0, fmt.Errorf("commit %s: %w", chain[i], err)
			}
			if up != chain[i] {
				n++
			}
			renamed[chain[i]] = up
		}
	}
	return n, nil
}

// upgradeCommit gives commit sha of repo id its git id, its parent named
// as renamed says, and returns the id: sha itself for a commit that is not
// of format 1 (a mirrored one), or one whose tree git cannot hold (the
// commits after it keep it as their parent's id).
func upgradeCommit(ctx context.Context, tx *sql.Tx, id RepoID, sha string, renamed map[string]string) (string, error) {
	x := formatOneRow{id: id, sha: sha}
	err := tx.QueryRowContext(ctx, `SELECT parent, summary, description, created, tree FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
		id.Tenant, id.Type, id.Name, sha).Scan(&x.parent, &x.summary, &x.description, &x.created, &x.tree)
	if err != nil {
		return "", err
	}
	if formatOneSHA(x.parent, x.summary, x.description, x.created, x.tree) != sha {
		return sha, nil
	}
	parent := x.parent
	if p, ok := renamed[parent]; ok {
		parent = p
	}
	up := Commit{Parent: parent, Summary: x.summary, Description: x.description, Created: time.Unix(0, x.created), Author: TenantAuthor(id.Tenant)}
	if err := decodeTree(x.tree, &up.Tree); err != nil {
		return "", fmt.Errorf("tree: %w", err)
	}
	if err := makeGitCommit(&up); err != nil {
		return sha, nil
	}
	return up.SHA, renameCommit(ctx, tx, x, up)
}

// formatOneRow is a format 1 commit's row in the index.
type formatOneRow struct {
	id                                RepoID
	sha, parent, summary, description string
	created                           int64
	tree                              []byte
}

// renameCommit gives the commit of row c its git id and object (up's), in
// tx: the row, an alias for the old id, and the refs that named it.
func renameCommit(ctx context.Context, tx *sql.Tx, c formatOneRow, up Commit) error {
	// The bucket may hold the commit in both formats (a record rewritten
	// in place): the row of the git format stays.
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, c.id.Tenant, c.id.Type, c.id.Name, up.SHA).Scan(&one)
	switch {
	case err == nil:
		_, err = tx.ExecContext(ctx, `DELETE FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, c.id.Tenant, c.id.Type, c.id.Name, c.sha)
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, `UPDATE commits SET sha = ?, parent = ?, object = ? WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
			up.SHA, up.Parent, up.Object, c.id.Tenant, c.id.Type, c.id.Name, c.sha)
	}
	if err != nil {
		return err
	}
	if err := insertAliases(ctx, tx, c.id, up.SHA, c.sha); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE refs SET commit_sha = ? WHERE tenant = ? AND type = ? AND name = ? AND commit_sha = ?`,
		up.SHA, c.id.Tenant, c.id.Type, c.id.Name, c.sha)
	return err
}

// insertAliases records olds as other ids of commit sha of repo id.
func insertAliases(ctx context.Context, tx *sql.Tx, id RepoID, sha string, olds ...string) error {
	for _, o := range olds {
		if _, err := tx.ExecContext(ctx, `INSERT INTO commit_aliases(tenant, type, name, old_sha, sha) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			id.Tenant, id.Type, id.Name, o, sha); err != nil {
			return fmt.Errorf("index alias %s of %s: %w", o, sha, err)
		}
	}
	return nil
}

// aliasOf is the commit id that old, an id the commit had before, now
// names in repo id; "" when it is no alias.
func aliasOf(ctx context.Context, q queryer, id RepoID, old string) (string, error) {
	var sha string
	err := q.QueryRowContext(ctx, `SELECT sha FROM commit_aliases WHERE tenant = ? AND type = ? AND name = ? AND old_sha = ?`, id.Tenant, id.Type, id.Name, old).Scan(&sha)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return sha, err
}

// commitAliases is every alias of commit sha of repo id.
func commitAliases(ctx context.Context, q queryer, id RepoID, sha string) ([]string, error) {
	return queryStrings(ctx, q, `SELECT old_sha FROM commit_aliases WHERE tenant = ? AND type = ? AND name = ? AND sha = ? ORDER BY old_sha`, id.Tenant, id.Type, id.Name, sha)
}

// runUpgrades makes the upgrades the index lists as still to make, each in
// one transaction with the removal of its row.
func (s *Store) runUpgrades(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM upgrades WHERE name = 'git-commit-ids'`).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := upgradeCommitIDs(ctx, tx); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM upgrades WHERE name = 'git-commit-ids'`)
		return err
	})
}
