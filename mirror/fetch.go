package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"openxet/store"
	"openxet/store/ingest"
	"openxet/xet"
)

// Reserve takes n bytes of memory for the request a pull serves, from the
// server's budget, as one buffer; release gives it back. Its errors are
// the budget's.
type Reserve = func(n int64) (buf []byte, release func(), err error)

// Fetch makes the Xet file e of local (a mirrored repo) stored, pulling it
// from the upstream if it is not, on behalf of a request of tenant. A
// request for a file already being pulled waits for that pull (one upstream
// fetch for all of them). When w is not nil and this call pulls the file,
// the file's bytes are written to w while they are stored, all but the last
// one before the stream checked out against e's size and hash (so a client
// never gets a whole wrong file), and wrote is true; a write error of w only
// stops the writing. Otherwise the caller serves the stored file.
func (m *Mirror) Fetch(ctx context.Context, tenant string, local store.RepoID, sha string, e store.TreeEntry, w io.Writer, reserve Reserve) (wrote bool, err error) {
	h, err := xet.ParseHash(e.XetHash)
	if err != nil {
		return false, fmt.Errorf("file %s of %s: %w", e.Path, local, err)
	}
	if f, err := m.store.File(ctx, m.cfg.Tenant, h); err == nil {
		if err := m.sameFile(fmt.Sprintf("file %s of %s@%s", e.Path, m.ref(local).ID, sha), e, f); err != nil {
			return false, err
		}
		m.hits.Add(1)
		m.touch(local, sha)
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	var tee *holdBack
	err = m.coalesce(ctx, "file:"+e.XetHash, func(ctx context.Context) error {
		// A pull that ended between the look-up above and this flight
		// stored it already.
		if f, err := m.store.File(ctx, m.cfg.Tenant, h); err == nil {
			return m.sameFile(fmt.Sprintf("file %s of %s@%s", e.Path, m.ref(local).ID, sha), e, f)
		}
		if w != nil {
			tee = &holdBack{w: w}
		}
		return m.pull(ctx, tenant, local, sha, e, h, tee, reserve)
	})
	if err != nil {
		return tee != nil && tee.n > 0, err
	}
	m.touch(local, sha)
	if tee != nil {
		tee.flush()
		return true, nil
	}
	return false, nil
}

// sameFile checks the upstream's claims of e (size, SHA-256) against f,
// the file of e's Xet hash the mirror holds already (pulled for another
// revision or repo, its SHA-256 computed as it was stored): a tree entry
// that names stored content under another size or SHA-256 is a wrong
// answer, refused rather than served under the claims.
func (m *Mirror) sameFile(what string, e store.TreeEntry, f store.File) error {
	if f.SizeBytes == uint64(e.SizeBytes) && (e.SHA256 == "" || f.SHA256 == "" || f.SHA256 == e.SHA256) {
		return nil
	}
	return m.badAnswer(what,
		fmt.Errorf("the upstream lists Xet hash %s with size %d and sha256 %q; that content has size %d and sha256 %q", e.XetHash, e.SizeBytes, e.SHA256, f.SizeBytes, f.SHA256))
}

// claimsAgree checks that every entry of the mirror's revisions naming e's
// Xet hash claims one size and one SHA-256, as one content has, before a
// file asked for by its hash alone (the CAS routes: a relay, PullFile) is
// relayed or pulled. Such a request cannot tell which entry its client
// read the hash from, and the bytes are checked against e's claims only:
// an upstream that lists a file under the Xet hash of other content
// (keeping the file's own size and SHA-256) would otherwise have that
// content served under the file's name. A pull by path (resolve) checks
// the bytes against its own entry, and once the content is held every
// entry that claims otherwise is refused where it is read (sameFile).
func (m *Mirror) claimsAgree(ctx context.Context, what string, e store.TreeEntry) error {
	all, err := m.store.EntriesByHash(ctx, m.cfg.Tenant, e.XetHash)
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Entry.SizeBytes != e.SizeBytes || o.Entry.SHA256 != "" && e.SHA256 != "" && o.Entry.SHA256 != e.SHA256 {
			return m.badAnswer(what, fmt.Errorf("the upstream lists Xet hash %s with size %d and sha256 %q, and as %s of %s@%s with size %d and sha256 %q",
				e.XetHash, e.SizeBytes, e.SHA256, o.Entry.Path, o.Repo.Name, o.SHA, o.Entry.SizeBytes, o.Entry.SHA256))
		}
		if e.SHA256 == "" {
			e.SHA256 = o.Entry.SHA256
		}
	}
	return nil
}

// PullFile is Fetch for a file named by its hash, as the CAS routes name
// it: ErrNotFound unless a revision of local has it.
func (m *Mirror) PullFile(ctx context.Context, tenant string, local store.RepoID, h xet.Hash, reserve Reserve) error {
	sha, e, err := m.store.EntryByHash(ctx, local, h.String())
	if err != nil {
		return err
	}
	if err := m.claimsAgree(ctx, fmt.Sprintf("file %s of %s@%s", e.Path, m.ref(local).ID, sha), e); err != nil {
		return err
	}
	_, err = m.Fetch(ctx, tenant, local, sha, e, nil, reserve)
	return err
}

// IsMirrored reports whether local is a repo of the mirror.
func (m *Mirror) IsMirrored(local store.RepoID) bool {
	_, ok := m.PublicRepo(local)
	return ok
}

// pull reads e from the upstream in segments and stores it as the mirror
// tenant's file through ingest.File, which refuses a stream whose
// size, SHA-256 or Xet hash is not e's before anything is registered.
func (m *Mirror) pull(ctx context.Context, tenant string, local store.RepoID, sha string, e store.TreeEntry, h xet.Hash, tee *holdBack, reserve Reserve) error {
	ref := m.ref(local)
	what := fmt.Sprintf("file %s of %s@%s", e.Path, ref.ID, sha)
	var buf []byte
	if reserve != nil {
		b, release, err := reserve(ingest.BufferBytes(e.SizeBytes))
		if err != nil {
			return err
		}
		defer release()
		buf = b
	}
	opt := ingest.Options{SizeBytes: e.SizeBytes, XetHash: &h, DedupGlobal: m.cfg.DedupGlobal, DefaultQuotaBytes: store.Unlimited, Buffer: buf}
	if e.SHA256 != "" {
		raw, err := hex.DecodeString(e.SHA256)
		if err != nil || len(raw) != sha256.Size {
			return m.badAnswer(what, fmt.Errorf("sha256 %q", e.SHA256))
		}
		sum := [sha256.Size]byte(raw)
		opt.SHA256 = &sum
	}
	src := &segments{m: m, ctx: ctx, tenant: tenant, ref: ref, sha: sha,
		f: File{Path: e.Path, Size: e.SizeBytes, XetHash: e.XetHash, SHA256: e.SHA256, GitOID: e.GitOID}}
	defer src.close()
	var r io.Reader = src
	if tee != nil {
		r = io.TeeReader(src, tee)
	}
	_, err := ingest.File(ctx, m.store, m.cfg.Tenant, r, opt)
	switch {
	case err == nil:
		m.upstreamFiles.Add(1)
		m.enforceQuota(ctx)
		return nil
	case errors.Is(err, xet.ErrHashMismatch):
		return m.badAnswer(what, err)
	}
	return m.upstreamErr(what, err)
}

// segments reads a file of the upstream from its start, one segment of
// Config.SegmentBytes per upstream stream: each segment waits for an
// upstream connection in the fair queue of the requesting tenant and gives
// it back at its end.
type segments struct {
	m      *Mirror
	ctx    context.Context
	tenant string
	ref    RepoRef
	sha    string
	f      File

	off, end int64 // read so far; end of the current segment
	rc       io.ReadCloser
	release  func()
}

func (s *segments) Read(p []byte) (int, error) {
	if s.off >= s.f.Size {
		return 0, io.EOF
	}
	if s.rc == nil {
		slot, err := s.m.conns.AcquireUntilDone(s.ctx, s.tenant)
		if err != nil {
			return 0, err
		}
		rc, err := s.m.up.Open(s.ctx, s.ref, s.sha, s.f, s.off)
		if err != nil {
			slot.Release()
			return 0, err
		}
		s.rc, s.release = rc, slot.Release
		s.end = min(s.off+s.m.cfg.SegmentBytes, s.f.Size)
	}
	if int64(len(p)) > s.end-s.off {
		p = p[:s.end-s.off]
	}
	n, err := s.rc.Read(p)
	s.off += int64(n)
	s.m.upstreamBytes.Add(int64(n))
	if errors.Is(err, io.EOF) && s.off < s.f.Size {
		err = fmt.Errorf("%w: the stream ended at %d of %d bytes", ErrBadAnswer, s.off, s.f.Size)
	}
	if s.off >= s.end || err != nil {
		s.close()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	if n == 0 && s.off < s.f.Size {
		return s.Read(p)
	}
	return n, nil
}

func (s *segments) close() {
	if s.rc != nil {
		s.rc.Close()
		s.release()
		s.rc, s.release = nil, nil
	}
}

// withConn runs fn holding an upstream connection of tenant's fair queue.
func (m *Mirror) withConn(ctx context.Context, tenant string, fn func() error) error {
	slot, err := m.conns.AcquireUntilDone(ctx, tenant)
	if err != nil {
		return err
	}
	defer slot.Release()
	return fn()
}

// holdBack writes to w everything but the last byte written to it, until
// flush; after a write error of w it stops writing (the client went away;
// the pull goes on for the others).
type holdBack struct {
	w      io.Writer
	last   []byte
	n      int64 // bytes written to w
	failed bool
}

func (t *holdBack) Write(p []byte) (int, error) {
	if len(p) == 0 || t.failed {
		return len(p), nil
	}
	for _, b := range [][]byte{t.last, p[:len(p)-1]} {
		if len(b) == 0 || t.failed {
			continue
		}
		n, err := t.w.Write(b)
		t.n += int64(n)
		t.failed = err != nil
	}
	t.last = append(t.last[:0], p[len(p)-1])
	return len(p), nil
}

func (t *holdBack) flush() {
	if !t.failed && len(t.last) > 0 {
		n, _ := t.w.Write(t.last)
		t.n += int64(n)
		t.last = nil
	}
}
