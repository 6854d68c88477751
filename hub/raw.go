package hub

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// raw serves GET and HEAD /{ns}/{name}/raw/{rev}/{path} (and /datasets/…,
// /spaces/…) as the Hub does: the file as git stores it, which is the
// content of a regular file and the git-lfs pointer of a file stored
// through Xet. @huggingface/hub's fileExists sends HEAD here (404 means
// "no"); resolve is the route that serves a Xet file's bytes.
func (h *Hub) raw(c echo.Context) error {
	r, err := h.repoID(c, repoTypeOfPath(c.Request().URL.Path), forRead)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	filePath := param(c, "*")
	e, ok := cm.Entry(filePath)
	if !ok {
		return hubNotFound("EntryNotFound", "file %s not found in %s at %s", filePath, r, cm.SHA)
	}
	hdr := c.Response().Header()
	hdr.Set("X-Repo-Commit", cm.SHA)
	hdr.Set("ETag", `"`+e.GitOID+`"`)
	userContent(hdr, filePath)
	if e.XetHash != "" {
		// The pointer git stores, not the file: plain text.
		hdr.Set("X-Xet-Hash", e.XetHash)
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		http.ServeContent(c.Response(), c.Request(), "", time.Time{}, strings.NewReader(lfsPointer(e.SHA256, e.SizeBytes)))
		return nil
	}
	blob, err := h.store.OpenBlob(c.Request().Context(), e.SHA256)
	if err != nil {
		return err
	}
	defer blob.Close()
	http.ServeContent(c.Response(), c.Request(), "", time.Time{}, blob)
	return nil
}
