// Package gitserve speaks git's pack protocols for one repo
// (docs/design.md §14): the ref advertisement and upload-pack (clone, fetch and pull;
// protocol v0, v1 and v2, shallow and partial clones), through go-git's
// server side (github.com/go-git/go-git/v6 plumbing/transport) over a
// storer that reads the repo as its consumer's Source gives it, object by
// object, as the walk asks for them. It knows no users, routes or
// policy: the hub decides who may read which repo before it calls in.
package gitserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/filemode"
	"github.com/go-git/go-git/v6/plumbing/object"
	"github.com/go-git/go-git/v6/plumbing/protocol"
	"github.com/go-git/go-git/v6/plumbing/storer"
	"github.com/go-git/go-git/v6/plumbing/transport"
	"github.com/go-git/go-git/v6/storage/memory"

	"openxet/gitobj"
)

// Services: the two a repo URL serves.
const (
	UploadPack  = transport.UploadPackService
	ReceivePack = transport.ReceivePackService
)

// ErrNotFound is what a Source answers for a commit it does not have.
var ErrNotFound = errors.New("not found")

// ErrNoObject means a ref names a commit whose git object is not kept (a
// mirrored commit, whose object is the upstream's).
var ErrNoObject = errors.New("the commit's git object is not kept")

// Source is a repo as the protocol reads it.
type Source interface {
	// Refs maps each ref (refs/heads/…, refs/tags/…) to its commit id.
	Refs(ctx context.Context) (map[string]string, error)
	// Commit is the commit of id, or ErrNotFound; its Files only when
	// files is set (the walk asks for them when the commit's tree is not
	// in the TreeCache).
	Commit(ctx context.Context, id string, files bool) (Commit, error)
	// Blob is the content of a regular file, by its SHA-256 (hex).
	Blob(ctx context.Context, sha256 string) ([]byte, error)
	TreeCache
}

// TreeCache keeps the trees built from commits' files, so that a commit
// whose tree is kept is served without its files: a clone then reads only
// the trees each commit changed, as git does. Trees are content-addressed
// (an id is the hash of its body): a cache may hold them for every repo,
// since a walk asks only for the trees it reached from the repo's own
// commits.
type TreeCache interface {
	// Tree is the kept tree of id, or ErrNotFound.
	Tree(ctx context.Context, id string) (Tree, error)
	// PutTrees keeps trees.
	PutTrees(ctx context.Context, trees []Tree) error
}

// Tree is one git tree object and its own files (not its subtrees'),
// whose Path is their name in the tree.
type Tree struct {
	ID    string
	Body  []byte
	Files []File
}

// Commit is a commit as the protocol serves it: its object's body and,
// when asked for, its files, from which its trees are built.
type Commit struct {
	// Object is the commit object's body; nil when it is not kept.
	Object []byte
	Files  []File
}

// File is one file of a commit.
type File struct {
	Path string
	// Blob is the git blob id.
	Blob string
	// SHA256 and Size are the content's; Pointer marks a Xet or LFS file,
	// whose blob is its git-lfs pointer.
	SHA256  string
	Size    int64
	Pointer bool
	// Exec marks an executable file (mode 100755).
	Exec bool
}

// Advertise writes the ref advertisement of service (UploadPack or
// ReceivePack) for the smart HTTP info/refs route; gitProtocol is the
// request's Git-Protocol header.
func Advertise(ctx context.Context, w io.Writer, src Source, service, gitProtocol string) error {
	st, err := newStorer(ctx, src)
	if err != nil {
		return err
	}
	if service == UploadPack && transport.ProtocolVersion(gitProtocol) == protocol.V2 {
		return transport.UploadPack(ctx, st, nil, nopCloser{w}, &transport.UploadPackRequest{GitProtocol: gitProtocol, AdvertiseRefs: true, StatelessRPC: true})
	}
	if service != UploadPack {
		return transport.AdvertiseRefs(ctx, st, w, service, true, transport.ProtocolVersion(gitProtocol))
	}
	var buf bytes.Buffer
	if err := transport.UploadPack(ctx, st, nil, nopCloser{&buf}, &transport.UploadPackRequest{GitProtocol: gitProtocol, AdvertiseRefs: true, StatelessRPC: true}); err != nil {
		return err
	}
	adv, err := withoutShallow(buf.Bytes())
	if err != nil {
		return err
	}
	_, err = w.Write(adv)
	return err
}

// withoutShallow is a protocol v0/v1 ref advertisement without the
// "shallow" capability. go-git's v0 server answers a stateless shallow
// fetch's first request (its wants and deepen, no haves) by waiting for
// haves that never come, so git's --depth over v0 would fail with
// "expected shallow list"; without the capability git says at once that
// the server does not support shallow clients (v2, every git's default
// since 2.26, serves --depth).
func withoutShallow(adv []byte) ([]byte, error) {
	var out []byte
	for len(adv) > 0 {
		if len(adv) < 4 {
			return nil, errors.New("gitserve: a truncated pkt-line in the advertisement")
		}
		n, err := strconv.ParseUint(string(adv[:4]), 16, 16)
		if err != nil || n != 0 && (n < 4 || int(n) > len(adv)) {
			return nil, fmt.Errorf("gitserve: a bad pkt-line length %q in the advertisement", adv[:4])
		}
		if n == 0 {
			out, adv = append(out, adv[:4]...), adv[4:]
			continue
		}
		line := adv[4:n]
		if i := bytes.IndexByte(line, 0); i >= 0 {
			caps := strings.Fields(strings.TrimSuffix(string(line[i+1:]), "\n"))
			caps = slices.DeleteFunc(caps, func(c string) bool { return c == "shallow" })
			line = append(append(append([]byte(nil), line[:i+1]...), strings.Join(caps, " ")...), '\n')
		}
		out = append(out, fmt.Sprintf("%04x", len(line)+4)...)
		out = append(out, line...)
		adv = adv[n:]
	}
	return out, nil
}

// ServeUploadPack answers one stateless upload-pack request (its body r)
// on w. Objects are sent whole (no delta search): what a pack holds is
// read once, as the walk reaches it.
func ServeUploadPack(ctx context.Context, r io.Reader, w io.Writer, src Source, gitProtocol string) error {
	st, err := newStorer(ctx, src)
	if err != nil {
		return err
	}
	err = transport.UploadPack(ctx, st, io.NopCloser(r), nopCloser{w}, &transport.UploadPackRequest{GitProtocol: gitProtocol, StatelessRPC: true, SkipDeltaCompression: true})
	return errors.Join(err, st.failed())
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// repoStorer is a go-git storer of one repo: refs set when it is made,
// objects read from the Source on first use and only when the walk
// reached them from the repo's refs: a commit by its id (the Source
// answers only the repo's own), a tree once a commit or a tree read
// before names it. A tree read brings the pointer blobs of its files into
// the memory storage; a regular file's blob is read from the Source each
// time it is asked for, and kept nowhere.
type repoStorer struct {
	*memory.Storage
	ctx context.Context
	src Source

	mu      sync.Mutex
	blobs   map[plumbing.Hash]File          // regular files of the trees read
	looked  map[plumbing.Hash]bool          // ids asked of Source.Commit
	reached map[plumbing.Hash]plumbing.Hash // trees named and not read yet → the commit whose tree holds them
	err     error                           // the first error of the Source
}

func newStorer(ctx context.Context, src Source) (*repoStorer, error) {
	refs, err := src.Refs(ctx)
	if err != nil {
		return nil, err
	}
	st := &repoStorer{Storage: memory.NewStorage(), ctx: ctx, src: src, blobs: map[plumbing.Hash]File{},
		looked: map[plumbing.Hash]bool{}, reached: map[plumbing.Hash]plumbing.Hash{}}
	for name, id := range refs {
		h, ok := plumbing.FromHex(id)
		if !ok {
			return nil, fmt.Errorf("ref %s names %q, no object id", name, id)
		}
		if err := st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h)); err != nil {
			return nil, err
		}
	}
	if _, ok := refs["refs/heads/main"]; ok {
		if err := st.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, "refs/heads/main")); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// failed is the first error the Source answered, which go-git reports as
// a missing object.
func (s *repoStorer) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *repoStorer) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// EncodedObject is the object h of type t (plumbing.AnyObject: of any).
func (s *repoStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, err := s.Storage.EncodedObject(t, h); err == nil {
		return o, nil
	}
	s.mu.Lock()
	f, ok := s.blobs[h]
	s.mu.Unlock()
	if ok && (t == plumbing.AnyObject || t == plumbing.BlobObject) {
		return &lazyBlob{s: s, h: h, f: f}, nil
	}
	if s.load(t, h) {
		return s.Storage.EncodedObject(t, h)
	}
	return nil, plumbing.ErrObjectNotFound
}

// HasEncodedObject is nil when the repo has object h.
func (s *repoStorer) HasEncodedObject(h plumbing.Hash) error {
	_, err := s.EncodedObjectSize(h)
	return err
}

// EncodedObjectSize is the size of object h.
func (s *repoStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if n, err := s.Storage.EncodedObjectSize(h); err == nil {
		return n, nil
	}
	s.mu.Lock()
	f, ok := s.blobs[h]
	s.mu.Unlock()
	if ok {
		return f.Size, nil
	}
	if s.load(plumbing.AnyObject, h) {
		return s.Storage.EncodedObjectSize(h)
	}
	return 0, plumbing.ErrObjectNotFound
}

// SetEncodedObject refuses: upload-pack only reads.
func (s *repoStorer) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errors.New("gitserve: the repo is read only here")
}

// load brings object h (of type t, or AnyObject) into the storage when
// the walk reached it: a tree named by what was read, else a commit of
// the repo's. It reports whether it did.
func (s *repoStorer) load(t plumbing.ObjectType, h plumbing.Hash) bool {
	s.mu.Lock()
	commit, isTree := s.reached[h]
	s.mu.Unlock()
	var err error
	switch {
	case isTree && (t == plumbing.AnyObject || t == plumbing.TreeObject):
		err = s.readTree(h, commit)
	case t == plumbing.AnyObject || t == plumbing.CommitObject:
		var found bool
		if found, err = s.readCommit(h); err == nil && !found {
			return false
		}
	default:
		return false
	}
	if err != nil {
		s.fail(err)
		return false
	}
	return true
}

// readCommit brings commit h into the storage, once, and marks its tree
// reached; found is false when the repo has no commit h.
func (s *repoStorer) readCommit(h plumbing.Hash) (found bool, err error) {
	s.mu.Lock()
	if s.looked[h] {
		s.mu.Unlock()
		return false, nil
	}
	s.looked[h] = true
	s.mu.Unlock()
	c, err := s.src.Commit(s.ctx, h.String(), false)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err == nil && c.Object == nil {
		err = ErrNoObject
	}
	var gc gitobj.Commit
	if err == nil && gitobj.CommitID(c.Object) != h.String() {
		err = fmt.Errorf("its object's id is %s", gitobj.CommitID(c.Object))
	}
	if err == nil {
		gc, err = gitobj.DecodeCommit(c.Object)
	}
	if err == nil {
		_, err = s.Storage.SetEncodedObject(memoryObject(plumbing.CommitObject, c.Object))
	}
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", h, err)
	}
	s.reach(plumbing.NewHash(gc.Tree), h)
	return true, nil
}

func (s *repoStorer) reach(tree, commit plumbing.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.reached[tree]; !ok {
		s.reached[tree] = commit
	}
}

// readTree brings tree h (reached from commit) into the storage: from the
// TreeCache, or else built from the commit's files, with every tree of
// the commit, which the cache then keeps.
func (s *repoStorer) readTree(h, commit plumbing.Hash) error {
	t, err := s.src.Tree(s.ctx, h.String())
	if err == nil {
		return s.addTree(t)
	}
	if !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	trees, err := s.buildTrees(commit)
	if err != nil {
		return fmt.Errorf("commit %s: %w", commit, err)
	}
	// Every tree of the commit at once (the top one first): its subtrees
	// are then read from the storage, not asked of the cache or built
	// again when the cache could not keep them.
	found := false
	for _, t := range trees {
		found = found || t.ID == h.String()
		if err := s.addTree(t); err != nil {
			return fmt.Errorf("commit %s: %w", commit, err)
		}
	}
	if !found {
		return fmt.Errorf("commit %s: its files make no tree %s", commit, h)
	}
	return nil
}

// buildTrees builds the trees of commit from its files and gives them to
// the TreeCache. A cache that fails to keep them costs the next clone the
// same work, not this one its answer: the error is not the clone's.
func (s *repoStorer) buildTrees(commit plumbing.Hash) ([]Tree, error) {
	c, err := s.src.Commit(s.ctx, commit.String(), true)
	if err != nil {
		return nil, err
	}
	gc, err := gitobj.DecodeCommit(c.Object)
	if err != nil {
		return nil, err
	}
	trees, err := treesOf(c.Files)
	if err != nil {
		return nil, err
	}
	if trees[0].ID != gc.Tree {
		return nil, fmt.Errorf("its files make tree %s, its object names %s", trees[0].ID, gc.Tree)
	}
	_ = s.src.PutTrees(s.ctx, trees)
	return trees, nil
}

// treesOf is the git trees of files, the top one first, each with its
// own files.
func treesOf(files []File) ([]Tree, error) {
	gfs := make([]gitobj.File, len(files))
	own := map[string][]File{} // folder → its files
	for i, f := range files {
		gfs[i] = gitobj.File{Path: f.Path, Blob: f.Blob, Exec: f.Exec}
		dir, name := "", f.Path
		if j := strings.LastIndexByte(f.Path, '/'); j >= 0 {
			dir, name = f.Path[:j], f.Path[j+1:]
		}
		f.Path = name
		own[dir] = append(own[dir], f)
	}
	built, err := gitobj.BuildTrees(gfs)
	if err != nil {
		return nil, err
	}
	out := make([]Tree, 0, len(built.Dirs))
	out = append(out, Tree{ID: built.Root, Body: built.Objects[built.Root], Files: own[""]})
	for dir, id := range built.Dirs {
		if dir != "" {
			out = append(out, Tree{ID: id, Body: built.Objects[id], Files: own[dir]})
		}
	}
	return out, nil
}

// addTree stores tree t and the pointer blobs of its files, and marks its
// subtrees reached; t is checked against its id, and its files against
// its entries.
func (s *repoStorer) addTree(t Tree) error {
	if id := gitobj.ObjectID(plumbing.TreeObject, t.Body); id != t.ID {
		return fmt.Errorf("tree %s: its body is tree %s", t.ID, id)
	}
	o := memoryObject(plumbing.TreeObject, t.Body)
	var tree object.Tree
	if err := tree.Decode(o); err != nil {
		return fmt.Errorf("tree %s: %w", t.ID, err)
	}
	files := make(map[string]File, len(t.Files))
	for _, f := range t.Files {
		files[f.Blob] = f
	}
	h := plumbing.NewHash(t.ID)
	s.mu.Lock()
	commit := s.reached[h]
	s.mu.Unlock()
	for _, e := range tree.Entries {
		if e.Mode == filemode.Dir {
			s.reach(e.Hash, commit)
			continue
		}
		f, ok := files[e.Hash.String()]
		if !ok {
			return fmt.Errorf("tree %s: no file for its entry %s (%s)", t.ID, e.Name, e.Hash)
		}
		if err := s.addFile(f); err != nil {
			return fmt.Errorf("tree %s: %w", t.ID, err)
		}
	}
	_, err := s.Storage.SetEncodedObject(o)
	return err
}

// addFile makes blob f servable: a pointer is made and stored, a regular
// file's bytes are read when the pack is written.
func (s *repoStorer) addFile(f File) error {
	if !f.Pointer {
		s.mu.Lock()
		s.blobs[plumbing.NewHash(f.Blob)] = f
		s.mu.Unlock()
		return nil
	}
	ptr := gitobj.LFSPointer(f.SHA256, f.Size)
	if gitobj.BlobID(ptr) != f.Blob {
		return fmt.Errorf("the pointer of %s is not blob %s", f.Path, f.Blob)
	}
	_, err := s.Storage.SetEncodedObject(memoryObject(plumbing.BlobObject, ptr))
	return err
}

// lazyBlob is a regular file's blob whose bytes are read from the Source
// only when its reader is asked for: the pack's planning needs its type
// and size, its writing the bytes, once.
type lazyBlob struct {
	s *repoStorer
	h plumbing.Hash
	f File
}

func (b *lazyBlob) Hash() plumbing.Hash         { return b.h }
func (b *lazyBlob) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (b *lazyBlob) SetType(plumbing.ObjectType) {}
func (b *lazyBlob) Size() int64                 { return b.f.Size }
func (b *lazyBlob) SetSize(int64)               {}
func (b *lazyBlob) Writer() (io.WriteCloser, error) {
	return nil, errors.New("gitserve: a blob is read only")
}

func (b *lazyBlob) Reader() (io.ReadCloser, error) {
	body, err := b.s.src.Blob(b.s.ctx, b.f.SHA256)
	if err == nil && (int64(len(body)) != b.f.Size || gitobj.BlobID(body) != b.h.String()) {
		err = fmt.Errorf("its bytes are not blob %s", b.h)
	}
	if err != nil {
		err = fmt.Errorf("blob %s (%s): %w", b.h, b.f.Path, err)
		b.s.fail(err)
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(body)), nil
}

// memoryObject is an object of type t holding body.
func memoryObject(t plumbing.ObjectType, body []byte) *plumbing.MemoryObject {
	o := &plumbing.MemoryObject{}
	o.SetType(t)
	o.SetSize(int64(len(body)))
	o.Write(bytes.Clone(body))
	return o
}

var _ storer.EncodedObjectStorer = (*repoStorer)(nil)
