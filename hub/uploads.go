package hub

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/limits"
	"openxet/refusal"
	"openxet/store"
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
	if v := c.QueryParam("create_pr"); v == "1" || v == "true" {
		return notServed("pull requests", hintPR)
	}
	body, release, err := h.hubJSONBody(c)
	if err != nil {
		return err
	}
	defer release()
	// sha is sent by older huggingface_hub releases; current clients send
	// path, size and sample (base64 of the first 512 bytes) only.
	type preuploadFile struct {
		Path   string `json:"path"`
		Sample string `json:"sample"`
		Size   int64  `json:"size"`
		SHA    string `json:"sha"`
	}
	var files []preuploadFile
	var gitIgnore *string
	dec := json.NewDecoder(body)
	err = decodeJSONObject(dec, func(key string) error {
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
	attrs, err := h.readRuleFile(ctx, cm, gitattributesPath)
	if err != nil {
		return err
	}
	rules := parseGitattributes(attrs)
	var ignore []ignoreRule
	if gitIgnore != nil {
		ignore = parseGitignore(*gitIgnore)
	} else {
		gi, err := h.readRuleFile(ctx, cm, gitignorePath)
		if err != nil {
			return err
		}
		ignore = parseGitignore(string(gi))
	}
	out := make([]map[string]any, 0, len(files))
	var newBytes int64
	counted := map[string]bool{} // SHA-256s already counted in this request
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
