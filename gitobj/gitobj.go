// Package gitobj is git's object model as openxet's repos use it
// (docs/design.md §14): the blob of a file (its own bytes, or the LFS
// pointer of a Xet file), the trees of a commit's flat list of files, and
// commit objects, with their ids. It knows nothing of the store or of HTTP;
// the encodings are go-git's (github.com/go-git/go-git/v6 plumbing), so
// the bytes and ids are the ones stock git makes (gitobj_test.go checks
// them against the git binary).
package gitobj

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/filemode"
	format "github.com/go-git/go-git/v6/plumbing/format/config"
	"github.com/go-git/go-git/v6/plumbing/object"
)

// ErrBadObject means bytes or a list of files that are no valid git
// object: a path git refuses, a file and a folder of one name, a commit
// that does not decode.
var ErrBadObject = errors.New("not a valid git object")

// BlobID is git's id of a blob holding content.
func BlobID(content []byte) string {
	return ObjectID(plumbing.BlobObject, content)
}

// ObjectID is git's id of an object of type t and body.
func ObjectID(t plumbing.ObjectType, body []byte) string {
	h := plumbing.NewHasher(format.SHA1, t, int64(len(body)))
	h.Write(body)
	return h.Sum().String()
}

// LFSPointer is the git-lfs pointer file of a large file: what a Xet or
// LFS file's blob holds in git.
func LFSPointer(sha256 string, size int64) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha256, size)
}

// ParsePointer reads a git-lfs pointer file in the form LFSPointer writes
// (git-lfs's own): the SHA-256 (hex) and size of the file it stands for;
// ok is false for anything else.
func ParsePointer(b []byte) (sha256 string, size int64, ok bool) {
	const head, oid = "version https://git-lfs.github.com/spec/v1\n", "oid sha256:"
	if len(b) > 200 || !bytes.HasPrefix(b, []byte(head+oid)) {
		return "", 0, false
	}
	rest := b[len(head)+len(oid):]
	if len(rest) < 65 || rest[64] != '\n' {
		return "", 0, false
	}
	sha256 = string(rest[:64])
	for _, c := range rest[:64] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", 0, false
		}
	}
	if _, err := fmt.Sscanf(string(rest[65:]), "size %d\n", &size); err != nil || size < 0 {
		return "", 0, false
	}
	if !bytes.Equal(b, LFSPointer(sha256, size)) {
		return "", 0, false
	}
	return sha256, size, true
}

// File is one file of a flat tree: its path (folders separated by "/"),
// its blob's id, and whether it is executable (mode 100755; else 100644).
type File struct {
	Path string
	Blob string
	Exec bool
}

// Trees is the trees of a flat list of files.
type Trees struct {
	// Root is the id of the top tree.
	Root string
	// Dirs maps each folder's path ("" for the top) to its tree's id.
	Dirs map[string]string
	// Objects maps each tree's id to its body (the tree object without
	// git's "tree N\x00" header).
	Objects map[string][]byte
}

// BuildTrees makes the git trees of files, each a regular file (mode
// 100644) or an executable one (100755). ErrBadObject for a path git refuses (empty components,
// ".", "..", ".git" and the names fsck refuses), two files of one path, or
// a file and a folder of one name.
func BuildTrees(files []File) (Trees, error) {
	type dir struct {
		files   map[string]File // name → file
		subdirs map[string]bool
	}
	dirs := map[string]*dir{"": {files: map[string]File{}, subdirs: map[string]bool{}}}
	get := func(p string) *dir {
		d, ok := dirs[p]
		if !ok {
			d = &dir{files: map[string]File{}, subdirs: map[string]bool{}}
			dirs[p] = d
		}
		return d
	}
	for _, f := range files {
		parts := strings.Split(f.Path, "/")
		parent := ""
		for i, name := range parts {
			if name == "" {
				return Trees{}, fmt.Errorf("%w: path %q has an empty component", ErrBadObject, f.Path)
			}
			d := get(parent)
			if i == len(parts)-1 {
				if _, dup := d.files[name]; dup {
					return Trees{}, fmt.Errorf("%w: two files at %s", ErrBadObject, f.Path)
				}
				d.files[name] = f
				break
			}
			d.subdirs[name] = true
			parent = joinPath(parent, name)
		}
	}
	// Deepest folders first: a tree's id needs its subtrees'.
	paths := make([]string, 0, len(dirs))
	for p := range dirs {
		paths = append(paths, p)
	}
	depth := func(p string) int {
		if p == "" {
			return -1
		}
		return strings.Count(p, "/")
	}
	sort.Slice(paths, func(i, j int) bool {
		di, dj := depth(paths[i]), depth(paths[j])
		return di > dj || di == dj && paths[i] < paths[j]
	})
	out := Trees{Dirs: make(map[string]string, len(dirs)), Objects: make(map[string][]byte, len(dirs))}
	for _, p := range paths {
		d := dirs[p]
		t := object.Tree{Entries: make([]object.TreeEntry, 0, len(d.files)+len(d.subdirs))}
		for name, f := range d.files {
			if d.subdirs[name] {
				return Trees{}, fmt.Errorf("%w: %s is a file and a folder", ErrBadObject, joinPath(p, name))
			}
			mode := filemode.Regular
			if f.Exec {
				mode = filemode.Executable
			}
			t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: mode, Hash: plumbing.NewHash(f.Blob)})
		}
		for name := range d.subdirs {
			t.Entries = append(t.Entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: plumbing.NewHash(out.Dirs[joinPath(p, name)])})
		}
		sort.Sort(object.TreeEntrySorter(t.Entries))
		body, err := encode(&t)
		if err != nil {
			return Trees{}, fmt.Errorf("%w: folder %q: %w", ErrBadObject, p, err)
		}
		id := ObjectID(plumbing.TreeObject, body)
		out.Dirs[p], out.Objects[id] = id, body
	}
	out.Root = out.Dirs[""]
	return out, nil
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// encoder is a go-git object that encodes itself.
type encoder interface {
	Encode(plumbing.EncodedObject) error
}

// encode is the body of o as go-git encodes it.
func encode(o encoder) ([]byte, error) {
	var mo plumbing.MemoryObject
	if err := o.Encode(&mo); err != nil {
		return nil, err
	}
	r, err := mo.Reader()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// Signature is a commit's author or committer.
type Signature struct {
	Name  string
	Email string
	// When is the time, with the zone git records.
	When time.Time
}

// Commit is a commit object.
type Commit struct {
	Tree      string
	Parents   []string
	Author    Signature
	Committer Signature
	Message   string
}

// Encode is c's body (the commit object without git's "commit N\x00"
// header), as git writes it. A name or email loses the characters git
// drops from them too ("<", ">" and line breaks), which would break the
// object's header.
func (c Commit) Encode() ([]byte, error) {
	for _, id := range append([]string{c.Tree}, c.Parents...) {
		if _, ok := plumbing.FromHex(id); !ok || len(id) != 40 {
			return nil, fmt.Errorf("%w: %q is no object id", ErrBadObject, id)
		}
	}
	gc := object.Commit{
		TreeHash:  plumbing.NewHash(c.Tree),
		Author:    signature(c.Author),
		Committer: signature(c.Committer),
		Message:   c.Message,
	}
	for _, p := range c.Parents {
		gc.ParentHashes = append(gc.ParentHashes, plumbing.NewHash(p))
	}
	return encode(&gc)
}

var crud = strings.NewReplacer("<", "", ">", "", "\n", "", "\r", "", "\x00", "")

func signature(s Signature) object.Signature {
	return object.Signature{Name: strings.TrimSpace(crud.Replace(s.Name)), Email: strings.TrimSpace(crud.Replace(s.Email)), When: s.When}
}

// CommitID is the id of the commit object whose body is body.
func CommitID(body []byte) string {
	return ObjectID(plumbing.CommitObject, body)
}

// DecodeCommit reads a commit object's body. ErrBadObject for bytes that
// are not one.
func DecodeCommit(body []byte) (Commit, error) {
	mo := plumbing.MemoryObject{}
	mo.SetType(plumbing.CommitObject)
	if _, err := mo.Write(body); err != nil {
		return Commit{}, err
	}
	var gc object.Commit
	if err := gc.Decode(&mo); err != nil {
		return Commit{}, fmt.Errorf("%w: %w", ErrBadObject, err)
	}
	if gc.TreeHash.IsZero() || !bytes.HasPrefix(body, []byte("tree ")) {
		return Commit{}, fmt.Errorf("%w: a commit names no tree", ErrBadObject)
	}
	c := Commit{
		Tree:      gc.TreeHash.String(),
		Author:    Signature{Name: gc.Author.Name, Email: gc.Author.Email, When: gc.Author.When},
		Committer: Signature{Name: gc.Committer.Name, Email: gc.Committer.Email, When: gc.Committer.When},
		Message:   gc.Message,
	}
	for _, p := range gc.ParentHashes {
		c.Parents = append(c.Parents, p.String())
	}
	return c, nil
}

// Message is a commit message of a summary and a description, as the Hub
// writes it: the summary, a blank line and the description, ending in a
// newline.
func Message(summary, description string) string {
	m := strings.TrimRight(summary, "\n")
	if d := strings.Trim(description, "\n"); d != "" {
		m += "\n\n" + d
	}
	return m + "\n"
}

// SplitMessage is the summary (the first paragraph, its lines joined) and
// the description (the rest) of a commit message.
func SplitMessage(msg string) (summary, description string) {
	msg = strings.Trim(msg, "\n")
	summary, description, _ = strings.Cut(msg, "\n\n")
	return strings.ReplaceAll(summary, "\n", " "), strings.Trim(description, "\n")
}
