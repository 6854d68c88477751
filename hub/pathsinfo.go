package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// The routes that describe paths and their history, and the one that
// prepares a copy from another repo: paths-info (huggingface_hub's
// get_paths_info, HfFileSystem.info and modified, the copy operations of
// create_commit; @huggingface/hub's pathsInfo and downloadFileToCacheDir),
// commits (history.go) and lfs-files/duplicate (create_commit's copies
// from another repo, hf repos cp between repos).

func (h *Hub) pathRoutes(e *echo.Echo) {
	public, write := h.cfg.GuardPublic(), h.cfg.Guard(store.ScopeWrite)
	api := "/api/:types/:ns/:name"
	e.POST(api+"/paths-info/:rev", h.pathsInfo, public)
	e.GET(api+"/commits/:rev", h.commits, public)
	e.POST(api+"/lfs-files/duplicate", h.duplicateLFSFiles, write)
}

// pathsInfoRequest is the body of paths-info: a form (huggingface_hub sends
// paths=…&paths=…&expand=false) or JSON ({"paths": […], "expand": true},
// as @huggingface/hub sends it).
type pathsInfoRequest struct {
	Paths  []string `json:"paths"`
	Expand bool     `json:"expand"`
}

func (h *Hub) readPathsInfoRequest(c echo.Context) (pathsInfoRequest, error) {
	var req pathsInfoRequest
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return req, err
	}
	defer release()
	raw, err := io.ReadAll(body)
	if err != nil {
		return req, badRequest("reading the paths-info body: %v", err)
	}
	// JSON when it says so, or when it says nothing and looks like it.
	ct, _, _ := mime.ParseMediaType(c.Request().Header.Get("Content-Type"))
	if ct == "application/json" || (ct == "" && strings.HasPrefix(strings.TrimSpace(string(raw)), "{")) {
		if err := json.Unmarshal(raw, &req); err != nil {
			return req, badRequest("the body is not {\"paths\": [...], \"expand\": ...}: %v", err)
		}
	} else {
		form, err := url.ParseQuery(string(raw))
		if err != nil {
			return req, badRequest("the body is not a form of paths and expand: %v", err)
		}
		req.Paths = append(form["paths"], form["paths[]"]...)
		switch v := strings.ToLower(form.Get("expand")); v {
		case "", "false", "0":
		case "true", "1":
			req.Expand = true
		default:
			return req, badRequest("expand=%q is neither true nor false", form.Get("expand"))
		}
	}
	if len(req.Paths) > MaxJSONEntries {
		return req, &TooLargeError{Message: fmt.Sprintf("%d paths in one paths-info request, over the %d it may ask for", len(req.Paths), MaxJSONEntries),
			Hint: fmt.Sprintf("ask for at most %d paths per request", MaxJSONEntries)}
	}
	return req, nil
}

// pathsInfo: POST /api/{types}/{ns}/{name}/paths-info/{rev}. Each path
// asked for that is a file or a folder at rev answers as the tree route
// answers it, in the order asked; a path that is neither is left out, as
// the Hub leaves it out. With expand, each carries lastCommit (id, title,
// date), the newest commit of rev's history that changed the path
// (store.LastChanges). openxet scans no file, so no answer carries securityFileStatus.
func (h *Hub) pathsInfo(c echo.Context) error {
	r, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	req, err := h.readPathsInfoRequest(c)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	items := []map[string]any{}
	var found []string
	seen := map[string]bool{}
	for _, p := range req.Paths {
		p = strings.Trim(p, "/")
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		if e, ok := cm.Entry(p); ok {
			items = append(items, fileItem(e))
		} else if isFolder(cm.Tree, p) {
			items = append(items, dirItem(cm, p))
		} else {
			continue
		}
		found = append(found, p)
	}
	if req.Expand && len(found) > 0 {
		last, err := h.store.LastChanges(c.Request().Context(), r, cm.SHA, found)
		if err != nil {
			return err
		}
		for i, p := range found {
			if lc, ok := last[p]; ok {
				items[i]["lastCommit"] = lastCommitJSON(lc)
			}
		}
	}
	return c.JSON(http.StatusOK, h.forReader(c, items))
}

// duplicateLFSFiles: POST /api/{types}/{ns}/{name}/lfs-files/duplicate with
// {"target": {"type": …, "name": "ns/repo"}, "files": [{"xetHash", "sha256",
// "filename"}]}, which huggingface_hub sends on the source repo before a
// commit that copies its Xet files into target. A tenant's files serve
// every repo of the tenant, so there is nothing to duplicate and nothing
// is charged: the answer checks that target is a repo of the caller's
// tenant (another tenant's is not found) and lists as failed each file
// that is not one of the tenant's.
func (h *Hub) duplicateLFSFiles(c echo.Context) error {
	src, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	var req struct {
		Target struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"target"`
		Files []struct {
			XetHash  string `json:"xetHash"`
			SHA256   string `json:"sha256"`
			Filename string `json:"filename"`
		} `json:"files"`
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		return badRequest("the body is not {\"target\": {...}, \"files\": [...]}: %v", err)
	}
	if len(req.Files) > MaxJSONEntries {
		return &TooLargeError{Message: fmt.Sprintf("%d files in one duplicate request, over the %d it may name", len(req.Files), MaxJSONEntries),
			Hint: fmt.Sprintf("send at most %d files per request", MaxJSONEntries)}
	}
	typ := req.Target.Type
	if typ == "" {
		typ = "model"
	}
	if _, ok := repoTypePlural[typ+"s"]; !ok {
		return badRequest("unknown target repo type %q (model, dataset or space)", typ)
	}
	ns, name, ok := strings.Cut(req.Target.Name, "/")
	if !ok {
		return badRequest("target name %q is not namespace/name", req.Target.Name)
	}
	target := store.RepoID{Tenant: ns, Type: typ, Name: name}
	ctx := c.Request().Context()
	if ns != src.Tenant {
		return hubNotFound("RepoNotFound", "repository %s not found", target)
	}
	if _, err := h.store.Repo(ctx, target); errors.Is(err, store.ErrNotFound) {
		return hubNotFound("RepoNotFound", "repository %s not found", target)
	} else if err != nil {
		return err
	}
	type failure struct {
		SHA256 string `json:"sha256"`
		Error  string `json:"error"`
	}
	failed := []failure{}
	for _, f := range req.Files {
		if err := checkSHA256(f.SHA256); err != nil {
			failed = append(failed, failure{f.SHA256, fmt.Sprintf("sha256 %v", err)})
			continue
		}
		file, err := h.store.FileBySHA256(ctx, src.Tenant, f.SHA256)
		if errors.Is(err, store.ErrNotFound) {
			failed = append(failed, failure{f.SHA256, fmt.Sprintf("no file of %s has sha256 %s", src, f.SHA256)})
			continue
		}
		if err != nil {
			return err
		}
		if f.XetHash != "" && f.XetHash != file.Hash.String() {
			failed = append(failed, failure{f.SHA256, fmt.Sprintf("the file of sha256 %s has xet hash %s, not %s", f.SHA256, file.Hash, f.XetHash)})
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"failed": failed})
}
