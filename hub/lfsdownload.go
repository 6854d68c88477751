package hub

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/store"
	"openxet/store/accounts"
)

// LFS downloads (docs/git.md): what git-lfs asks for after a clone (its
// smudge filter, git lfs pull). An object is a Xet file of the repo's
// revisions named by its SHA-256; nothing outside the repo is found by
// oid, so a reader learns of no other repo's files.

// lfsObject is one object of an LFS batch request.
type lfsObject struct {
	OID  string `json:"oid"`
	Size int64  `json:"size"`
}

// lfsDownloadBatch answers a batch download: each object the repo has gets
// a download action to its object URL (with a CAS read token in the
// action's header, for a caller with a token; an anonymous reader of a
// public repo needs none), each other one the LFS error for a missing
// object, 404, and one of another size 422.
func (h *Hub) lfsDownloadBatch(c echo.Context, r store.RepoID, objects []lfsObject) error {
	p := h.cfg.Principal(c)
	var header map[string]string
	expires := time.Now().Add(time.Hour)
	if !p.Anonymous {
		tok, exp := h.cfg.CASToken(p, accounts.ScopeRead, r)
		header, expires = map[string]string{"Authorization": "Bearer " + tok}, time.Unix(exp, 0)
	}
	base := h.cfg.BaseURL(c)
	out := make([]map[string]any, 0, len(objects))
	for _, o := range objects {
		if err := checkSHA256(o.OID); err != nil {
			return badRequest("object oid %v", err)
		}
		obj := map[string]any{"oid": o.OID, "size": o.Size}
		_, e, err := h.store.EntryBySHA256(c.Request().Context(), r, o.OID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			obj["error"] = map[string]any{"code": 404, "message": "Object does not exist in " + h.shown(r).String()}
		case err != nil:
			return err
		case e.SizeBytes != o.Size:
			obj["error"] = map[string]any{"code": 422, "message": "the object's size is " + strconv.FormatInt(e.SizeBytes, 10) + ", not " + strconv.FormatInt(o.Size, 10)}
		default:
			action := map[string]any{"href": lfsObjectURL(base, h.shown(r), o.OID), "expires_at": expires.UTC().Format(time.RFC3339)}
			if header != nil {
				action["header"] = header
			}
			obj["authenticated"] = true
			obj["actions"] = map[string]any{"download": action}
		}
		out = append(out, obj)
	}
	return c.Blob(http.StatusOK, "application/vnd.git-lfs+json", mustJSON(map[string]any{"transfer": "basic", "objects": out, "hash_algo": "sha256"}))
}

// lfsDownload serves an LFS object's bytes (GET, with Range as a resolve
// download does: 206) or its headers (HEAD).
func (h *Hub) lfsDownload(c echo.Context) error {
	oid := c.Param("oid") // before lfsRepoFor names the parameters anew
	r, err := h.lfsRepoFor(c, forRead)
	if err != nil {
		return err
	}
	if err := checkSHA256(oid); err != nil {
		return badRequest("object oid %v", err)
	}
	sha, e, err := h.store.EntryBySHA256(c.Request().Context(), r, oid)
	if errors.Is(err, store.ErrNotFound) {
		return hubNotFound("EntryNotFound", "no LFS object %s in %s", oid, h.shown(r))
	}
	if err != nil {
		return err
	}
	hdr := c.Response().Header()
	hdr.Set("Accept-Ranges", "bytes")
	hdr.Set("ETag", `"`+e.SHA256+`"`)
	hdr.Set("Content-Type", "application/octet-stream")
	return h.serveXet(c, r, sha, e)
}
