package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	fastjson "github.com/segmentio/encoding/json"

	"openxet/store/accounts"
)

// Repos are the Hub side of openxet: a repo of type model, dataset or space
// under a tenant's namespace, with commits whose trees name files by their
// xet hash (large files) or by a stored blob (small regular files).
//
// Bucket layout, under repos/{sha256(tenant)}/{type}/{name}/:
// repo.json, commits/{sha}.json (each with its whole tree) and
// refs/{sha256(ref)}.json. Small regular file contents live in
// blobs/{sha256}.

// ErrRepoExists means a repo of that name already exists.
var ErrRepoExists = errors.New("repo already exists")

// ErrRefMoved means a commit's parent is no longer the head of its ref.
var ErrRefMoved = errors.New("ref moved")

// RepoTypes are the repo types the Hub API knows.
var RepoTypes = []string{"model", "dataset", "space"}

// ErrBadRepoName means a repo name is not of the allowed form.
var ErrBadRepoName = errors.New("invalid repo name")

var repoNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

// ValidRepoName checks a repo name (the part after the namespace).
func ValidRepoName(name string) error {
	if !repoNameRE.MatchString(name) || strings.Contains(name, "..") || strings.HasSuffix(name, ".git") {
		return fmt.Errorf("%w: %q (want [A-Za-z0-9][A-Za-z0-9._-]{0,95}, not ending in .git)", ErrBadRepoName, name)
	}
	return nil
}

// RepoID names a repo.
type RepoID struct {
	Tenant string `json:"tenant"`
	Type   string `json:"type"`
	Name   string `json:"name"`
}

func (r RepoID) String() string { return r.Tenant + "/" + r.Name }

func (r RepoID) prefix() string {
	return "repos/" + HashName(r.Tenant) + "/" + r.Type + "/" + r.Name + "/"
}

// Repo is a repo's record.
type Repo struct {
	RepoID
	Private bool      `json:"private"`
	Created time.Time `json:"created"`
	// Visibility is one of Visibilities; "" for a record written before
	// settings existed, which reads as Private says (VisibilityOf).
	Visibility string `json:"visibility,omitempty"`
	// Gated is "auto" or "manual" for a gated repo, "" for one that is not.
	Gated string `json:"gated,omitempty"`
}

// Visibilities are the visibilities a repo may have: the Hub's public,
// private and protected (Spaces), and internal (docs/design.md §11).
// Internal and public repos may be read by other tenants (Shared,
// docs/sharing.md); private and protected ones by their tenant only.
var Visibilities = []string{"private", "public", "internal", "protected"}

// VisibilityOf is r's visibility: private for a record that predates
// settings, which no other tenant may read whatever its private flag says.
func (r Repo) VisibilityOf() string {
	if r.Visibility != "" {
		return r.Visibility
	}
	return "private"
}

// TreeEntry is one file of a commit's tree.
type TreeEntry struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size"`
	// XetHash names a file stored through the CAS (hex); "" for a regular file.
	XetHash string `json:"xet_hash,omitempty"`
	// SHA256 of the content (hex): the LFS oid of a xet file, the blob key
	// of a regular file.
	SHA256 string `json:"sha256"`
	// GitOID is the git blob id of the file (of its LFS pointer for a xet file).
	GitOID string `json:"git_oid"`
	// Mode is the file's git mode when it is not 100644: "100755" for an
	// executable (pushed with git; the API makes none).
	Mode string `json:"mode,omitempty"`
}

// ModeExecutable is TreeEntry.Mode of an executable file.
const ModeExecutable = "100755"

// Commit is one commit with its whole tree, sorted by path.
type Commit struct {
	SHA         string      `json:"sha"`
	Parent      string      `json:"parent,omitempty"`
	Summary     string      `json:"summary"`
	Description string      `json:"description,omitempty"`
	Created     time.Time   `json:"created"`
	Tree        []TreeEntry `json:"tree"`
	// Author made the commit (its git author and committer); "" in a
	// record of format 1 (gitcommit.go).
	Author Person `json:"author,omitzero"`
	// Object is the body of the commit's git object, whose id is SHA; nil
	// for a mirrored commit (the upstream's) and in a record of format 1.
	Object []byte `json:"git_object,omitempty"`
	// Aliases are the ids the commit had before it had its git id.
	Aliases []string `json:"aliases,omitempty"`
}

// Entry returns the tree entry at path.
func (c Commit) Entry(path string) (TreeEntry, bool) {
	i := sort.Search(len(c.Tree), func(i int) bool { return c.Tree[i].Path >= path })
	if i < len(c.Tree) && c.Tree[i].Path == path {
		return c.Tree[i], true
	}
	return TreeEntry{}, false
}

// commitRecord is a commit as the bucket holds it.
type commitRecord struct {
	Repo RepoID `json:"repo"`
	Commit
}

type refRecord struct {
	RepoID
	Ref    string `json:"ref"`
	Commit string `json:"commit"`
}

// commitSHA derives a commit id from its content.

// CreateRepo makes a repo with an initial commit on main whose tree is
// initial (none: an empty tree). Only regular files may be in it, whose
// contents are already stored with PutBlob. A repo made this way is
// private, whatever private says (which only the record keeps): use
// CreateRepoWith for another visibility.
func (s *Store) CreateRepo(ctx context.Context, id RepoID, private bool, initial ...TreeEntry) (Repo, error) {
	return s.createRepo(ctx, id, "", private, initial)
}

// CreateRepoWith is CreateRepo with a visibility, one of Visibilities.
func (s *Store) CreateRepoWith(ctx context.Context, id RepoID, visibility string, initial ...TreeEntry) (Repo, error) {
	if !slices.Contains(Visibilities, visibility) {
		return Repo{}, fmt.Errorf("%w: visibility %q (want one of %s)", ErrBadSetting, visibility, strings.Join(Visibilities, ", "))
	}
	return s.createRepo(ctx, id, visibility, visibility == "private", initial)
}

func (s *Store) createRepo(ctx context.Context, id RepoID, visibility string, private bool, initial []TreeEntry) (Repo, error) {
	if err := accounts.ValidTenant(id.Tenant); err != nil {
		return Repo{}, err
	}
	if err := ValidRepoName(id.Name); err != nil {
		return Repo{}, err
	}
	if _, err := s.Repo(ctx, id); err == nil {
		return Repo{}, fmt.Errorf("%s: %w", id, ErrRepoExists)
	} else if !errors.Is(err, ErrNotFound) {
		return Repo{}, err
	}
	now := s.now().UTC()
	r := Repo{RepoID: id, Private: private, Created: now.Truncate(time.Second), Visibility: visibility}
	if err := s.clearMoveRecord(ctx, id); err != nil {
		return Repo{}, err
	}
	tree := append([]TreeEntry(nil), initial...)
	sort.Slice(tree, func(i, j int) bool { return tree[i].Path < tree[j].Path })
	blobs := make([]string, 0, len(tree))
	for _, e := range tree {
		if e.XetHash != "" {
			return Repo{}, fmt.Errorf("create repo %s: the initial tree holds only regular files, not %s", id, e.Path)
		}
		blobs = append(blobs, "blobs/"+e.SHA256)
	}
	c := Commit{Summary: "initial commit", Created: now, Tree: tree, Author: TenantAuthor(id.Tenant)}
	if err := makeGitCommit(&c); err != nil {
		return Repo{}, fmt.Errorf("create repo %s: %w", id, err)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// The name is taken in the transaction, and the bucket's records
		// are written while it holds the name: of creators racing for one
		// name exactly one writes them and succeeds, the others are
		// ErrRepoExists and write nothing (the index's repo row is the
		// claim; PostgreSQL's unique key makes a second inserter wait,
		// then fail and run again).
		if err := repoTaken(ctx, tx, id); err != nil {
			return err
		}
		if err := touchTx(ctx, tx, now.Unix(), blobs...); err != nil {
			return err
		}
		if err := claimRepo(ctx, tx, r); err != nil {
			return err
		}
		if err := deleteMove(ctx, tx, id); err != nil {
			return err
		}
		if err := insertCommit(ctx, tx, id, c); err != nil {
			return err
		}
		if err := setRef(ctx, tx, id, "main", c.SHA); err != nil {
			return err
		}
		// repo.json last: a failure before it leaves records reindex
		// ignores.
		return s.writeRepoRecords(ctx, r, repoHistory{commits: []Commit{c}, refs: map[string]string{"main": c.SHA}})
	})
	if err != nil {
		return Repo{}, err
	}
	return r, err
}

func (s *Store) writeCommitRecords(ctx context.Context, id RepoID, ref string, c Commit) error {
	rec, _ := json.Marshal(commitRecord{Repo: id, Commit: c})
	if _, err := s.writeObject(ctx, id.prefix()+"commits/"+c.SHA+".json", rec, typeJSON, false); err != nil {
		return fmt.Errorf("write commit %s: %w", c.SHA, err)
	}
	rr, _ := json.Marshal(refRecord{RepoID: id, Ref: ref, Commit: c.SHA})
	if _, err := s.writeObject(ctx, id.prefix()+"refs/"+HashName(ref)+".json", rr, typeJSON, false); err != nil {
		return fmt.Errorf("write ref %s: %w", ref, err)
	}
	return nil
}

// insertRepo indexes r; a repo of its id already there stays as it is
// (claimRepo refuses it instead).
func insertRepo(ctx context.Context, tx *sql.Tx, r Repo) error {
	_, err := insertRepoRow(ctx, tx, r)
	return err
}

// claimRepo indexes r, a new repo: ErrRepoExists when its id is taken,
// also by a transaction that committed since this one looked.
func claimRepo(ctx context.Context, tx *sql.Tx, r Repo) error {
	n, err := insertRepoRow(ctx, tx, r)
	if err == nil && n == 0 {
		err = fmt.Errorf("%s: %w", r.RepoID, ErrRepoExists)
	}
	return err
}

func insertRepoRow(ctx context.Context, tx *sql.Tx, r Repo) (int64, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO repos(tenant, type, name, private, created, visibility, gated) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		r.Tenant, r.Type, r.Name, boolInt(r.Private), r.Created.Unix(), r.Visibility, r.Gated)
	if err != nil {
		return 0, fmt.Errorf("index repo %s: %w", r.RepoID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, r.Tenant)
	return n, err
}

func insertCommit(ctx context.Context, tx *sql.Tx, id RepoID, c Commit) error {
	tree, _ := json.Marshal(c.Tree)
	_, err := tx.ExecContext(ctx, `INSERT INTO commits(tenant, type, name, sha, parent, summary, description, created, tree, object) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		id.Tenant, id.Type, id.Name, c.SHA, c.Parent, c.Summary, c.Description, c.Created.UnixNano(), tree, c.Object)
	if err != nil {
		return fmt.Errorf("index commit %s: %w", c.SHA, err)
	}
	return insertAliases(ctx, tx, id, c.SHA, c.Aliases...)
}

// Repo returns a repo's record, or ErrNotFound.
func (s *Store) Repo(ctx context.Context, id RepoID) (Repo, error) {
	var (
		r       Repo
		created int64
	)
	err := s.queryRow(ctx, `SELECT private, created, visibility, gated FROM repos WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name).Scan(&r.Private, &created, &r.Visibility, &r.Gated)
	if errors.Is(err, sql.ErrNoRows) {
		return Repo{}, fmt.Errorf("repo %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Repo{}, fmt.Errorf("repo %s: %w", id, err)
	}
	r.RepoID, r.Created = id, time.Unix(created, 0).UTC()
	return r, nil
}

// FoldRepoID is the id of the repo that id names when letter case is not
// looked at: the Hub takes Org/Name and org/name for one repo, and so does
// openxet (a second repo whose name differs only in case cannot be
// created: repoTaken). ErrNotFound when there is none.
func (s *Store) FoldRepoID(ctx context.Context, id RepoID) (RepoID, error) {
	out := RepoID{Tenant: strings.ToLower(id.Tenant), Type: id.Type}
	err := s.queryRow(ctx, `SELECT name FROM repos WHERE tenant = ? AND type = ? AND lower(name) = lower(?) ORDER BY name LIMIT 1`,
		out.Tenant, id.Type, id.Name).Scan(&out.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return RepoID{}, fmt.Errorf("repo %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return RepoID{}, fmt.Errorf("repo %s: %w", id, err)
	}
	return out, nil
}

// Resolve returns the commit a revision names: a branch, a tag, a commit
// sha of the repo, or the first 7 or more hex digits of exactly one of its
// commit ids. ErrNotFound when it names none.
func (s *Store) Resolve(ctx context.Context, id RepoID, rev string) (Commit, error) {
	sha := rev
	var head string
	// A branch of that name first, else a tag (stored as refs/tags/…).
	err := s.queryRow(ctx, `SELECT commit_sha FROM refs WHERE tenant = ? AND type = ? AND name = ? AND ref IN (?4, 'refs/tags/' || ?4)
		ORDER BY ref = ?4 DESC LIMIT 1`, id.Tenant, id.Type, id.Name, rev).Scan(&head)
	if err == nil {
		sha = head
	} else if !errors.Is(err, sql.ErrNoRows) {
		return Commit{}, fmt.Errorf("ref %s: %w", rev, err)
	} else if shortSHA(rev) {
		// An abbreviated commit id (git's 7 hex digits, or more) names
		// the one commit of the repo it starts, if only one does.
		found, err := queryStrings(ctx, s.db, `SELECT sha FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha >= ? AND sha < ? LIMIT 2`,
			id.Tenant, id.Type, id.Name, rev, rev+"g")
		if err != nil {
			return Commit{}, fmt.Errorf("revision %s: %w", rev, dbErr(err))
		}
		if len(found) == 0 {
			// Or one of the ids commits had before their git ids.
			found, err = queryStrings(ctx, s.db, `SELECT sha FROM commit_aliases WHERE tenant = ? AND type = ? AND name = ? AND old_sha >= ? AND old_sha < ? LIMIT 2`,
				id.Tenant, id.Type, id.Name, rev, rev+"g")
			if err != nil {
				return Commit{}, fmt.Errorf("revision %s: %w", rev, dbErr(err))
			}
		}
		if len(found) == 1 {
			sha = found[0]
		}
	} else if isCommitID(rev) {
		alias, err := aliasOf(ctx, s.db, id, rev)
		if err != nil {
			return Commit{}, fmt.Errorf("revision %s: %w", rev, dbErr(err))
		}
		sha = cmp.Or(alias, rev)
	}
	var (
		c       Commit
		created int64
		tree    []byte
	)
	err = s.queryRow(ctx, `SELECT sha, parent, summary, description, created, tree, object FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`,
		id.Tenant, id.Type, id.Name, sha).Scan(&c.SHA, &c.Parent, &c.Summary, &c.Description, &created, &tree, &c.Object)
	if errors.Is(err, sql.ErrNoRows) {
		return Commit{}, fmt.Errorf("revision %s of %s: %w", rev, id, ErrNotFound)
	}
	if err != nil {
		return Commit{}, fmt.Errorf("revision %s: %w", rev, err)
	}
	c.Created = time.Unix(0, created).UTC()
	if err := decodeTree(tree, &c.Tree); err != nil {
		return Commit{}, fmt.Errorf("tree of %s: %w", sha, err)
	}
	readAuthor(&c)
	return c, nil
}

// shortSHA reports whether rev may be an abbreviated commit id: 7 to 39
// lowercase hex digits.
func shortSHA(rev string) bool {
	if len(rev) < 7 || len(rev) >= 40 {
		return false
	}
	for _, c := range rev {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// DeleteRepo removes a repo and releases the files its revisions
// referenced that no revision of the tenant's other repos references
// (retention.go). The bucket changes first (release records, then the
// repo's records, repo.json first), then one index transaction, so a crash
// leaves the index retaining at least what the bucket retains; deleting
// again finishes the job.
func (s *Store) DeleteRepo(ctx context.Context, id RepoID) error {
	if _, err := s.Repo(ctx, id); err != nil {
		return err
	}
	cands, err := treeFiles(ctx, s.db, id, nil)
	if err != nil {
		return err
	}
	_, err = s.changeRevisions(ctx, revisionChange{
		tenant:     id.Tenant,
		candidates: cands,
		before: func(ctx context.Context) error {
			keys, err := s.bucket.ListKeys(ctx, id.prefix())
			if err != nil {
				return err
			}
			// repo.json first: without it reindex ignores the rest.
			sort.Slice(keys, func(i, j int) bool { return strings.HasSuffix(keys[i], "/repo.json") })
			for _, k := range keys {
				if err := s.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
					return fmt.Errorf("delete %s: %w", k, bucketErr(err))
				}
			}
			return nil
		},
		index: func(ctx context.Context, tx *sql.Tx) error {
			for _, t := range []string{"repos", "refs", "commits", "commit_aliases"} {
				if _, err := tx.ExecContext(ctx, `DELETE FROM `+t+` WHERE tenant = ? AND type = ? AND name = ?`, id.Tenant, id.Type, id.Name); err != nil {
					return err
				}
			}
			return nil
		},
	})
	return err
}

// PutBlob stores a small regular file's content under its SHA-256.
func (s *Store) PutBlob(ctx context.Context, sha256hex string, data []byte) error {
	key := "blobs/" + sha256hex
	if err := s.touch(ctx, key); err != nil {
		return fmt.Errorf("put blob %s: %w", sha256hex, err)
	}
	if ok, err := s.bucket.Exists(ctx, key); err != nil {
		return fmt.Errorf("blob %s: %w", sha256hex, bucketErr(err))
	} else if ok {
		return nil
	}
	_, err := s.writeObject(ctx, key, data, typeBinary, false)
	return err
}

// OpenBlob opens a regular file's content for reading (seekable).
func (s *Store) OpenBlob(ctx context.Context, sha256hex string) (io.ReadSeekCloser, error) {
	r, err := s.bucket.NewReader(ctx, "blobs/"+sha256hex, nil)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("blob %s: %w", sha256hex, ErrNotFound)
		}
		return nil, fmt.Errorf("blob %s: %w", sha256hex, bucketErr(err))
	}
	return r, nil
}

// boolInt is a flag as the index stores it, 0 or 1 (an INTEGER column on
// both engines).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// decodeTree reads a tree as the index holds it (json.Marshal of the
// entries) into *into. It is on the path of every request that names a
// revision, and of a clone once per commit: segmentio/encoding's decoder
// reads a 5,000-file tree about 6× faster than encoding/json's (4.9
// against 29.9 ms on the loaded host), with encoding/json's semantics.
func decodeTree(b []byte, into *[]TreeEntry) error { return fastjson.Unmarshal(b, into) }
