package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"openxet/store"
	"openxet/xet"
)

// Mirror is the mirror of an upstream Hub as the Hub serves it
// (docs/mirror.md, docs/design.md §12): a repo id whose namespace is not a
// local tenant is read from a repo of the mirror's tenant (the local repo),
// which the mirror fills from the upstream. Package mirror implements it;
// the server wires it (Config.Mirror, nil for no mirror).
type Mirror interface {
	// Repo returns the local repo of upstream repo ns/name of type typ,
	// recording it on first use. store.ErrNotFound when it is not
	// mirrored (ns is a local tenant, the upstream has no such repo);
	// other errors (the upstream unreachable) carry their refusal.
	Repo(ctx context.Context, typ, ns, name string) (store.RepoID, error)
	// LocalRepo is the local repo ns/name would be, without any I/O.
	LocalRepo(typ, ns, name string) (store.RepoID, error)
	// PublicRepo is the repo id the clients use for a local repo; ok is
	// false when local is not a mirrored repo.
	PublicRepo(local store.RepoID) (pub store.RepoID, ok bool)
	// Resolve resolves rev of a local repo, against the upstream when it
	// is due; store.ErrNotFound when there is no such revision.
	Resolve(ctx context.Context, local store.RepoID, rev string) (store.Commit, error)
	// Fetch makes the Xet file e of commit sha of local stored, pulling
	// it for a request of tenant; with w not nil, the bytes of a file this
	// call pulls are written to w as they are stored (wrote true).
	Fetch(ctx context.Context, tenant string, local store.RepoID, sha string, e store.TreeEntry, w io.Writer,
		reserve func(n int64) ([]byte, func(), error)) (wrote bool, err error)
	// Visibility is the visibility of every mirrored repo.
	Visibility() string
}

// The local refs of a mirrored repo are the mirror's (package mirror): each
// revision name a client resolved is mirrorNamePrefix + name; the pins of
// the commits are other refs under refs/mirror/.
const (
	mirrorNamePrefix = "refs/mirror/names/"
	mirrorTagPrefix  = "refs/mirror/tags/" // marks a name the upstream lists as a tag
	mirrorMainRef    = mirrorNamePrefix + "main"
)

// mirrorRepo finds the mirrored repo a request names by ns/name (r) when
// the store has no such repo: ok false when there is no mirror, the caller
// may not read mirrored repos (not found, as for a repo that does not
// exist), or the repo is not mirrored. A write to a mirrored repo is
// refused as a write to a repo of another tenant is (403).
func (h *Hub) mirrorRepo(c echo.Context, r store.RepoID, acc access, id *Principal) (store.RepoID, bool, error) {
	m := h.cfg.Mirror
	if m == nil {
		return r, false, nil
	}
	local, err := m.LocalRepo(r.Type, r.Tenant, r.Name)
	if err != nil || (!id.Anonymous && id.Member(r.Tenant)) {
		return r, false, nil
	}
	switch m.Visibility() {
	case "private":
		if id.Anonymous || !id.Member(local.Tenant) {
			return r, false, nil
		}
	case "internal":
		if id.Anonymous {
			return r, false, nil
		}
	}
	ctx := c.Request().Context()
	if acc != forRead {
		if _, err := h.store.Repo(ctx, local); err == nil {
			return r, false, notOwner(id, r)
		}
		return r, false, nil
	}
	local, err = m.Repo(ctx, r.Type, r.Tenant, r.Name)
	if errors.Is(err, store.ErrNotFound) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	return local, true, nil
}

// shown is the repo id the clients use for r: the upstream's for a
// mirrored repo, r itself otherwise.
func (h *Hub) shown(r store.RepoID) store.RepoID {
	if h.cfg.Mirror == nil {
		return r
	}
	pub, _ := h.cfg.Mirror.PublicRepo(r)
	return pub
}

// mirrored reports whether r is a local repo of the mirror.
func (h *Hub) mirrored(r store.RepoID) bool {
	if h.cfg.Mirror == nil {
		return false
	}
	_, ok := h.cfg.Mirror.PublicRepo(r)
	return ok
}

// serveXet answers a GET or HEAD of the Xet file e of commit sha of r:
// reconstructed from the store; for a mirrored repo, pulled first when it
// is not stored yet. A GET of the whole file that pulls it streams while
// it is stored; a Range waits for the pull.
func (h *Hub) serveXet(c echo.Context, r store.RepoID, sha string, e store.TreeEntry) error {
	if !h.mirrored(r) {
		return h.cfg.ServeXetFile(c, r.Tenant, e)
	}
	req := c.Request()
	if req.Method == http.MethodHead {
		return headXet(c, e)
	}
	var w io.Writer
	if req.Header.Get("Range") == "" && e.SizeBytes > 0 {
		w = &lazyAnswer{c: c, size: e.SizeBytes}
	}
	reserve := func(n int64) ([]byte, func(), error) { return h.cfg.ReserveBuffer(c, n) }
	tenant := "anonymous"
	if p := h.cfg.Principal(c); !p.Anonymous {
		tenant = p.Tenant
	}
	wrote, err := h.cfg.Mirror.Fetch(req.Context(), tenant, r, sha, e, w, reserve)
	if wrote {
		// The answer is under way: an error can only cut it short, so that
		// the client sees fewer bytes than Content-Length, never a whole
		// wrong file.
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	if err != nil {
		return err
	}
	return h.cfg.ServeXetFile(c, r.Tenant, e)
}

// headXet answers a HEAD of a Xet file from its tree entry, as the
// reconstructing GET would answer.
func headXet(c echo.Context, e store.TreeEntry) error {
	_, _, status, err := AnswerRange(c, uint64(e.SizeBytes))
	if err != nil {
		return err
	}
	return c.NoContent(status)
}

// AnswerRange reads the Range of a request for a file of size bytes and
// sets the answer's Content-Type, Content-Length and (for a range)
// Content-Range: the bytes [start, end) to send with status. A Range the
// file cannot satisfy is the xet.ParseRange error, with the
// Content-Range of the whole size set.
func AnswerRange(c echo.Context, size uint64) (start, end uint64, status int, err error) {
	hdr := c.Response().Header()
	start, end, status = 0, size, http.StatusOK
	if rh := c.Request().Header.Get("Range"); rh != "" {
		start, end, err = xet.ParseRange(rh, size)
		if err != nil {
			hdr.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			return 0, 0, 0, err
		}
		if size > 0 {
			status = http.StatusPartialContent
			hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, size))
		}
	}
	if hdr.Get(echo.HeaderContentType) == "" {
		hdr.Set(echo.HeaderContentType, "application/octet-stream")
	}
	hdr.Set(echo.HeaderContentLength, strconv.FormatUint(end-start, 10))
	return start, end, status, nil
}

// lazyAnswer starts a 200 answer of size bytes at the first byte written.
type lazyAnswer struct {
	c       echo.Context
	size    int64
	started bool
}

func (a *lazyAnswer) Write(p []byte) (int, error) {
	if !a.started {
		a.started = true
		hdr := a.c.Response().Header()
		if hdr.Get(echo.HeaderContentType) == "" {
			hdr.Set(echo.HeaderContentType, "application/octet-stream")
		}
		hdr.Set(echo.HeaderContentLength, strconv.FormatInt(a.size, 10))
		a.c.Response().WriteHeader(http.StatusOK)
	}
	return a.c.Response().Write(p)
}
