package hub

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/gitserve"
	"openxet/refusal"
	"openxet/store"
)

// Git over smart HTTP (docs/design.md §14, docs/git.md) on the repo URLs
// the Hub uses: /{ns}/{name}[.git], /datasets/…, /spaces/…. The route
// fixes the service (info/refs takes it from ?service=, one of exactly
// two); access is decided once, by repoID as for every API route, before
// the first protocol byte; the protocol is package gitserve's.

const (
	// gitRequestBytes caps an upload-pack request body (wants and haves,
	// decompressed): a fetch of a long history sends haves in rounds of a
	// few hundred lines.
	gitRequestBytes = 16 << 20
	// gitPackMemory is what one pack request reserves from the memory
	// budget: the trees, commits and pointers of what it walks are held
	// while it streams (regular files' blobs are read one at a time).
	gitPackMemory = 16 << 20
	// gitRefsMemory is what a ref listing reserves (info/refs, and
	// protocol v2's ls-refs command): the refs, and no walk.
	gitRefsMemory = 1 << 20
	// gitBlobBytes caps one regular file read into a pack.
	gitBlobBytes = 64 << 20
	// GitRealm is the realm of the Basic challenge of a git route: git asks
	// its credential helper for a token only after a 401 that has one.
	GitRealm = `Basic realm="openxet"`
)

func (h *Hub) gitRoutes(e *echo.Echo) {
	public, write := h.cfg.GuardPublic(), h.cfg.Guard("write")
	for _, p := range []string{"", "/datasets", "/spaces"} {
		e.GET(p+"/:ns/:repo/info/refs", h.gitInfoRefs, public)
		e.POST(p+"/:ns/:repo/git-upload-pack", h.gitUploadPack, public)
		e.POST(p+"/:ns/:repo/git-receive-pack", h.gitReceivePack, write)
	}
}

// IsGitPath reports whether p is a git route's path, whose 401 answers
// carry the Basic challenge (GitRealm).
func (h *Hub) IsGitPath(p string) bool {
	return strings.HasSuffix(p, "/info/refs") || strings.HasSuffix(p, "/git-upload-pack") || strings.HasSuffix(p, "/git-receive-pack")
}

// gitRepo reads the repo of a git route for acc. A refusal to a caller
// without a token carries the Basic challenge.
func (h *Hub) gitRepo(c echo.Context, acc access) (store.RepoID, error) {
	name := strings.TrimSuffix(c.Param("repo"), ".git")
	c.SetParamNames("ns", "name")
	c.SetParamValues(c.Param("ns"), name)
	r, err := h.repoID(c, repoTypeOfPath(c.Request().URL.Path), acc)
	var anon *AnonymousError
	if errors.As(err, &anon) {
		c.Response().Header().Set("WWW-Authenticate", GitRealm)
	}
	if err != nil {
		return r, err
	}
	if h.mirrored(r) {
		return r, refusal.Wrap(refusal.ErrForbidden, "%s is mirrored from an upstream hub, whose git objects openxet does not keep yet; download it with hf download or clone it from the upstream", h.shown(r))
	}
	return r, nil
}

func (h *Hub) gitInfoRefs(c echo.Context) error {
	svc := c.QueryParam("service")
	switch svc {
	case gitserve.UploadPack, gitserve.ReceivePack:
	default:
		return refusal.Wrap(refusal.ErrNotFound, "info/refs serves ?service=git-upload-pack or git-receive-pack, not %q (openxet speaks git's smart HTTP only)", svc)
	}
	var r store.RepoID
	var err error
	if svc == gitserve.ReceivePack {
		r, err = h.gitPushRepo(c)
	} else {
		r, err = h.gitRepo(c, forRead)
	}
	if err != nil {
		return err
	}
	return h.gitAnswer(c, gitRefsMemory, "application/x-"+svc+"-advertisement", func(w io.Writer) error {
		return gitserve.Advertise(c.Request().Context(), w, h.gitSource(r), svc, c.Request().Header.Get("Git-Protocol"))
	})
}

func (h *Hub) gitUploadPack(c echo.Context) error {
	r, err := h.gitRepo(c, forRead)
	if err != nil {
		return err
	}
	body, err := gitRequestBody(c, gitserve.UploadPack)
	if err != nil {
		return err
	}
	memory := int64(gitPackMemory)
	br := bufio.NewReaderSize(body, 512)
	// Protocol v2 lists refs in a request of its own, before the fetch;
	// over HTTP a request carries one command, its first pkt-line.
	if first, _ := br.Peek(20); bytes.HasPrefix(first, []byte("0014command=ls-refs\n")) || bytes.HasPrefix(first, []byte("0013command=ls-refs")) {
		memory = gitRefsMemory
	}
	return h.gitAnswer(c, memory, "application/x-git-upload-pack-result", func(w io.Writer) error {
		return gitserve.ServeUploadPack(c.Request().Context(), br, w, h.gitSource(r), c.Request().Header.Get("Git-Protocol"))
	})
}

// gitAnswer answers a git route with serve's stream (gitStream), of
// content type ct, holding memory bytes of the budget while it runs.
func (h *Hub) gitAnswer(c echo.Context, memory int64, ct string, serve func(w io.Writer) error) error {
	release, err := h.cfg.Reserve(c, memory)
	if err != nil {
		return err
	}
	defer release()
	hdr := c.Response().Header()
	hdr.Set("Content-Type", ct)
	hdr.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	return h.gitStream(c, serve)
}

// gitRequestBody is a pack request's body, decompressed when the client
// sent it gzip-encoded, capped at gitRequestBytes; a content type other
// than the service's request type is refused.
func gitRequestBody(c echo.Context, svc string) (io.Reader, error) {
	if ct := c.Request().Header.Get("Content-Type"); ct != "application/x-"+svc+"-request" {
		return nil, badRequest("a %s request has Content-Type application/x-%s-request, not %q", svc, svc, ct)
	}
	var body io.Reader = http.MaxBytesReader(c.Response(), c.Request().Body, gitRequestBytes)
	switch enc := c.Request().Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, badRequest("the gzip-encoded request body does not decode: %v", err)
		}
		body = io.LimitReader(zr, gitRequestBytes)
	default:
		return nil, badRequest("Content-Encoding %q is not served (gzip or none)", enc)
	}
	return body, nil
}

// gitStream runs serve on the response. An error before the first byte is
// answered as any error is; after it, the status is sent and the error
// can only end the stream (git reports the broken pack, or the report
// said what was refused), and is logged at INFO: a client's bad pack is
// no fault of the server's.
func (h *Hub) gitStream(c echo.Context, serve func(w io.Writer) error) error {
	sw := &startedWriter{c: c}
	bw := bufio.NewWriterSize(sw, 64<<10)
	err := serve(bw)
	wrote := sw.started || bw.Buffered() > 0
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err == nil && !wrote {
		c.Response().WriteHeader(http.StatusOK)
	}
	if err != nil && wrote {
		c.Logger().Infof("git %s: %v", c.Request().URL.Path, err)
		return nil
	}
	return err
}

// startedWriter writes to the response, sending its header with the first
// byte, and flushes each write (gitStream buffers them into 64 KiB ones:
// git reads progress and the pack as they come).
type startedWriter struct {
	c       echo.Context
	started bool
}

func (w *startedWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		w.c.Response().WriteHeader(http.StatusOK)
	}
	n, err := w.c.Response().Write(p)
	w.c.Response().Flush()
	return n, err
}

// gitSource is repo r as gitserve reads it.
func (h *Hub) gitSource(r store.RepoID) gitserve.Source { return gitSource{h.store, r} }

type gitSource struct {
	s *store.Store
	r store.RepoID
}

func (g gitSource) Refs(ctx context.Context) (map[string]string, error) {
	refs, err := g.s.Refs(ctx, g.r)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(refs))
	for _, ref := range refs {
		switch {
		case ref.Tag:
			out["refs/tags/"+ref.Name] = ref.Commit
		case strings.HasPrefix(ref.Name, "refs/"):
			out[ref.Name] = ref.Commit
		default:
			out["refs/heads/"+ref.Name] = ref.Commit
		}
	}
	return out, nil
}

func (g gitSource) Commit(ctx context.Context, id string, files bool) (gitserve.Commit, error) {
	if !files {
		obj, err := g.s.CommitObject(ctx, g.r, id)
		if errors.Is(err, store.ErrNotFound) {
			return gitserve.Commit{}, gitserve.ErrNotFound
		}
		return gitserve.Commit{Object: obj}, err
	}
	cm, err := g.s.Resolve(ctx, g.r, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && cm.SHA != id {
		// Not this repo's, or an old id (an alias), which git cannot use.
		return gitserve.Commit{}, gitserve.ErrNotFound
	}
	if err != nil {
		return gitserve.Commit{}, err
	}
	out := gitserve.Commit{Object: cm.Object, Files: make([]gitserve.File, len(cm.Tree))}
	for i, e := range cm.Tree {
		out.Files[i] = gitserve.File{Path: e.Path, Blob: e.GitOID, SHA256: e.SHA256, Size: e.SizeBytes, Pointer: e.XetHash != "", Exec: e.Mode == store.ModeExecutable}
	}
	return out, nil
}

func (g gitSource) Tree(ctx context.Context, id string) (gitserve.Tree, error) {
	t, err := g.s.GitTree(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return gitserve.Tree{}, gitserve.ErrNotFound
	}
	if err != nil {
		return gitserve.Tree{}, err
	}
	out := gitserve.Tree{ID: t.ID, Body: t.Body, Files: make([]gitserve.File, len(t.Files))}
	for i, f := range t.Files {
		out.Files[i] = gitserve.File{Blob: f.Blob, SHA256: f.SHA256, Size: f.Size, Pointer: f.Pointer, Exec: f.Exec}
	}
	return out, nil
}

func (g gitSource) PutTrees(ctx context.Context, trees []gitserve.Tree) error {
	out := make([]store.GitTree, len(trees))
	for i, t := range trees {
		out[i] = store.GitTree{ID: t.ID, Body: t.Body, Files: make([]store.GitTreeFile, len(t.Files))}
		for j, f := range t.Files {
			out[i].Files[j] = store.GitTreeFile{Blob: f.Blob, SHA256: f.SHA256, Size: f.Size, Pointer: f.Pointer, Exec: f.Exec}
		}
	}
	return g.s.PutGitTrees(ctx, out)
}

func (g gitSource) Blob(ctx context.Context, sha256 string) ([]byte, error) {
	f, err := g.s.OpenBlob(ctx, sha256)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, gitBlobBytes+1))
	if err == nil && len(b) > gitBlobBytes {
		err = fmt.Errorf("blob %s is over %d bytes", sha256, gitBlobBytes)
	}
	return b, err
}
