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
	"sync"

	"github.com/go-git/go-git/v6/plumbing"
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
	// Commit is the commit of id, or ErrNotFound.
	Commit(ctx context.Context, id string) (Commit, error)
	// Blob is the content of a regular file, by its SHA-256 (hex).
	Blob(ctx context.Context, sha256 string) ([]byte, error)
}

// Commit is a commit as the protocol serves it: its object's body and its
// files, from which its trees are built.
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
	if service == UploadPack {
		return transport.UploadPack(ctx, st, nil, nopCloser{w}, &transport.UploadPackRequest{GitProtocol: gitProtocol, AdvertiseRefs: true, StatelessRPC: true})
	}
	return transport.AdvertiseRefs(ctx, st, w, service, true, transport.ProtocolVersion(gitProtocol))
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
// objects read from the Source on first use. A commit read brings its
// trees and its files' pointer blobs into the memory storage; a regular
// file's blob is read from the Source each time it is asked for, and kept
// nowhere.
type repoStorer struct {
	*memory.Storage
	ctx context.Context
	src Source

	mu     sync.Mutex
	blobs  map[plumbing.Hash]File // regular files of the commits read
	looked map[plumbing.Hash]bool // ids asked of Source.Commit
	err    error                  // the first error of the Source
}

func newStorer(ctx context.Context, src Source) (*repoStorer, error) {
	refs, err := src.Refs(ctx)
	if err != nil {
		return nil, err
	}
	st := &repoStorer{Storage: memory.NewStorage(), ctx: ctx, src: src, blobs: map[plumbing.Hash]File{}, looked: map[plumbing.Hash]bool{}}
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
	if (t == plumbing.AnyObject || t == plumbing.CommitObject) && s.readCommit(h) {
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
	if s.readCommit(h) {
		return s.Storage.EncodedObjectSize(h)
	}
	return 0, plumbing.ErrObjectNotFound
}

// SetEncodedObject refuses: upload-pack only reads.
func (s *repoStorer) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errors.New("gitserve: the repo is read only here")
}

// readCommit brings commit h, its trees and its pointer blobs into the
// storage, once; it reports whether the repo has it.
func (s *repoStorer) readCommit(h plumbing.Hash) bool {
	s.mu.Lock()
	if s.looked[h] {
		s.mu.Unlock()
		return false
	}
	s.looked[h] = true
	s.mu.Unlock()
	c, err := s.src.Commit(s.ctx, h.String())
	if errors.Is(err, ErrNotFound) {
		return false
	}
	if err == nil && c.Object == nil {
		err = ErrNoObject
	}
	if err == nil {
		err = s.add(h, c)
	}
	if err != nil {
		s.fail(fmt.Errorf("commit %s: %w", h, err))
		return false
	}
	return true
}

// add stores commit c (of id h), its trees and its pointer blobs.
func (s *repoStorer) add(h plumbing.Hash, c Commit) error {
	if gitobj.CommitID(c.Object) != h.String() {
		return fmt.Errorf("its object's id is %s", gitobj.CommitID(c.Object))
	}
	gc, err := gitobj.DecodeCommit(c.Object)
	if err != nil {
		return err
	}
	files := make([]gitobj.File, len(c.Files))
	for i, f := range c.Files {
		files[i] = gitobj.File{Path: f.Path, Blob: f.Blob, Exec: f.Exec}
	}
	trees, err := gitobj.BuildTrees(files)
	if err != nil {
		return err
	}
	if trees.Root != gc.Tree {
		return fmt.Errorf("its files make tree %s, its object names %s", trees.Root, gc.Tree)
	}
	for id, body := range trees.Objects {
		if _, err := s.Storage.SetEncodedObject(memoryObject(plumbing.TreeObject, body)); err != nil {
			return fmt.Errorf("tree %s: %w", id, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range c.Files {
		if !f.Pointer {
			s.blobs[plumbing.NewHash(f.Blob)] = f
			continue
		}
		ptr := gitobj.LFSPointer(f.SHA256, f.Size)
		if gitobj.BlobID(ptr) != f.Blob {
			return fmt.Errorf("the pointer of %s is not blob %s", f.Path, f.Blob)
		}
		if _, err := s.Storage.SetEncodedObject(memoryObject(plumbing.BlobObject, ptr)); err != nil {
			return err
		}
	}
	_, err = s.Storage.SetEncodedObject(memoryObject(plumbing.CommitObject, c.Object))
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
	if err == nil && gitobj.BlobID(body) != b.h.String() {
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
