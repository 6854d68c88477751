package gitserve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/filemode"
	"github.com/go-git/go-git/v6/plumbing/format/packfile"
	"github.com/go-git/go-git/v6/plumbing/object"
	"github.com/go-git/go-git/v6/plumbing/transport"

	"openxet/gitobj"
)

// Push is what a push asks for, read and checked as git's formats go:
// each ref it moves, with the commits that the repo does not have yet.
type Push struct {
	Updates []RefUpdate
}

// RefUpdate is one ref a push moves.
type RefUpdate struct {
	// Ref is the full name: refs/heads/… or refs/tags/….
	Ref string
	// Old and New are commit ids; "" for none (a ref created, deleted).
	Old, New string
	// Commits are the commits New brings that the repo does not have,
	// parents first.
	Commits []PushedCommit
}

// PushedCommit is a commit a push brings.
type PushedCommit struct {
	ID string
	// Object is its body, byte for byte as pushed.
	Object  []byte
	Parent  string // "" for a root commit
	Message string
	When    time.Time // the author's time
	Files   []PushedFile
}

// PushedFile is a file of a pushed commit: File, and the bytes of a
// regular file's blob that the push brings (nil for one the repo has).
type PushedFile struct {
	File
	Content []byte
}

// Limits bound what one push may bring. The pack's objects are read into
// memory (each bounded before it is inflated), so these are what a push
// costs at most.
type Limits struct {
	// Objects in the pack, Object the inflated size of one (a delta's
	// result too), Total of all.
	Objects      int
	Object       int64
	Total        int64
	Commits      int // new commits of one push
	PackBytes    int64
	HistoryReads int // commits of the repo read to find objects a pack leaves out
}

// Refusal is a push refused for what it holds; its text is what git
// prints for every ref ("! [remote rejected] main -> main (…)").
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

func refuse(format string, args ...any) error { return &Refusal{Reason: fmt.Sprintf(format, args...)} }

// ServeReceivePack answers one stateless receive-pack request (its body
// r) on w: the pack is read into memory within lim, the updates it asks
// for are read into a Push (refused, every ref, for a merge, an annotated
// tag, a symlink or a submodule, a tree git would write in
// another form, or objects it lacks), and apply decides and makes them, in
// full or not at all; its error is every ref's refusal (a *Refusal's text
// as it is, another error's as "internal error"). checkRef is asked about
// every ref the push names before anything else is read. The refs of src
// are moved by apply only.
func ServeReceivePack(ctx context.Context, r io.Reader, w io.Writer, src Source, gitProtocol string, lim Limits, checkRef func(string) error, apply func(context.Context, Push) error) error {
	st, err := newStorer(ctx, src)
	if err != nil {
		return err
	}
	ps := &pushStorer{repoStorer: st, lim: lim}
	hooks := transport.ReceivePackHooks{PreReceive: func(ctx context.Context, info *transport.PreReceiveInfo) error {
		var err error
		for _, cmd := range info.Commands {
			if err = checkRef(cmd.Name.String()); err != nil {
				break
			}
		}
		var push Push
		if err == nil {
			push, err = ps.read(ctx, info)
		}
		if err == nil {
			err = apply(ctx, push)
		}
		var ref *Refusal
		if err != nil && !errors.As(err, &ref) {
			return fmt.Errorf("internal error: %w", err)
		}
		return err
	}}
	return transport.ReceivePack(ctx, ps, io.NopCloser(r), nopCloser{w}, &transport.ReceivePackRequest{GitProtocol: gitProtocol, StatelessRPC: true, Hooks: hooks})
}

// pushStorer is a repoStorer that takes a push's pack, into memory.
type pushStorer struct {
	*repoStorer
	lim         Limits
	historyRead bool
}

// SetEncodedObject stores an object of the push.
func (s *pushStorer) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	return s.Storage.SetEncodedObject(o)
}

// PackfileWriter takes the push's pack: held whole (within
// Limits.PackBytes), its objects' sizes checked before any is inflated
// past them (checkPack), then parsed into memory by go-git.
func (s *pushStorer) PackfileWriter() (io.WriteCloser, error) {
	return &packWriter{s: s}, nil
}

type packWriter struct {
	s   *pushStorer
	buf bytes.Buffer
	err error
}

func (w *packWriter) Write(p []byte) (int, error) {
	if int64(w.buf.Len()+len(p)) > w.s.lim.PackBytes {
		w.err = fmt.Errorf("the pack is over %d bytes: push large files with git-lfs or git-xet, and fewer commits at a time", w.s.lim.PackBytes)
		return 0, w.err
	}
	return w.buf.Write(p)
}

func (w *packWriter) Close() error {
	if w.err != nil {
		return w.err
	}
	if err := checkPack(w.buf.Bytes(), w.s.lim); err != nil {
		return err
	}
	_, err := packfile.NewParser(bytes.NewReader(w.buf.Bytes()), packfile.WithStorage(w.s.Storage)).Parse()
	return err
}

// read reads the updates of a push from its commands and the objects now
// in the storage.
func (s *pushStorer) read(ctx context.Context, info *transport.PreReceiveInfo) (Push, error) {
	var push Push
	total := 0
	for _, cmd := range info.Commands {
		u := RefUpdate{Ref: cmd.Name.String()}
		if !cmd.Old.IsZero() {
			u.Old = cmd.Old.String()
		}
		if !cmd.New.IsZero() {
			u.New = cmd.New.String()
			commits, err := s.newCommits(ctx, cmd.New, s.lim.Commits-total)
			if err != nil {
				return Push{}, err
			}
			total += len(commits)
			u.Commits = commits
		}
		push.Updates = append(push.Updates, u)
	}
	return push, nil
}

// newCommits is the commits from head back to the first the repo has,
// parents first, each read with its files.
func (s *pushStorer) newCommits(ctx context.Context, head plumbing.Hash, max int) ([]PushedCommit, error) {
	var chain []PushedCommit
	for h := head; !h.IsZero(); {
		if s.has(ctx, h) {
			break
		}
		if len(chain) >= max {
			return nil, refuse("the push brings over %d new commits: push fewer at a time", s.lim.Commits)
		}
		o, err := s.Storage.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return nil, refuse("the push lacks object %s", h)
		}
		if o.Type() == plumbing.TagObject {
			return nil, refuse("annotated tags are not taken: push a lightweight tag (git tag without -a, -s or -m)")
		}
		if o.Type() != plumbing.CommitObject {
			return nil, refuse("%s is a %s, not a commit", h, o.Type())
		}
		body, err := readAll(o)
		if err != nil {
			return nil, err
		}
		gc, err := gitobj.DecodeCommit(body)
		if err != nil {
			return nil, refuse("commit %s: %v", h, err)
		}
		if len(gc.Parents) > 1 {
			return nil, refuse("commit %s is a merge: merge commits are not taken yet; rebase onto the branch and push again", short(h))
		}
		c := PushedCommit{ID: h.String(), Object: body, Message: gc.Message, When: gc.Author.When}
		next := plumbing.ZeroHash
		if len(gc.Parents) == 1 {
			c.Parent = gc.Parents[0]
			next = plumbing.NewHash(c.Parent)
		}
		chain = append(chain, c)
		h = next
	}
	// Files last: the commits the repo has are read by now, and with them
	// the trees and blobs a pack leaves out.
	for i := range chain {
		gc, _ := gitobj.DecodeCommit(chain[i].Object)
		files, err := s.files(ctx, plumbing.NewHash(gc.Tree), "")
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", short(plumbing.NewHash(chain[i].ID)), err)
		}
		if err := s.canonical(gc.Tree, files); err != nil {
			return nil, err
		}
		chain[i].Files = files
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}

// has reports whether the repo has commit h (reading it, with its trees,
// when it does).
func (s *pushStorer) has(ctx context.Context, h plumbing.Hash) bool {
	if _, err := s.Storage.EncodedObject(plumbing.CommitObject, h); err == nil {
		// In the storage: the repo's (read before) or the push's.
		s.mu.Lock()
		known := s.looked[h]
		s.mu.Unlock()
		return known
	}
	found, err := s.readCommit(h)
	if err != nil {
		s.fail(err)
	}
	return found
}

// files flattens tree h (at folder dir) into its files.
func (s *pushStorer) files(ctx context.Context, h plumbing.Hash, dir string) ([]PushedFile, error) {
	o, err := s.object(ctx, plumbing.TreeObject, h)
	if err != nil {
		return nil, err
	}
	var t object.Tree
	if err := t.Decode(o); err != nil {
		return nil, refuse("tree %s: %v", short(h), err)
	}
	var out []PushedFile
	for _, e := range t.Entries {
		p := e.Name
		if dir != "" {
			p = dir + "/" + e.Name
		}
		switch e.Mode {
		case filemode.Dir:
			sub, err := s.files(ctx, e.Hash, p)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		case filemode.Regular, filemode.Executable:
		case filemode.Symlink:
			return nil, refuse("%s is a symbolic link: symbolic links are not taken", p)
		case filemode.Submodule:
			return nil, refuse("%s is a submodule: submodules are not taken", p)
		default:
			return nil, refuse("%s has mode %o, which is not taken", p, e.Mode)
		}
		f, err := s.file(ctx, p, e.Hash)
		if err != nil {
			return nil, err
		}
		f.Exec = e.Mode == filemode.Executable
		out = append(out, f)
	}
	return out, nil
}

// file is the file p whose blob is h: one the repo has, a pointer, or a
// regular file's bytes the push brings.
func (s *pushStorer) file(ctx context.Context, p string, h plumbing.Hash) (PushedFile, error) {
	if f, ok := s.known(h, p); ok {
		return f, nil
	}
	o, err := s.object(ctx, plumbing.BlobObject, h)
	if f, ok := s.known(h, p); ok {
		return f, nil // a regular file of the repo's, which the history read brought
	}
	if err != nil {
		return PushedFile{}, err
	}
	body, err := readAll(o)
	if err != nil {
		return PushedFile{}, err
	}
	f := PushedFile{File: File{Path: p, Blob: h.String()}}
	if sha, size, ok := gitobj.ParsePointer(body); ok {
		f.SHA256, f.Size, f.Pointer = sha, size, true
		return f, nil
	}
	sum := sha256.Sum256(body)
	f.SHA256, f.Size, f.Content = hex.EncodeToString(sum[:]), int64(len(body)), body
	return f, nil
}

// known is the repo's regular file p of blob h, when a tree read names it.
func (s *pushStorer) known(h plumbing.Hash, p string) (PushedFile, bool) {
	s.mu.Lock()
	f, ok := s.blobs[h]
	s.mu.Unlock()
	f.Path = p
	return PushedFile{File: f}, ok
}

// object is object h of type t, from the storage, else (a pack leaves out
// what any of the repo's commits has) after reading the repo's history
// once.
func (s *pushStorer) object(ctx context.Context, t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, err := s.Storage.EncodedObject(t, h); err == nil {
		return o, nil
	}
	if !s.historyRead {
		s.historyRead = true
		if err := s.readHistory(ctx); err != nil {
			return nil, err
		}
		if o, err := s.Storage.EncodedObject(t, h); err == nil {
			return o, nil
		}
	}
	return nil, refuse("the push lacks object %s (%s)", h, t)
}

// readHistory reads the commits of every ref's history, up to
// Limits.HistoryReads of them, bringing all their trees and blobs in.
func (s *pushStorer) readHistory(ctx context.Context) error {
	refs, err := s.src.Refs(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, id := range refs {
		for h := plumbing.NewHash(id); !h.IsZero() && n < s.lim.HistoryReads; n++ {
			if _, err := s.readCommit(h); err != nil {
				s.fail(err)
			}
			o, err := s.Storage.EncodedObject(plumbing.CommitObject, h)
			if err != nil {
				break
			}
			body, _ := readAll(o)
			gc, err := gitobj.DecodeCommit(body)
			if err == nil {
				s.readTrees(plumbing.NewHash(gc.Tree))
			}
			if err != nil || len(gc.Parents) == 0 {
				break
			}
			h = plumbing.NewHash(gc.Parents[0])
		}
	}
	return s.failed()
}

// readTrees brings tree h of a commit read and every tree under it into
// the storage.
func (s *pushStorer) readTrees(h plumbing.Hash) {
	if s.Storage.HasEncodedObject(h) == nil {
		return // read before, with what is under it
	}
	o, err := s.repoStorer.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return // not reached (read before) or failed (s.failed says)
	}
	var t object.Tree
	if t.Decode(o) != nil {
		return
	}
	for _, e := range t.Entries {
		if e.Mode == filemode.Dir {
			s.readTrees(e.Hash)
		}
	}
}

// canonical refuses a commit whose files do not make its tree again as
// openxet writes trees (a tree git itself would write another way).
func (s *pushStorer) canonical(tree string, files []PushedFile) error {
	gfs := make([]gitobj.File, len(files))
	for i, f := range files {
		gfs[i] = gitobj.File{Path: f.Path, Blob: f.Blob, Exec: f.Exec}
	}
	t, err := gitobj.BuildTrees(gfs)
	if err != nil {
		return refuse("%v", err)
	}
	if t.Root != tree {
		return refuse("tree %s is not in the form git writes trees in (its files make tree %s)", tree[:12], t.Root[:12])
	}
	return nil
}

func readAll(o plumbing.EncodedObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func short(h plumbing.Hash) string { return h.String()[:12] }
