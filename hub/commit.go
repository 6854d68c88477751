package hub

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/refusal"
	"openxet/store"
)

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
					Hint: "upload large files through Xet (preupload answers lfs for them)"}
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
