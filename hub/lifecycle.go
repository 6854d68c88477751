package hub

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"

	"openxet/store/accounts"
)

// The Hub routes that drop revisions (and with them the retention of the
// files only they referenced): super-squash, branch and tag deletion; tag
// creation and the refs listing that go with them. Paths and bodies are
// those huggingface_hub 2.4.0 sends (HfApi.super_squash_history,
// delete_branch, create_tag, delete_tag, list_repo_refs).

func (h *Hub) lifecycleRoutes(e *echo.Echo) {
	public, write := h.cfg.GuardPublic(), h.cfg.Guard(accounts.ScopeWrite)
	api := "/api/:types/:ns/:name"
	e.POST(api+"/super-squash/:rev", h.superSquash, write)
	e.DELETE(api+"/branch/:rev", h.deleteBranch, write)
	e.POST(api+"/tag/:rev", h.createTag, write)
	e.DELETE(api+"/tag/:rev", h.deleteTag, write)
	e.GET(api+"/refs", h.listRefs, public)
}

// superSquash: POST /api/{types}/{ns}/{name}/super-squash/{branch} with
// {"message": …}: the branch's history becomes one commit.
func (h *Hub) superSquash(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	var req struct {
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		return badRequest("the body is not {\"message\": …}: %v", err)
	}
	branch := revision(c)
	cm, err := h.store.SquashHistory(c.Request().Context(), r, branch, req.Message)
	if errors.Is(err, store.ErrNotFound) {
		return refNotFound("branch", branch, r)
	}
	if err != nil {
		return err
	}
	h.cfg.Released()
	return c.JSON(http.StatusOK, map[string]any{"commitOid": cm.SHA, "commitUrl": h.repoURL(c, r) + "/commit/" + cm.SHA, "success": true})
}

// deleteBranch: DELETE /api/{types}/{ns}/{name}/branch/{branch}.
func (h *Hub) deleteBranch(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	branch := revision(c)
	if strings.HasPrefix(branch, "refs/") {
		return store.ValidRefName(branch) // a tag or another ref is not a branch
	}
	if err := h.store.DeleteRef(c.Request().Context(), r, branch); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return refNotFound("branch", branch, r)
		}
		return err
	}
	h.cfg.Released()
	return c.NoContent(http.StatusOK)
}

// createTag: POST /api/{types}/{ns}/{name}/tag/{revision} with {"tag": …}.
func (h *Hub) createTag(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	var req struct {
		Tag     string `json:"tag"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20)).Decode(&req); err != nil {
		return badRequest("the body is not {\"tag\": …}: %v", err)
	}
	if err := store.ValidRefName(req.Tag); err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	if err := h.store.CreateTag(c.Request().Context(), r, req.Tag, cm); err != nil {
		if errors.Is(err, store.ErrRefExists) {
			msg := "tag " + req.Tag + " already exists"
			c.Response().Header().Set("X-Error-Message", msg)
			return c.JSON(http.StatusConflict, map[string]string{"error": msg})
		}
		return err
	}
	return c.NoContent(http.StatusOK)
}

// deleteTag: DELETE /api/{types}/{ns}/{name}/tag/{tag}.
func (h *Hub) deleteTag(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	tag := param(c, "rev")
	if err := h.store.DeleteRef(c.Request().Context(), r, store.TagRef(tag)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return refNotFound("tag", tag, r)
		}
		return err
	}
	h.cfg.Released()
	return c.NoContent(http.StatusOK)
}

// refNotFound answers for a branch or tag a repo does not have: a name no
// branch or tag may have (store.ValidRefName) is refused as such, 400, any
// other is 404 RevisionNotFound. A ref that exists is deleted whatever its
// name, so that one created before the rule can still go.
func refNotFound(kind, name string, r store.RepoID) error {
	if err := store.ValidRefName(name); err != nil {
		return err
	}
	return hubNotFound("RevisionNotFound", "%s %s not found in %s", kind, name, r)
}

// listRefs: GET /api/{types}/{ns}/{name}/refs.
func (h *Hub) listRefs(c echo.Context) error {
	r, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	refs, err := h.store.Refs(c.Request().Context(), r)
	if err != nil {
		return err
	}
	type refJSON struct {
		Name         string `json:"name"`
		Ref          string `json:"ref"`
		TargetCommit string `json:"targetCommit"`
	}
	branches, tags := []refJSON{}, []refJSON{}
	mirrored := h.mirrored(r)
	mirrorTags := map[string]bool{}
	if mirrored {
		for _, ref := range refs {
			if name, ok := strings.CutPrefix(ref.Name, mirrorTagPrefix); ok {
				mirrorTags[name] = true
			}
		}
	}
	for _, ref := range refs {
		if mirrored {
			// A mirrored repo's refs are the mirror's own (mirror.go): the
			// revision names clients resolved through it show as tags when
			// the upstream lists them so, else as branches; the pins of
			// commits not at all.
			name, ok := strings.CutPrefix(ref.Name, mirrorNamePrefix)
			if !ok || strings.HasPrefix(name, "refs/") {
				continue
			}
			ref.Name, ref.Tag = name, mirrorTags[name]
		}
		if ref.Tag {
			tags = append(tags, refJSON{ref.Name, "refs/tags/" + ref.Name, ref.Commit})
		} else {
			branches = append(branches, refJSON{ref.Name, "refs/heads/" + ref.Name, ref.Commit})
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"branches": branches, "tags": tags, "converts": []refJSON{}, "pullRequests": []refJSON{}})
}
