package hub

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// resolve serves a file of a repo: metadata headers for HEAD, the bytes for
// GET (xet files reconstructed on the server), or the xet file info for the
// JS client.
func (h *Hub) resolve(c echo.Context) error {
	r, err := h.repoID(c, repoTypeOfPath(c.Request().URL.Path), forRead)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	hdr := c.Response().Header()
	hdr.Set("X-Repo-Commit", cm.SHA)
	filePath := param(c, "*")
	e, ok := cm.Entry(filePath)
	if !ok {
		return hubNotFound("EntryNotFound", "file %s not found in %s at %s", filePath, h.shown(r), cm.SHA)
	}
	hdr.Set("Accept-Ranges", "bytes")
	userContent(hdr, filePath)
	if e.SizeBytes == 0 && c.Request().Header.Get("Range") != "" {
		// An empty file has no byte to send for a Range: the answer is 200
		// with Content-Length: 0 (net/http's ServeContent ignores the Range
		// too), and it says the size the way a ranged answer does, because
		// @huggingface/hub's fileDownloadInfo reads a file's size from
		// Content-Range (after the "/") and fails without it.
		hdr.Set("Content-Range", "bytes */0")
	}
	if e.XetHash == "" {
		hdr.Set("ETag", `"`+e.GitOID+`"`)
		blob, err := h.store.OpenBlob(c.Request().Context(), e.SHA256)
		if err != nil {
			return err
		}
		defer blob.Close()
		http.ServeContent(c.Response(), c.Request(), "", time.Time{}, blob)
		return nil
	}
	base := h.cfg.BaseURL(c)
	etag := `"` + e.SHA256 + `"`
	hdr.Set("ETag", etag)
	hdr.Set("X-Linked-Etag", etag)
	hdr.Set("X-Linked-Size", strconv.FormatInt(e.SizeBytes, 10))
	if h.cfg.Principal(c).Anonymous {
		// A reader without a token has no CAS token to ask for: the file
		// is not offered through Xet, and its bytes come from here.
		return h.serveXet(c, r, cm.SHA, e)
	}
	hdr.Set("X-Xet-Hash", e.XetHash)
	pub := h.shown(r)
	auth := base + "/api/" + pub.Type + "s/" + pub.Tenant + "/" + pub.Name + "/xet-read-token/" + cm.SHA
	recon := base + "/v1/reconstructions/" + e.XetHash
	hdr.Set("Link", "<"+auth+`>; rel="xet-auth", <`+recon+`>; rel="xet-reconstruction-info"`)
	hdr.Set("X-Xet-Refresh-Route", auth)
	if strings.Contains(c.Request().Header.Get("Accept"), "application/vnd.xet-fileinfo+json") {
		// The answer is about the file, not its bytes: its own type (echo's
		// Blob keeps a Content-Type already set, and @huggingface/hub reads
		// the size from X-Linked-Size only under this one).
		hdr.Set("Content-Type", "application/vnd.xet-fileinfo+json")
		hdr.Del("Content-Disposition")
		return c.Blob(http.StatusOK, "application/vnd.xet-fileinfo+json", mustJSON(map[string]any{
			"hash": e.XetHash, "size": e.SizeBytes, "etag": e.SHA256, "refreshUrl": auth, "reconstructionUrl": recon}))
	}
	return h.serveXet(c, r, cm.SHA, e)
}
