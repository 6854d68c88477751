package hub

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/refusal"
	"openxet/store"
	"openxet/xet"

	"openxet/store/accounts"
	"openxet/store/ingest"
)

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

// newBytes is the new-bytes rule that preupload and the LFS batch share:
// of the content a request announces, only bytes the tenant does not own
// yet count against its quota, before any byte is sent. Content it stored
// before (found by SHA-256) costs nothing, and content named twice in one
// request counts once.
type newBytes struct {
	h       *Hub
	tenant  string
	counted map[string]bool // SHA-256s already counted in this request
	total   int64
}

func (h *Hub) newBytes(tenant string) *newBytes {
	return &newBytes{h: h, tenant: tenant, counted: map[string]bool{}}
}

// add counts size bytes of content whose SHA-256 is sha (hex, any case; ""
// when unknown, which always counts) and reports whether the tenant has
// that content stored already.
func (n *newBytes) add(ctx context.Context, sha string, size int64) (stored bool, err error) {
	sha = strings.ToLower(sha)
	if sha != "" && n.counted[sha] {
		return false, nil
	}
	if stored, err = n.h.storedContent(ctx, n.tenant, sha); err != nil {
		return false, err
	}
	if sha != "" {
		n.counted[sha] = true
	}
	if !stored {
		n.total += size
	}
	return stored, nil
}

// check refuses the request when the bytes counted cannot fit the tenant's
// quota.
func (n *newBytes) check(c echo.Context) error { return n.h.quotaForNew(c, n.tenant, n.total) }

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

// preuploadFile is one file of a preupload request. sha is sent by older
// huggingface_hub releases; current clients send path, size and sample
// (base64 of the first 512 bytes) only.
type preuploadFile struct {
	Path   string `json:"path"`
	Sample string `json:"sample"`
	Size   int64  `json:"size"`
	SHA    string `json:"sha"`
}

// readPreupload decodes a preupload body: its files and its gitIgnore
// (nil when the body has none). More files than a request may name are
// refused 413 as they arrive; any other bad body is 400.
func readPreupload(body io.Reader) ([]preuploadFile, *string, error) {
	var files []preuploadFile
	var gitIgnore *string
	dec := json.NewDecoder(body)
	err := decodeJSONObject(dec, func(key string) error {
		switch {
		case strings.EqualFold(key, "gitIgnore"):
			return dec.Decode(&gitIgnore)
		case strings.EqualFold(key, "files"):
			return decodeJSONArray(dec, "files", func() error {
				var f preuploadFile
				err := dec.Decode(&f)
				files = append(files, f)
				return err
			})
		}
		return skipJSON(dec)
	})
	if err != nil {
		return nil, nil, notARequest(err, "a preupload request")
	}
	return files, gitIgnore, nil
}

// preuploadRules are the rules a preupload answers by at revision cm: its
// .gitattributes, and the gitIgnore the request sent or else the
// revision's .gitignore.
func (h *Hub) preuploadRules(ctx context.Context, cm store.Commit, gitIgnore *string) ([]attrRule, []ignoreRule, error) {
	attrs, err := h.readRuleFile(ctx, cm, gitattributesPath)
	if err != nil {
		return nil, nil, err
	}
	rules := parseGitattributes(attrs)
	if gitIgnore != nil {
		return rules, parseGitignore(*gitIgnore), nil
	}
	gi, err := h.readRuleFile(ctx, cm, gitignorePath)
	if err != nil {
		return nil, nil, err
	}
	return rules, parseGitignore(string(gi)), nil
}

func (h *Hub) preupload(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	if v := c.QueryParam("create_pr"); v == "1" || v == "true" {
		return notServed("pull requests", hintPR)
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	files, gitIgnore, err := readPreupload(body)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	rules, ignore, err := h.preuploadRules(ctx, cm, gitIgnore)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(files))
	nb := h.newBytes(r.Tenant)
	for _, f := range files {
		p := strings.TrimPrefix(f.Path, "/")
		if why := repoPathProblem(p); why != "" {
			return badRequest("file %q: %s", f.Path, why)
		}
		if f.Size < 0 {
			return badRequest("file %s: size %d is negative", p, f.Size)
		}
		sample, err := base64.StdEncoding.DecodeString(f.Sample)
		if err != nil {
			return badRequest("file %s: sample is not base64", p)
		}
		mode := "regular"
		if f.Size > 0 && (lfsByAttributes(rules, p) || f.Size > regularMaxBytes || binarySample(sample, int64(len(sample)) >= f.Size)) {
			mode = "lfs"
		}
		item := map[string]any{"path": f.Path, "uploadMode": mode, "shouldIgnore": ignored(ignore, p)}
		cur, ok := cm.Entry(p)
		if ok {
			if cur.XetHash != "" {
				item["oid"] = cur.SHA256
			} else {
				item["oid"] = cur.GitOID
			}
		}
		out = append(out, item)
		// A file already at the path with that size is taken as the same
		// content (current clients send no SHA-256 here); the rest follows
		// the new-bytes rule.
		if mode != "lfs" || (ok && cur.SizeBytes == f.Size) {
			continue
		}
		if _, err := nb.add(ctx, f.SHA, f.Size); err != nil {
			return err
		}
	}
	if err := nb.check(c); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"files": out})
}

// xetToken hands out a CAS token for a repo: JSON for hf_xet and the JS
// client, X-Xet-* headers for huggingface_hub. A token for a repo of the
// caller's tenant is the tenant's; a read token for another tenant's
// Shared repo names the repo, and reconstructs only files its revisions
// reference, while it is still Shared (docs/sharing.md).
func (h *Hub) xetToken(scope string) echo.HandlerFunc {
	acc := forRead
	if scope != accounts.ScopeRead {
		acc = forWrite
	}
	return func(c echo.Context) error {
		r, err := h.apiRepo(c, acc)
		if err != nil {
			return err
		}
		id := h.cfg.Principal(c)
		if id.ViaCASToken {
			// A CAS token must not mint its successor: a leaked one would
			// then live until its credential is revoked.
			return refusal.Wrap(refusal.ErrForbidden, "CAS tokens are handed out for credentials only; send the hf_oxt_ credential")
		}
		tok, exp := h.cfg.CASToken(id, scope, r)
		hdr := c.Response().Header()
		hdr.Set("X-Xet-Cas-Url", h.cfg.BaseURL(c))
		hdr.Set("X-Xet-Access-Token", tok)
		hdr.Set("X-Xet-Token-Expiration", strconv.FormatInt(exp, 10))
		return c.JSON(http.StatusOK, map[string]any{"casUrl": h.cfg.BaseURL(c), "accessToken": tok, "exp": exp})
	}
}

// lfsRepo reads the repo of a /{ns}/{name}.git/info/lfs/… route, to
// write.
func (h *Hub) lfsRepo(c echo.Context) (store.RepoID, error) { return h.lfsRepoFor(c, forWrite) }

// lfsRepoFor reads the repo of an LFS route for acc.
func (h *Hub) lfsRepoFor(c echo.Context, acc access) (store.RepoID, error) {
	name, ok := strings.CutSuffix(c.Param("repo"), ".git")
	if !ok {
		return store.RepoID{}, refusal.Wrap(refusal.ErrNotFound, "no such route")
	}
	c.SetParamNames("ns", "name")
	c.SetParamValues(c.Param("ns"), name)
	return h.repoID(c, repoTypeOfPath(c.Request().URL.Path), acc)
}

// lfsBatch answers the git-lfs batch API as the Hub does. The transfer is
// one the client asked for: "xet" when its list has it (git-xet; objects
// get an upload action to the xet-write-token route, carrying a CAS
// token), else "basic" (huggingface_hub without Xet or with a file object,
// @huggingface/hub without useXet: objects get an upload URL that
// lfsUpload serves). A request without "transfers" means basic, as in
// git-lfs. Objects the tenant stored before get no action. A download
// (git lfs pull, the smudge filter of a clone) is lfsDownloadBatch's. The
// caller must be able to read the repo before its body is read (404 and
// 401 as on every route), and to write it for an upload.
func (h *Hub) lfsBatch(c echo.Context) error {
	r, err := h.lfsRepoFor(c, forRead)
	if err != nil {
		return err
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	var req struct {
		Operation string
		Objects   []lfsObject
		HashAlgo  string
		Transfers []string
	}
	dec := json.NewDecoder(body)
	err = decodeJSONObject(dec, func(key string) error {
		switch {
		case strings.EqualFold(key, "operation"):
			return dec.Decode(&req.Operation)
		case strings.EqualFold(key, "hash_algo"):
			return dec.Decode(&req.HashAlgo)
		case strings.EqualFold(key, "transfers"):
			return dec.Decode(&req.Transfers)
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
		return notARequest(err, "an LFS batch request")
	}
	if req.HashAlgo != "" && req.HashAlgo != "sha256" && req.HashAlgo != "sha_256" {
		return badRequest("unsupported hash_algo %q", req.HashAlgo)
	}
	switch req.Operation {
	case "download":
		return h.lfsDownloadBatch(c, r, req.Objects)
	case "upload":
		if r, err = h.repoID(c, r.Type, forWrite); err != nil {
			return err
		}
		if p := h.cfg.Principal(c); !(accounts.Credential{Scopes: p.Scopes}).Has(accounts.ScopeWrite) {
			return refusal.Wrap(refusal.ErrForbidden, "this credential of tenant %s may read %s but not change it: it has scope %s, uploading needs write",
				p.Tenant, h.shown(r), strings.Join(p.Scopes, ", "))
		}
	default:
		return badRequest("operation %q is neither upload nor download", req.Operation)
	}
	transfer, err := pickTransfer(req.Transfers)
	if err != nil {
		return err
	}
	id := h.cfg.Principal(c)
	tok, exp := h.cfg.CASToken(id, accounts.ScopeWrite, r)
	base := h.cfg.BaseURL(c)
	action := func(oid string) map[string]any {
		if transfer == "basic" {
			return map[string]any{"href": lfsObjectURL(base, r, oid) + "?token=" + url.QueryEscape(tok), "expires_at": time.Unix(exp, 0).UTC().Format(time.RFC3339)}
		}
		return map[string]any{"href": base + "/api/" + r.Type + "s/" + r.Tenant + "/" + r.Name + "/xet-write-token/main", "header": map[string]string{
			"X-Xet-Cas-Url": base, "X-Xet-Access-Token": tok, "X-Xet-Token-Expiration": strconv.FormatInt(exp, 10),
			"X-Xet-Session-Id": randomID()}}
	}
	objects := make([]map[string]any, 0, len(req.Objects))
	nb := h.newBytes(r.Tenant)
	for _, o := range req.Objects {
		if err := checkSHA256(o.OID); err != nil {
			return badRequest("object oid %v", err)
		}
		if o.Size < 0 {
			return badRequest("object %s has a negative size", o.OID)
		}
		obj := map[string]any{"oid": o.OID, "size": o.Size}
		stored, err := nb.add(c.Request().Context(), o.OID, o.Size)
		if err != nil {
			return err
		}
		if !stored {
			obj["actions"] = map[string]any{"upload": action(o.OID)}
		}
		objects = append(objects, obj)
	}
	if err := nb.check(c); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "application/vnd.git-lfs+json", mustJSON(map[string]any{"transfer": transfer, "objects": objects, "hash_algo": "sha256"}))
}

// pickTransfer chooses the transfer of an LFS batch answer among those the
// client offers: xet, else basic ("multipart" is not served; every client
// that offers it offers basic too).
func pickTransfer(offered []string) (string, error) {
	if len(offered) == 0 {
		return "basic", nil
	}
	if slices.Contains(offered, "xet") {
		return "xet", nil
	}
	if slices.Contains(offered, "basic") {
		return "basic", nil
	}
	return "", badRequest("none of the transfers %q is served; offer basic or xet", offered)
}

// lfsObjectURL is where the basic transfer PUTs an object (lfsUpload).
func lfsObjectURL(base string, r store.RepoID, oid string) string {
	prefix := ""
	if r.Type != "model" {
		prefix = r.Type + "s/"
	}
	return base + "/" + prefix + r.Tenant + "/" + r.Name + ".git/info/lfs/objects/" + oid
}

// lfsUpload serves the LFS basic transfer: PUT of a whole object to the
// URL the batch answer gave. The bytes are stored as a Xet upload would
// store them (ingest.File: chunked, deduplicated, xorbs and a shard
// registering the file with its SHA-256), so a commit can then reference
// the object by oid, and a Xet download of it gets the file hash hf_xet
// computes. Everything that can refuse the upload without its body (auth,
// limits, the oid, the length, the quota, memory) is decided before the
// body is read; the body of an object the tenant stored before is read and
// dropped.
func (h *Hub) lfsUpload(c echo.Context) error {
	oid := c.Param("oid")
	r, err := h.lfsRepo(c)
	if err != nil {
		return err
	}
	if err := checkSHA256(oid); err != nil {
		return badRequest("object oid %v", err)
	}
	req := c.Request()
	n := req.ContentLength
	if n < 0 || (n == 0 && len(req.Header.Values(echo.HeaderContentLength)) == 0) {
		return refusal.Wrap(refusal.ErrLengthRequired, "this upload needs a Content-Length header")
	}
	ctx := req.Context()
	nb := h.newBytes(r.Tenant)
	stored, err := nb.add(ctx, oid, n)
	if err != nil {
		return err
	}
	up := h.cfg.Uploads()
	body := &lfsBody{r: req.Body, rc: http.NewResponseController(c.Response().Writer), timeout: up.BodyReadTimeout, size: n}
	if stored {
		// Only a race sends this (the batch offers no upload of stored
		// content): take the body, so that the client sees the answer
		// rather than a reset connection, and keep nothing of it.
		if _, err := io.Copy(io.Discard, body); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{})
	}
	if err := nb.check(c); err != nil {
		return err
	}
	// The ingestion works in a pooled buffer that goes back to the pool
	// when the handler returns: ingest.File keeps no slice of it.
	buf, release, err := h.cfg.ReserveBuffer(c, ingest.BufferBytes(n))
	if err != nil {
		return err
	}
	defer release()
	var sha [sha256.Size]byte
	hex.Decode(sha[:], []byte(oid))
	_, err = ingest.File(ctx, h.store, r.Tenant, body, ingest.Options{SizeBytes: n, SHA256: &sha,
		DedupGlobal: up.DedupGlobal, DefaultQuotaBytes: up.DefaultQuotaBytes, Buffer: buf,
		Work: func() (func(), error) { return h.cfg.Work(c) }})
	if err != nil {
		if errors.Is(err, xet.ErrHashMismatch) {
			return refusal.Wrap(refusal.ErrBadRequest, "the object is not the one its oid names: %v", err)
		}
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{})
}

// lfsBody reads an LFS object's body: each lfsDeadlineBytes gets
// timeout more to arrive (a 1 GiB object is not held to the deadline of a
// 64 MiB xorb), and a body that ends early or fails is a refusal.
type lfsBody struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
	size    int64
	n       int64
	next    int64 // n at which the deadline moves again
}

const lfsDeadlineBytes = 64 << 20

func (b *lfsBody) Read(p []byte) (int, error) {
	if b.timeout > 0 && b.n >= b.next {
		b.rc.SetReadDeadline(time.Now().Add(b.timeout))
		b.next = b.n + lfsDeadlineBytes
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) || errors.Is(err, io.EOF) && b.n < b.size {
		return n, refusal.Wrap(refusal.ErrBadRequest, "the body ended after %d of its %d bytes (%v)", b.n, b.size, err)
	}
	return n, err
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
