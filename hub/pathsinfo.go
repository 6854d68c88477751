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
	"openxet/xet"

	"openxet/store/accounts"
)

// The routes that describe paths and their history, and the one that
// prepares a copy from another repo: paths-info (huggingface_hub's
// get_paths_info, HfFileSystem.info and modified, the copy operations of
// create_commit; @huggingface/hub's pathsInfo and downloadFileToCacheDir),
// commits (history.go) and lfs-files/duplicate (create_commit's copies
// from another repo, hf repos cp between repos).

func (h *Hub) pathRoutes(e *echo.Echo) {
	public, write := h.cfg.GuardPublic(), h.cfg.Guard(accounts.ScopeWrite)
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
	var dirs map[string]string
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
			if dirs == nil {
				dirs = treeIDs(cm)
			}
			items = append(items, dirItem(dirs, p))
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

// duplicateRequest is the body of lfs-files/duplicate.
type duplicateRequest struct {
	Target struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"target"`
	Files []duplicateFile `json:"files"`
}

type duplicateFile struct {
	XetHash  string `json:"xetHash"`
	SHA256   string `json:"sha256"`
	Filename string `json:"filename"`
}

// duplicateFailure is one entry of the answer's failed list, which
// huggingface_hub raises as FileDuplicationError.
type duplicateFailure struct {
	SHA256 string `json:"sha256"`
	Error  string `json:"error"`
}

// duplicateLFSFiles: POST /api/{types}/{ns}/{name}/lfs-files/duplicate with
// {"target": {"type": …, "name": "ns/repo"}, "files": [{"xetHash", "sha256",
// "filename"}]}, which huggingface_hub sends on the source repo before a
// commit that copies its Xet files into target (docs/sharing.md, "Copying
// files between tenants"). The source is read: a repo the caller may read
// (its own tenant's, a Shared repo of another, a mirrored one); target is
// written: a repo of the caller's own tenant (another tenant's is refused
// as every write to it is). The answer is {"failed": [{"sha256",
// "error"}]}, empty when every file is the target tenant's now.
//
// Within one tenant a file serves every repo of the tenant, so there is
// nothing to copy and nothing is charged: a file that is not one of the
// tenant's is listed as failed. From another tenant's repo, each file must
// be a Xet file that a revision of the source names, with the SHA-256
// given (never a file found by hash alone); the files are then registered
// for the caller's tenant and charged as an upload of the same bytes
// would be (store.CopyFiles), all or none: when one is listed as failed
// nothing changed, and past the quota the answer is 403 quota_exceeded.
func (h *Hub) duplicateLFSFiles(c echo.Context) error {
	src, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	req, err := h.readDuplicateRequest(c)
	if err != nil {
		return err
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
	id := h.cfg.Principal(c)
	target := store.RepoID{Tenant: ns, Type: typ, Name: name}
	ctx := c.Request().Context()
	if id.Level(target) < accounts.WriteAccess {
		return h.othersRepo(c, id, target)
	}
	if _, err := h.store.Repo(ctx, target); errors.Is(err, store.ErrNotFound) {
		return hubNotFound("RepoNotFound", "repository %s not found", target)
	} else if err != nil {
		return err
	}
	failed := []duplicateFailure{}
	if src.Tenant == id.Tenant {
		for _, f := range req.Files {
			if msg, err := h.ownFileFailure(c, src, f); err != nil {
				return err
			} else if msg != "" {
				failed = append(failed, duplicateFailure{f.SHA256, msg})
			}
		}
		return c.JSON(http.StatusOK, map[string]any{"failed": failed})
	}
	copies := make([]store.FileCopy, 0, len(req.Files))
	for _, f := range req.Files {
		if err := checkSHA256(f.SHA256); err != nil {
			failed = append(failed, duplicateFailure{f.SHA256, fmt.Sprintf("sha256 %v", err)})
			continue
		}
		x, err := xet.ParseHash(f.XetHash)
		if err != nil {
			failed = append(failed, duplicateFailure{f.SHA256, fmt.Sprintf("xetHash %q is not a Xet hash (64 lowercase hex digits): only Xet files are copied between tenants", f.XetHash)})
			continue
		}
		copies = append(copies, store.FileCopy{Hash: x, SHA256: f.SHA256})
	}
	if len(failed) > 0 || len(copies) == 0 {
		return c.JSON(http.StatusOK, map[string]any{"failed": failed})
	}
	if err := h.pullMirrored(c, src, copies); err != nil {
		return err
	}
	up := h.cfg.Uploads()
	_, err = h.store.CopyFiles(ctx, src, id.Tenant, copies, store.CopyOptions{Own: !up.DedupGlobal, DefaultQuotaBytes: up.DefaultQuotaBytes,
		Reserve: func(n int64) (func(), error) { return h.cfg.Reserve(c, n) }})
	if refused, ok := errors.AsType[*store.CopyRefusedError](err); ok {
		for _, r := range refused.Refused {
			failed = append(failed, duplicateFailure{r.File.SHA256, r.Reason})
		}
		return c.JSON(http.StatusOK, map[string]any{"failed": failed})
	}
	if errors.Is(err, store.ErrNotFound) {
		// The source stopped being shared (or went) since it was read.
		return hubNotFound("RepoNotFound", "repository %s not found", h.shown(src))
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"failed": failed})
}

func (h *Hub) readDuplicateRequest(c echo.Context) (duplicateRequest, error) {
	var req duplicateRequest
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return req, err
	}
	defer release()
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		return req, badRequest("the body is not {\"target\": {...}, \"files\": [...]}: %v", err)
	}
	if len(req.Files) > MaxJSONEntries {
		return req, &TooLargeError{Message: fmt.Sprintf("%d files in one duplicate request, over the %d it may name", len(req.Files), MaxJSONEntries),
			Hint: fmt.Sprintf("send at most %d files per request", MaxJSONEntries)}
	}
	return req, nil
}

// ownFileFailure says why f is not a file of src's tenant ("" when it is),
// for a copy between two repos of one tenant.
func (h *Hub) ownFileFailure(c echo.Context, src store.RepoID, f duplicateFile) (string, error) {
	if err := checkSHA256(f.SHA256); err != nil {
		return fmt.Sprintf("sha256 %v", err), nil
	}
	file, err := h.store.FileBySHA256(c.Request().Context(), src.Tenant, f.SHA256)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Sprintf("no file of %s has sha256 %s", src, f.SHA256), nil
	}
	if err != nil {
		return "", err
	}
	if f.XetHash != "" && f.XetHash != file.Hash.String() {
		return fmt.Sprintf("the file of sha256 %s has xet hash %s, not %s", f.SHA256, file.Hash, f.XetHash), nil
	}
	return "", nil
}

// pullMirrored makes the files of a copy from a mirrored repo stored,
// pulling from the upstream those a revision of the repo names that the
// mirror has not pulled yet (as a reconstruction of them would). Files no
// revision names are left for CopyFiles to refuse.
func (h *Hub) pullMirrored(c echo.Context, src store.RepoID, copies []store.FileCopy) error {
	if !h.mirrored(src) {
		return nil
	}
	ctx := c.Request().Context()
	p := h.cfg.Principal(c)
	reserve := func(n int64) ([]byte, func(), error) { return h.cfg.ReserveBuffer(c, n) }
	for _, fc := range copies {
		if _, err := h.store.File(ctx, src.Tenant, fc.Hash); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		sha, e, err := h.store.EntryByHash(ctx, src, fc.Hash.String())
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if _, err := h.cfg.Mirror.Fetch(ctx, p.Tenant, src, sha, e, nil, reserve); err != nil {
			return err
		}
	}
	return nil
}
