package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"

	"openxet/store/accounts"
)

// Repo settings, moves, duplicates and the storage listing, as
// huggingface_hub 2.4.0 calls them: update_repo_settings (PUT …/settings),
// move_repo and `hf repos move` (POST /api/repos/move), duplicate_repo and
// `hf repos duplicate` (POST …/duplicate), list_user_repos and `hf repos ls`
// (GET /api/settings/repositories). Everything stays within the caller's
// tenant: a repo of another tenant is not found (forbidden when the caller
// may read it, docs/sharing.md), a target in another namespace is
// forbidden.

func (h *Hub) settingsRoutes(e *echo.Echo) {
	read, write := h.cfg.Guard(accounts.ScopeRead), h.cfg.Guard(accounts.ScopeWrite)
	api := "/api/:types/:ns/:name"
	e.PUT(api+"/settings", h.updateSettings, write)
	e.POST(api+"/duplicate", h.duplicateRepo, write)
	e.POST("/api/repos/move", h.moveRepo, write)
	e.GET("/api/settings/repositories", h.storageListing, read)
	e.GET("/api/organizations/:org/settings/repositories", h.storageListing, read)
}

// decodeSmallJSON decodes a small JSON request body into v; 400 when it is
// not JSON of that shape.
func decodeSmallJSON(c echo.Context, what string, v any) error {
	dec := json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		return badRequest("the body is not a %s request: %v", what, err)
	}
	return nil
}

// visibilityOf reads the visibility a request asks for: "visibility", or
// the older "private" flag; "" when it asks for none.
func visibilityOf(visibility string, private *bool) (string, error) {
	if visibility != "" {
		if !slices.Contains(store.Visibilities, visibility) {
			return "", badRequest("visibility %q is not one of %s", visibility, strings.Join(store.Visibilities, ", "))
		}
		return visibility, nil
	}
	if private != nil {
		if *private {
			return "private", nil
		}
		return "public", nil
	}
	return "", nil
}

func (h *Hub) updateSettings(c echo.Context) error {
	r, err := h.apiRepo(c, forAdmin)
	if err != nil {
		return err
	}
	var req struct {
		Gated      json.RawMessage `json:"gated"`
		Visibility string          `json:"visibility"`
		Private    *bool           `json:"private"`
	}
	if err := decodeSmallJSON(c, "repo settings", &req); err != nil {
		return err
	}
	var set store.RepoSettings
	if g := bytes.TrimSpace(req.Gated); len(g) > 0 && !bytes.Equal(g, []byte("null")) {
		var gated string
		switch {
		case bytes.Equal(g, []byte("false")):
		case json.Unmarshal(g, &gated) == nil && (gated == "auto" || gated == "manual"):
		default:
			return badRequest("gated %s is not \"auto\", \"manual\" or false", g)
		}
		set.Gated = &gated
	}
	vis, err := visibilityOf(req.Visibility, req.Private)
	if err != nil {
		return err
	}
	if vis != "" {
		set.Visibility = &vis
	}
	if set.Gated == nil && set.Visibility == nil {
		return badRequest("the body changes no setting: send gated, visibility or private")
	}
	repo, err := h.store.SetRepoSettings(c.Request().Context(), r, set)
	if err != nil {
		return h.repoError(r, err)
	}
	return c.JSON(http.StatusOK, map[string]any{"private": repo.Private, "visibility": repo.VisibilityOf(), "gated": gatedValue(repo.Gated)})
}

// repoError reports a store miss of r as the Hub's RepoNotFound.
func (h *Hub) repoError(r store.RepoID, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return hubNotFound("RepoNotFound", "repository %s not found", r)
	}
	return err
}

// splitRepoID splits "ns/name".
func splitRepoID(id string) (ns, name string, ok bool) {
	ns, name, ok = strings.Cut(id, "/")
	return ns, name, ok && ns != "" && name != "" && !strings.Contains(name, "/")
}

// targetNamespace refuses to make repo r (create, move or duplicate into
// it) for a caller without the write level there: a robot credential
// outside its own organization, a token whose owner is not a writing
// member of r's namespace or whose grant does not reach r.
func targetNamespace(id *Principal, r store.RepoID, verb string) error {
	if id.Level(r) >= accounts.WriteAccess {
		return nil
	}
	into := map[bool]string{true: "in", false: "into"}[verb == "create"]
	if id.User != nil {
		return &NamespaceError{
			Message: fmt.Sprintf("this token of user %s cannot %s repos %s namespace %s", id.Tenant, verb, into, r.Tenant),
			Hint:    "that needs the write role in organization " + r.Tenant + " and a token that reaches it"}
	}
	return &NamespaceError{
		Message: fmt.Sprintf("a credential of tenant %s cannot %s repos %s namespace %s", id.Tenant, verb, into, r.Tenant),
		Hint:    "a namespace is a tenant; use a credential of tenant " + r.Tenant}
}

// repoExistsText refuses a move or a duplicate onto a repo that exists, in
// the Hub's words ("A model repository called ns/name already exists").
func repoExistsText(to store.RepoID) string {
	return fmt.Sprintf("A %s repository called %s already exists", to.Type, to)
}

// moveRepo: POST /api/repos/move {"fromRepo": "ns/a", "toRepo": "ns/b",
// "type": "model"}. The old name is free afterwards; until a repo takes it
// again it answers 404 RepoNotFound saying where the repo went (no
// redirect: docs/api.md says why).
func (h *Hub) moveRepo(c echo.Context) error {
	id := h.cfg.Principal(c)
	var req struct {
		FromRepo string `json:"fromRepo"`
		ToRepo   string `json:"toRepo"`
		Type     string `json:"type"`
	}
	if err := decodeSmallJSON(c, "repo move", &req); err != nil {
		return err
	}
	typ := req.Type
	if typ == "" {
		typ = "model"
	}
	if _, ok := repoTypePlural[typ+"s"]; !ok {
		return badRequest("unknown repo type %q (model, dataset or space)", typ)
	}
	fromNS, fromName, ok1 := splitRepoID(req.FromRepo)
	toNS, toName, ok2 := splitRepoID(req.ToRepo)
	if !ok1 || !ok2 {
		return badRequest("fromRepo %q and toRepo %q must both be namespace/name", req.FromRepo, req.ToRepo)
	}
	from := store.RepoID{Tenant: fromNS, Type: typ, Name: fromName}
	if id.Level(from) < accounts.AdminAccess {
		return h.othersRepo(c, id, from)
	}
	to := store.RepoID{Tenant: toNS, Type: typ, Name: toName}
	if err := targetNamespace(id, to, "move"); err != nil {
		return err
	}
	if _, err := h.store.MoveRepo(c.Request().Context(), from, to); err != nil {
		if errors.Is(err, store.ErrRepoExists) {
			return &ExistsError{Message: repoExistsText(to), Hint: "pick another name, or delete that repo first", Cause: err}
		}
		return h.repoError(from, err)
	}
	return c.JSON(http.StatusOK, map[string]any{"url": h.repoURL(c, to), "id": to.String(), "name": to.String()})
}

// duplicateRepo: POST /api/{type}s/{ns}/{name}/duplicate {"repository":
// "ns/new", "visibility": …}: a copy with the whole history that shares
// every file (no byte is copied, so filesCopyPending is false). The source
// is any repo the caller may read but a mirrored one (not served); the
// new repo is in the caller's own
// namespace. From another tenant's repo, the caller's tenant first gets
// every Xet file of the source's history as CommitOperationCopy gives it
// one (copyHistoryFiles), then the history.
func (h *Hub) duplicateRepo(c echo.Context) error {
	from, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	id := h.cfg.Principal(c)
	var req struct {
		Repository string `json:"repository"`
		Visibility string `json:"visibility"`
		Private    *bool  `json:"private"`
	}
	if err := decodeSmallJSON(c, "repo duplicate", &req); err != nil {
		return err
	}
	ns, name, ok := splitRepoID(req.Repository)
	if !ok {
		return badRequest("repository %q must be namespace/name", req.Repository)
	}
	to := store.RepoID{Tenant: ns, Type: from.Type, Name: name}
	if err := targetNamespace(id, to, "duplicate"); err != nil {
		return err
	}
	vis, err := visibilityOf(req.Visibility, req.Private)
	if err != nil {
		return err
	}
	body := map[string]any{"url": h.repoURL(c, to), "id": to.String(), "name": to.String(), "filesCopyPending": false}
	exists := func(err error) error {
		// duplicate_repo(exist_ok=True) accepts a 409.
		return &ExistsError{Message: repoExistsText(to), Fields: body, Cause: err}
	}
	if h.mirrored(from) {
		// A mirrored repo holds the revisions its readers resolved, under
		// the mirror's own refs, not the upstream's branches and history.
		return notServed("duplicates of mirrored repos", "copy its files into a repo of yours with CommitOperationCopy (create_commit), or download and upload them")
	}
	if from.Tenant != to.Tenant {
		// A taken name is refused before any file is copied.
		if _, err := h.store.Repo(c.Request().Context(), to); err == nil {
			return exists(store.ErrRepoExists)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := h.copyHistoryFiles(c, from, to.Tenant); err != nil {
			return err
		}
	}
	if _, err := h.store.DuplicateRepo(c.Request().Context(), from, to, vis); err != nil {
		if errors.Is(err, store.ErrRepoExists) {
			return exists(err)
		}
		return h.repoError(from, err)
	}
	return c.JSON(http.StatusOK, body)
}

// duplicateBatch is how many files copyHistoryFiles copies per CopyFiles
// call, so that a long history holds the memory of a batch at a time.
const duplicateBatch = 256

// copyHistoryFiles registers every Xet file of from's history for tenant,
// as lfs-files/duplicate does for the files a commit copies: charged as an
// upload of the same bytes under server.dedup_scope, held to the quota. A
// refusal of one file ends the
// duplicate with it; what earlier batches registered stays the tenant's,
// referenced by no repo (as an upload whose commit never came).
func (h *Hub) copyHistoryFiles(c echo.Context, from store.RepoID, tenant string) error {
	ctx := c.Request().Context()
	files, err := h.store.HistoryFiles(ctx, from)
	if err != nil {
		return h.repoError(from, err)
	}
	up := h.cfg.Uploads()
	opt := store.CopyOptions{Own: !up.DedupGlobal, DefaultQuotaBytes: up.DefaultQuotaBytes,
		Reserve: func(n int64) (func(), error) { return h.cfg.Reserve(c, n) }}
	for batch := range slices.Chunk(files, duplicateBatch) {
		_, err := h.store.CopyFiles(ctx, from, tenant, batch, opt)
		if refused, ok := errors.AsType[*store.CopyRefusedError](err); ok && len(refused.Refused) > 0 {
			// The source's history changed between the listing and the copy.
			return fmt.Errorf("repository %s changed during the duplicate (%s): %w", h.shown(from), refused.Refused[0].Reason, store.ErrRefMoved)
		}
		if errors.Is(err, store.ErrNotFound) {
			return hubNotFound("RepoNotFound", "repository %s not found", h.shown(from))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// storageListing: GET /api/settings/repositories (and
// /api/organizations/{ns}/settings/repositories for a namespace the
// caller reads as a member; another one lists nothing), as
// list_user_repos and `hf repos ls` read it: every repo of the namespace
// with its visibility and storage, the bytes of the files at the head of
// main.
func (h *Hub) storageListing(c echo.Context) error {
	id := h.cfg.Principal(c)
	items := []map[string]any{}
	ns := id.Tenant
	if org := c.Param("org"); org != "" {
		ns = org
	}
	if !id.Member(ns) {
		return c.JSON(http.StatusOK, items)
	}
	ctx := c.Request().Context()
	var total int64
	for _, typ := range store.RepoTypes {
		repos, err := h.store.Repos(ctx, ns, typ)
		if err != nil {
			return err
		}
		for _, r := range repos {
			var size int64
			if r.HeadSHA != "" {
				cm, err := h.store.Resolve(ctx, r.RepoID, r.HeadSHA)
				if err != nil {
					return err
				}
				for _, e := range cm.Tree {
					size += e.SizeBytes
				}
			}
			total += size
			items = append(items, map[string]any{"id": r.RepoID.String(), "type": typ, "updatedAt": r.Updated.Format(hubTime),
				"visibility": r.VisibilityOf(), "storage": size})
		}
	}
	for _, it := range items {
		pct := 0.0
		if total > 0 {
			pct = float64(it["storage"].(int64)) * 100 / float64(total)
		}
		it["storagePercent"] = pct
	}
	return c.JSON(http.StatusOK, items)
}
