package hub

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/refusal"
	"openxet/store"
)

// The Hub API: what huggingface_hub, the hf CLI and @huggingface/hub ask of
// a Hub at HF_ENDPOINT (repos, preupload, commits, trees, resolve, and the
// xet token endpoints that hand out CAS tokens). Repos live under a
// namespace equal to the tenant; a credential reads and writes only its own
// tenant's repos.

const (
	// regularMaxBytes: preupload sends files up to this size as regular
	// (base64 in the commit); larger ones go through the CAS.
	regularMaxBytes = 64 << 10
	// maxRegularFileBytes caps one regular file in a commit.
	maxRegularFileBytes = 1 << 20
	// maxCommitBytes caps a commit body.
	maxCommitBytes = 32 << 20
	treePageSize   = 1000

	// maxHubJSONBytes caps the JSON body of preupload and LFS batch.
	maxHubJSONBytes = 16 << 20
	// MaxJSONEntries caps the files of one preupload and the objects of
	// one LFS batch (huggingface_hub sends 256 at most, @huggingface/hub
	// and git-lfs 100).
	MaxJSONEntries = 1000
	// hubJSONBytesPerEntry bounds what one file or object holds once
	// decoded and answered, beyond its own text.
	hubJSONBytesPerEntry = 512
)

var repoTypePlural = map[string]string{"models": "model", "datasets": "dataset", "spaces": "space"}

// repoURLPrefix is the path prefix of a repo type in Hub URLs.
func repoURLPrefix(typ string) string {
	switch typ {
	case "dataset":
		return "datasets/"
	case "space":
		return "spaces/"
	}
	return ""
}

// hubNotFound is a 404 with the X-Error-Code the Python client maps
// (RepoNotFound, RevisionNotFound, EntryNotFound).
func hubNotFound(code, format string, args ...any) error {
	return &refusal.Error{Status: 404, Code: "not_found", Message: fmt.Sprintf(format, args...),
		Hint: "check the repo id, revision and path", Headers: map[string]string{"X-Error-Code": code}}
}

func (h *Hub) repoRoutes(e *echo.Echo) {
	read, write := h.cfg.Guard("read"), h.cfg.Guard("write")
	e.GET("/api/agent-harnesses", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"standardEnvVars": []string{}, "harnesses": map[string]any{}})
	})
	e.POST("/api/validate-yaml", func(c echo.Context) error {
		io.Copy(io.Discard, io.LimitReader(c.Request().Body, 1<<20))
		return c.JSON(http.StatusOK, map[string]any{"errors": []any{}, "warnings": []any{}})
	}, read)
	e.POST("/api/repos/create", h.createRepo, write)
	e.DELETE("/api/repos/delete", h.deleteRepo, write)

	api := "/api/:types/:ns/:name"
	e.GET(api, h.repoInfo, read)
	e.GET(api+"/revision/:rev", h.repoInfo, read)
	e.POST(api+"/branch/:rev", h.createBranch, write)
	e.GET(api+"/tree/:rev", h.tree, read)
	e.GET(api+"/tree/:rev/*", h.tree, read)
	e.POST(api+"/preupload/:rev", h.preupload, write)
	e.POST(api+"/commit/:rev", h.commit, write)
	e.GET(api+"/xet-read-token/:rev", h.xetToken(store.ScopeRead), read)
	e.GET(api+"/xet-write-token/:rev", h.xetToken(store.ScopeWrite), write)

	for _, p := range []string{"", "/datasets", "/spaces"} {
		e.GET(p+"/:ns/:name/resolve/:rev/*", h.resolve, read)
		e.HEAD(p+"/:ns/:name/resolve/:rev/*", h.resolve, read)
		e.POST(p+"/:ns/:repo/info/lfs/objects/batch", h.lfsBatch, write)
	}
}

// unescape decodes a path parameter (revisions arrive as refs%2Fpr%2F1).
func unescape(v string) string {
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// revision maps the client's revision names to a ref or commit.
func revision(c echo.Context) string {
	rev := unescape(c.Param("rev"))
	if rev == "" || rev == "None" {
		return "main"
	}
	return strings.TrimPrefix(rev, "refs/heads/")
}

// repoTypeOfPath is the repo type a file or page path names by its prefix.
func repoTypeOfPath(p string) string {
	switch {
	case strings.HasPrefix(p, "/datasets/"):
		return "dataset"
	case strings.HasPrefix(p, "/spaces/"):
		return "space"
	}
	return "model"
}

// repoID reads the repo of a request and checks that the caller may see it.
// A repo of another tenant is reported as not found.
func (h *Hub) repoID(c echo.Context, typ string) (store.RepoID, error) {
	id := h.cfg.Principal(c)
	r := store.RepoID{Tenant: unescape(c.Param("ns")), Type: typ, Name: unescape(c.Param("name"))}
	if r.Tenant != id.Tenant {
		return r, hubNotFound("RepoNotFound", "repository %s/%s not found", r.Tenant, r.Name)
	}
	if _, err := h.store.Repo(c.Request().Context(), r); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return r, hubNotFound("RepoNotFound", "repository %s/%s not found", r.Tenant, r.Name)
		}
		return r, err
	}
	return r, nil
}

// apiRepo reads the repo of an /api/{types}/{ns}/{name}/… route.
func (h *Hub) apiRepo(c echo.Context) (store.RepoID, error) {
	typ, ok := repoTypePlural[c.Param("types")]
	if !ok {
		return store.RepoID{}, refusal.Wrap(refusal.ErrNotFound, "unknown repo type %q (models, datasets or spaces)", c.Param("types"))
	}
	return h.repoID(c, typ)
}

// resolveRev resolves a revision of a repo.
func (h *Hub) resolveRev(c echo.Context, r store.RepoID, rev string) (store.Commit, error) {
	cm, err := h.store.Resolve(c.Request().Context(), r, rev)
	if errors.Is(err, store.ErrNotFound) {
		return cm, hubNotFound("RevisionNotFound", "revision %s not found in %s", rev, r)
	}
	return cm, err
}

func (h *Hub) repoURL(c echo.Context, r store.RepoID) string {
	return h.cfg.BaseURL(c) + "/" + repoURLPrefix(r.Type) + r.Tenant + "/" + r.Name
}

func (h *Hub) createRepo(c echo.Context) error {
	id := h.cfg.Principal(c)
	var req struct {
		Name         string  `json:"name"`
		Organization *string `json:"organization"`
		Type         string  `json:"type"`
		Visibility   string  `json:"visibility"`
		Private      *bool   `json:"private"`
	}
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20)).Decode(&req); err != nil {
		return badRequest("the body is not a repo creation request: %v", err)
	}
	ns := id.Tenant
	if req.Organization != nil && *req.Organization != "" {
		ns = *req.Organization
	}
	if before, after, ok := strings.Cut(req.Name, "/"); ok {
		ns, req.Name = before, after
	}
	if ns != id.Tenant {
		return &refusal.Error{Status: 403, Code: "forbidden", Message: fmt.Sprintf("a credential of tenant %s cannot create repos in namespace %s", id.Tenant, ns),
			Hint: "a namespace is a tenant; use a credential of tenant " + ns}
	}
	typ := req.Type
	if typ == "" {
		typ = "model"
	}
	if _, ok := repoTypePlural[typ+"s"]; !ok {
		return badRequest("unknown repo type %q (model, dataset or space)", typ)
	}
	r := store.RepoID{Tenant: ns, Type: typ, Name: req.Name}
	private := req.Visibility == "private" || (req.Private != nil && *req.Private)
	body := map[string]any{"url": h.repoURL(c, r), "id": r.String(), "name": r.String()}
	if _, err := h.store.CreateRepo(c.Request().Context(), r, private); err != nil {
		if errors.Is(err, store.ErrRepoExists) {
			// huggingface_hub's create_repo(exist_ok=True) reads the url of
			// the 409 answer.
			return &refusal.Error{Status: http.StatusConflict, Code: "conflict", Message: "You already created this " + typ + " repo", Fields: body, Cause: err}
		}
		return err
	}
	return c.JSON(http.StatusOK, body)
}

func (h *Hub) deleteRepo(c echo.Context) error {
	id := h.cfg.Principal(c)
	var req struct {
		Name         string  `json:"name"`
		Organization *string `json:"organization"`
		Type         string  `json:"type"`
	}
	if err := json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20)).Decode(&req); err != nil {
		return badRequest("the body is not a repo deletion request: %v", err)
	}
	ns := id.Tenant
	if req.Organization != nil && *req.Organization != "" {
		ns = *req.Organization
	}
	typ := req.Type
	if typ == "" {
		typ = "model"
	}
	r := store.RepoID{Tenant: ns, Type: typ, Name: req.Name}
	if ns != id.Tenant {
		return hubNotFound("RepoNotFound", "repository %s not found", r)
	}
	if err := h.store.DeleteRepo(c.Request().Context(), r); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return hubNotFound("RepoNotFound", "repository %s not found", r)
		}
		return err
	}
	return c.NoContent(http.StatusOK)
}

const hubTime = "2006-01-02T15:04:05.000Z"

// lfsPointer is the git-lfs pointer text of a xet file.
func lfsPointer(sha string, size int64) string {
	return fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha, size)
}

// gitBlobOID is git's blob id of content.
func gitBlobOID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

func (h *Hub) repoInfo(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	rev := "main"
	if c.Param("rev") != "" {
		rev = revision(c)
	}
	cm, err := h.resolveRev(c, r, rev)
	if err != nil {
		return err
	}
	repo, err := h.store.Repo(c.Request().Context(), r)
	if err != nil {
		return err
	}
	siblings := make([]map[string]any, 0, len(cm.Tree))
	for _, e := range cm.Tree {
		sib := map[string]any{"rfilename": e.Path, "size": e.SizeBytes, "blobId": e.GitOID}
		if e.XetHash != "" {
			sib["lfs"] = map[string]any{"sha256": e.SHA256, "size": e.SizeBytes, "pointerSize": len(lfsPointer(e.SHA256, e.SizeBytes))}
		}
		siblings = append(siblings, sib)
	}
	return c.JSON(http.StatusOK, map[string]any{
		"_id": r.String(), "id": r.String(), "modelId": r.String(), "author": r.Tenant, "sha": cm.SHA,
		"private": repo.Private, "disabled": false, "gated": false,
		"createdAt": repo.Created.Format(hubTime), "lastModified": cm.Created.Format(hubTime),
		"siblings": siblings, "tags": []string{},
	})
}

func (h *Hub) createBranch(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	var req struct {
		StartingPoint string `json:"startingPoint"`
	}
	json.NewDecoder(io.LimitReader(c.Request().Body, 1<<20)).Decode(&req)
	branch := revision(c)
	ctx := c.Request().Context()
	if ok, err := h.store.HasRef(ctx, r, branch); err != nil {
		return err
	} else if ok {
		return &refusal.Error{Status: http.StatusConflict, Code: "conflict", Message: fmt.Sprintf("branch %s already exists in %s", branch, r)}
	}
	from := req.StartingPoint
	if from == "" {
		from = "main"
	}
	cm, err := h.resolveRev(c, r, from)
	if err != nil {
		return err
	}
	if err := h.store.CreateRef(ctx, r, branch, cm); err != nil {
		return err
	}
	return c.NoContent(http.StatusOK)
}

// treeItems lists the files and (derived) folders under dir.
func treeItems(cm store.Commit, dir string, recursive bool) []map[string]any {
	dir = strings.Trim(dir, "/")
	items := []map[string]any{}
	seenDirs := map[string]bool{}
	addDir := func(p string) {
		if !seenDirs[p] {
			seenDirs[p] = true
			sum := sha1.Sum([]byte("tree:" + cm.SHA + ":" + p))
			items = append(items, map[string]any{"type": "directory", "path": p, "oid": hex.EncodeToString(sum[:]), "size": 0})
		}
	}
	for _, e := range cm.Tree {
		rel := e.Path
		if dir != "" {
			if !strings.HasPrefix(e.Path, dir+"/") {
				continue
			}
			rel = strings.TrimPrefix(e.Path, dir+"/")
		}
		parts := strings.Split(rel, "/")
		if !recursive && len(parts) > 1 {
			addDir(path.Join(dir, parts[0]))
			continue
		}
		if recursive {
			for i := 1; i < len(parts); i++ {
				addDir(path.Join(dir, strings.Join(parts[:i], "/")))
			}
		}
		item := map[string]any{"type": "file", "path": e.Path, "size": e.SizeBytes, "oid": e.GitOID}
		if e.XetHash != "" {
			item["lfs"] = map[string]any{"oid": e.SHA256, "size": e.SizeBytes, "pointerSize": len(lfsPointer(e.SHA256, e.SizeBytes))}
			item["xetHash"] = e.XetHash
		}
		items = append(items, item)
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i]["path"].(string) < items[j]["path"].(string) })
	return items
}

func (h *Hub) tree(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	dir := unescape(c.Param("*"))
	items := treeItems(cm, dir, c.QueryParam("recursive") == "true" || c.QueryParam("recursive") == "1")
	if dir != "" && len(items) == 0 {
		return hubNotFound("EntryNotFound", "path %s not found in %s at %s", dir, r, cm.SHA)
	}
	start := 0
	if cur := c.QueryParam("cursor"); cur != "" {
		n, err := strconv.Atoi(cur)
		if err != nil || n < 0 || n > len(items) {
			return badRequest("bad cursor %q", cur)
		}
		start = n
	}
	end := min(start+treePageSize, len(items))
	if end < len(items) {
		q := c.QueryParams()
		q.Set("cursor", strconv.Itoa(end))
		next := h.cfg.BaseURL(c) + c.Request().URL.EscapedPath() + "?" + q.Encode()
		c.Response().Header().Set("Link", "<"+next+`>; rel="next"`)
	}
	return c.JSON(http.StatusOK, items[start:end])
}

// hubJSONBody reserves the memory that decoding and answering a preupload
// or LFS batch body takes, before a byte of the body is read, and returns
// the body. The reservation is four times the Content-Length (the decoder's
// buffer, the decoded strings, the answer), or four times the cap for a body
// without one, plus a bound for the entries' own structures. A body over
// maxHubJSONBytes is refused 413 unread.
func (h *Hub) hubJSONBody(c echo.Context) (io.Reader, func(), error) {
	n := c.Request().ContentLength
	if n > maxHubJSONBytes {
		return nil, nil, &refusal.Error{Status: 413, Code: "payload_too_large", Message: fmt.Sprintf("the body of %d bytes is over the %d-byte limit", n, maxHubJSONBytes),
			Hint: fmt.Sprintf("send at most %d files per request", MaxJSONEntries)}
	}
	if n < 0 {
		n = maxHubJSONBytes
	}
	release, err := h.cfg.Reserve(c, 4*n+MaxJSONEntries*hubJSONBytesPerEntry)
	if err != nil {
		return nil, nil, err
	}
	return io.LimitReader(c.Request().Body, n), release, nil
}

// decodeJSONObject reads one JSON object (or null) from dec, member by
// member: member gets each key and must decode its value from dec. Callers
// match keys as encoding/json matches field names, case-insensitively.
func decodeJSONObject(dec *json.Decoder, member func(key string) error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want an object, found %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := member(key); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// decodeJSONArray reads a JSON array (or null) from dec, element by element,
// each decoded by elem; more than MaxJSONEntries elements are refused 413
// before the next one is decoded.
func decodeJSONArray(dec *json.Decoder, what string, elem func() error) error {
	if tok, err := dec.Token(); err != nil {
		return err
	} else if tok == nil {
		return nil
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("%s: want an array", what)
	}
	for n := 0; dec.More(); n++ {
		if n == MaxJSONEntries {
			return &refusal.Error{Status: 413, Code: "payload_too_large", Message: fmt.Sprintf("more than %d %s in one request", MaxJSONEntries, what),
				Hint: fmt.Sprintf("send at most %d %s per request", MaxJSONEntries, what)}
		}
		if err := elem(); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

// skipJSON consumes one JSON value from dec.
func skipJSON(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}

// storedContent reports whether tenant already registered a file whose
// SHA-256 is sha (hex, any case; "" is unknown).
func (h *Hub) storedContent(ctx context.Context, tenant, sha string) (bool, error) {
	if sha == "" {
		return false, nil
	}
	_, err := h.store.FileBySHA256(ctx, tenant, strings.ToLower(sha))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// quotaForNew refuses, before any byte is sent, an upload of newBytes more
// bytes that cannot fit the tenant's quota.
func (h *Hub) quotaForNew(c echo.Context, tenant string, newBytes int64) error {
	if newBytes == 0 {
		return nil
	}
	lim, err := h.cfg.TenantLimits(c, tenant)
	if err != nil || lim.QuotaBytes < 0 {
		return err
	}
	usage, err := h.store.Usage(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	if limits.CheckQuota(lim.QuotaBytes, usage, 0, newBytes) == limits.QuotaExceeded {
		return limits.NewQuotaError(limits.QuotaExceeded, tenant, lim.QuotaBytes, usage, 0, newBytes)
	}
	return nil
}

func (h *Hub) preupload(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	// sha is sent by older huggingface_hub releases; current clients send
	// path, size and sample only.
	type preuploadFile struct {
		Path   string `json:"path"`
		Sample string `json:"sample"`
		Size   int64  `json:"size"`
		SHA    string `json:"sha"`
	}
	var files []preuploadFile
	dec := json.NewDecoder(body)
	err = decodeJSONObject(dec, func(key string) error {
		if !strings.EqualFold(key, "files") {
			return skipJSON(dec)
		}
		return decodeJSONArray(dec, "files", func() error {
			var f preuploadFile
			err := dec.Decode(&f)
			files = append(files, f)
			return err
		})
	})
	if err != nil {
		var ae *refusal.Error
		if errors.As(err, &ae) {
			return err
		}
		return badRequest("the body is not a preupload request: %v", err)
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	out := make([]map[string]any, 0, len(files))
	var newBytes int64
	counted := map[string]bool{} // SHA-256s already counted in this request
	for _, f := range files {
		mode := "lfs"
		if f.Size <= regularMaxBytes {
			mode = "regular"
		}
		item := map[string]any{"path": f.Path, "uploadMode": mode, "shouldIgnore": false}
		cur, ok := cm.Entry(f.Path)
		if ok {
			if cur.XetHash != "" {
				item["oid"] = cur.SHA256
			} else {
				item["oid"] = cur.GitOID
			}
		}
		out = append(out, item)
		// Only bytes the tenant does not own yet count: not a file already
		// at the path with that size, nor content it stored before (by
		// SHA-256), nor content counted once in this request.
		if mode != "lfs" || (ok && cur.SizeBytes == f.Size) {
			continue
		}
		sha := strings.ToLower(f.SHA)
		if sha != "" && counted[sha] {
			continue
		}
		stored, err := h.storedContent(ctx, r.Tenant, sha)
		if err != nil {
			return err
		}
		if sha != "" {
			counted[sha] = true
		}
		if !stored {
			newBytes += f.Size
		}
	}
	if err := h.quotaForNew(c, r.Tenant, newBytes); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"files": out})
}

// xetToken hands out a CAS token for a repo: JSON for hf_xet and the JS
// client, X-Xet-* headers for huggingface_hub.
func (h *Hub) xetToken(scope string) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, err := h.apiRepo(c)
		if err != nil {
			return err
		}
		id := h.cfg.Principal(c)
		if id.ViaCASToken {
			// A CAS token must not mint its successor: a leaked one would
			// then live until its credential is revoked.
			return refusal.Wrap(refusal.ErrForbidden, "CAS tokens are handed out for credentials only; send the hf_oxt_ credential")
		}
		tok, exp := h.cfg.CASToken(id, scope)
		hdr := c.Response().Header()
		hdr.Set("X-Xet-Cas-Url", h.cfg.BaseURL(c))
		hdr.Set("X-Xet-Access-Token", tok)
		hdr.Set("X-Xet-Token-Expiration", strconv.FormatInt(exp, 10))
		_ = r // the token is the tenant's; the repo only had to be visible
		return c.JSON(http.StatusOK, map[string]any{"casUrl": h.cfg.BaseURL(c), "accessToken": tok, "exp": exp})
	}
}

type commitOp struct {
	Key   string `json:"key"`
	Value struct {
		Summary      string `json:"summary"`
		Description  string `json:"description"`
		ParentCommit string `json:"parentCommit"`
		Path         string `json:"path"`
		Content      string `json:"content"`
		Encoding     string `json:"encoding"`
		Algo         string `json:"algo"`
		OID          string `json:"oid"`
		Size         *int64 `json:"size"`
	} `json:"value"`
}

func validRepoPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\x00") || len(p) > 1024 {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || part == ".git" {
			return false
		}
	}
	return true
}

func (h *Hub) commit(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	if c.QueryParam("create_pr") == "1" || c.QueryParam("create_pr") == "true" {
		return badRequest("openxet does not support pull requests; commit to a branch instead")
	}
	ctx := c.Request().Context()
	if c.Request().ContentLength > maxCommitBytes {
		return &refusal.Error{Status: 413, Code: "payload_too_large", Message: fmt.Sprintf("the commit body of %d bytes is over the %d-byte limit", c.Request().ContentLength, maxCommitBytes),
			Hint: "commit fewer or smaller regular files; large files go through Xet"}
	}
	reserve := c.Request().ContentLength
	if reserve < 0 {
		reserve = maxCommitBytes
	}
	release, err := h.cfg.Reserve(c, reserve)
	if err != nil {
		return err
	}
	defer release()

	var header commitOp
	var ops []commitOp
	body := &countingReader{r: io.LimitReader(c.Request().Body, maxCommitBytes+1)}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxCommitBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var op commitOp
		if err := json.Unmarshal([]byte(line), &op); err != nil {
			return badRequest("commit line %d is not JSON: %v", len(ops)+2, err)
		}
		if op.Key == "header" {
			header = op
			continue
		}
		ops = append(ops, op)
	}
	if body.n > maxCommitBytes {
		return &refusal.Error{Status: 413, Code: "payload_too_large", Message: fmt.Sprintf("the commit body is over the %d-byte limit", maxCommitBytes),
			Hint: "commit fewer or smaller regular files; large files go through Xet"}
	}
	if err := sc.Err(); err != nil {
		return badRequest("reading the commit: %v", err)
	}
	ref := revision(c)
	if ok, err := h.store.HasRef(ctx, r, ref); err != nil {
		return err
	} else if !ok {
		return hubNotFound("RevisionNotFound", "branch %s not found in %s", ref, r)
	}
	// Resolve the operations once: blobs stored, lfs oids mapped.
	type change struct {
		del      bool
		folder   bool
		entry    store.TreeEntry
		pathName string
	}
	var changes []change
	for _, op := range ops {
		p := strings.TrimPrefix(op.Value.Path, "/")
		switch op.Key {
		case "file":
			if !validRepoPath(p) {
				return badRequest("invalid path %q", op.Value.Path)
			}
			if op.Value.Encoding != "" && op.Value.Encoding != "base64" {
				return badRequest("file %s: unknown encoding %q", p, op.Value.Encoding)
			}
			data, err := base64.StdEncoding.DecodeString(op.Value.Content)
			if err != nil {
				return badRequest("file %s: content is not base64", p)
			}
			if len(data) > maxRegularFileBytes {
				return &refusal.Error{Status: 413, Code: "payload_too_large", Message: fmt.Sprintf("file %s of %d bytes is over the %d bytes a regular file may have", p, len(data), maxRegularFileBytes),
					Hint: "upload large files through Xet (preupload answers lfs for files over 64KiB)"}
			}
			sum := sha256.Sum256(data)
			sha := hex.EncodeToString(sum[:])
			if err := h.store.PutBlob(ctx, sha, data); err != nil {
				return err
			}
			changes = append(changes, change{entry: store.TreeEntry{Path: p, SizeBytes: int64(len(data)), SHA256: sha, GitOID: gitBlobOID(data)}})
		case "lfsFile":
			if !validRepoPath(p) {
				return badRequest("invalid path %q", op.Value.Path)
			}
			if op.Value.Algo != "" && op.Value.Algo != "sha256" {
				return badRequest("lfsFile %s: unknown algo %q", p, op.Value.Algo)
			}
			oid := op.Value.OID
			if err := checkSHA256(oid); err != nil {
				return badRequest("lfsFile %s: oid %v", p, err)
			}
			f, err := h.store.FileBySHA256(ctx, r.Tenant, oid)
			if errors.Is(err, store.ErrNotFound) {
				return badRequest("lfsFile %s: no file with sha256 %s was uploaded by tenant %s; upload it through Xet first", p, oid, r.Tenant)
			}
			if err != nil {
				return err
			}
			if op.Value.Size != nil && *op.Value.Size != int64(f.SizeBytes) {
				return badRequest("lfsFile %s: size %d, the uploaded file has %d bytes", p, *op.Value.Size, f.SizeBytes)
			}
			size := int64(f.SizeBytes)
			changes = append(changes, change{entry: store.TreeEntry{Path: p, SizeBytes: size, XetHash: f.Hash.String(), SHA256: oid,
				GitOID: gitBlobOID([]byte(lfsPointer(oid, size)))}})
		case "deletedFile":
			changes = append(changes, change{del: true, pathName: p})
		case "deletedFolder":
			changes = append(changes, change{del: true, folder: true, pathName: strings.TrimSuffix(p, "/")})
		default:
			return badRequest("unknown commit operation %q", op.Key)
		}
	}
	summary := header.Value.Summary
	if summary == "" {
		summary = "Commit with huggingface_hub"
	}
	for attempt := 0; ; attempt++ {
		head, err := h.resolveRev(c, r, ref)
		if err != nil {
			return err
		}
		if p := header.Value.ParentCommit; p != "" && p != head.SHA {
			return &refusal.Error{Status: 412, Code: "bad_request", Message: fmt.Sprintf("parent commit %s is not the head of %s (%s)", p, ref, head.SHA), Hint: "pull the new head and commit again"}
		}
		files := map[string]store.TreeEntry{}
		for _, e := range head.Tree {
			files[e.Path] = e
		}
		for _, ch := range changes {
			switch {
			case ch.del && ch.folder:
				for p := range files {
					if p == ch.pathName || strings.HasPrefix(p, ch.pathName+"/") {
						delete(files, p)
					}
				}
			case ch.del:
				delete(files, ch.pathName)
			default:
				files[ch.entry.Path] = ch.entry
			}
		}
		tree := make([]store.TreeEntry, 0, len(files))
		for _, e := range files {
			tree = append(tree, e)
		}
		cm, err := h.store.Commit(ctx, r, ref, head.SHA, summary, header.Value.Description, tree)
		if errors.Is(err, store.ErrRefMoved) && attempt < 5 && header.Value.ParentCommit == "" {
			continue
		}
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"commitUrl": h.repoURL(c, r) + "/commit/" + cm.SHA, "commitOid": cm.SHA, "success": true})
	}
}

// resolve serves a file of a repo: metadata headers for HEAD, the bytes for
// GET (xet files reconstructed on the server), or the xet file info for the
// JS client.
func (h *Hub) resolve(c echo.Context) error {
	r, err := h.repoID(c, repoTypeOfPath(c.Request().URL.Path))
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	hdr := c.Response().Header()
	hdr.Set("X-Repo-Commit", cm.SHA)
	filePath := unescape(c.Param("*"))
	e, ok := cm.Entry(filePath)
	if !ok {
		return hubNotFound("EntryNotFound", "file %s not found in %s at %s", filePath, r, cm.SHA)
	}
	hdr.Set("Accept-Ranges", "bytes")
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
	hdr.Set("X-Xet-Hash", e.XetHash)
	auth := base + "/api/" + r.Type + "s/" + r.Tenant + "/" + r.Name + "/xet-read-token/" + cm.SHA
	recon := base + "/v1/reconstructions/" + e.XetHash
	hdr.Set("Link", "<"+auth+`>; rel="xet-auth", <`+recon+`>; rel="xet-reconstruction-info"`)
	hdr.Set("X-Xet-Refresh-Route", auth)
	if strings.Contains(c.Request().Header.Get("Accept"), "application/vnd.xet-fileinfo+json") {
		return c.Blob(http.StatusOK, "application/vnd.xet-fileinfo+json", mustJSON(map[string]any{
			"hash": e.XetHash, "size": e.SizeBytes, "etag": e.SHA256, "refreshUrl": auth, "reconstructionUrl": recon}))
	}
	return h.cfg.ServeXetFile(c, r.Tenant, e)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// lfsBatch answers the git-lfs batch API as the Hub does for Xet: objects
// not uploaded yet get an upload action carrying a CAS token.
func (h *Hub) lfsBatch(c echo.Context) error {
	repoParam := c.Param("repo")
	name, ok := strings.CutSuffix(repoParam, ".git")
	if !ok {
		return refusal.Wrap(refusal.ErrNotFound, "no such route")
	}
	c.SetParamNames("ns", "name")
	c.SetParamValues(c.Param("ns"), name)
	r, err := h.repoID(c, repoTypeOfPath(c.Request().URL.Path))
	if err != nil {
		return err
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	type lfsObject struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	}
	var req struct {
		Operation string
		Objects   []lfsObject
		HashAlgo  string
	}
	dec := json.NewDecoder(body)
	err = decodeJSONObject(dec, func(key string) error {
		switch {
		case strings.EqualFold(key, "operation"):
			return dec.Decode(&req.Operation)
		case strings.EqualFold(key, "hash_algo"):
			return dec.Decode(&req.HashAlgo)
		case strings.EqualFold(key, "objects"):
			return decodeJSONArray(dec, "objects", func() error {
				var o lfsObject
				err := dec.Decode(&o)
				req.Objects = append(req.Objects, o)
				return err
			})
		}
		return skipJSON(dec)
	})
	if err != nil {
		var ae *refusal.Error
		if errors.As(err, &ae) {
			return err
		}
		return badRequest("the body is not an LFS batch request: %v", err)
	}
	if req.HashAlgo != "" && req.HashAlgo != "sha256" && req.HashAlgo != "sha_256" {
		return badRequest("unsupported hash_algo %q", req.HashAlgo)
	}
	if req.Operation != "upload" {
		return badRequest("only the upload operation is supported; download through Xet")
	}
	id := h.cfg.Principal(c)
	tok, exp := h.cfg.CASToken(id, store.ScopeWrite)
	href := h.cfg.BaseURL(c) + "/api/" + r.Type + "s/" + r.Tenant + "/" + r.Name + "/xet-write-token/main"
	objects := make([]map[string]any, 0, len(req.Objects))
	sessionID := randomID()
	var newBytes int64
	counted := map[string]bool{} // oids already counted in this request
	for _, o := range req.Objects {
		obj := map[string]any{"oid": o.OID, "size": o.Size}
		if err := checkSHA256(o.OID); err != nil {
			return badRequest("object oid %v", err)
		}
		stored, err := h.storedContent(c.Request().Context(), r.Tenant, o.OID)
		if err != nil {
			return err
		}
		if stored {
			objects = append(objects, obj)
			continue
		}
		if oid := strings.ToLower(o.OID); !counted[oid] {
			counted[oid] = true
			newBytes += o.Size
		}
		obj["actions"] = map[string]any{"upload": map[string]any{"href": href, "header": map[string]string{
			"X-Xet-Cas-Url": h.cfg.BaseURL(c), "X-Xet-Access-Token": tok, "X-Xet-Token-Expiration": strconv.FormatInt(exp, 10),
			"X-Xet-Session-Id": sessionID}}}
		objects = append(objects, obj)
	}
	if err := h.quotaForNew(c, r.Tenant, newBytes); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "application/vnd.git-lfs+json", mustJSON(map[string]any{"transfer": "xet", "objects": objects, "hash_algo": "sha256"}))
}

// checkSHA256 checks a SHA-256 in hex as git-lfs and the Hub spell it: 64
// lowercase hex digits, like every hash in the API.
func checkSHA256(oid string) error {
	ok := len(oid) == sha256.Size*2
	for i := 0; ok && i < len(oid); i++ {
		c := oid[i]
		ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
	}
	if ok {
		return nil
	}
	if len(oid) > 80 {
		oid = oid[:64] + "…"
	}
	return fmt.Errorf("%q is not 64 lowercase hex digits", oid)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// randomID is a fresh 128-bit id in hex.
func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
