package hub

import (
	"bufio"
	"bytes"
	"context"
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

// repoPathProblem is why p cannot name a file or folder in a repo, or ""
// when it can: store.PathProblem, the rule every recorded tree obeys.
func repoPathProblem(p string) string { return store.PathProblem(p) }

// commitRequest is a commit body, parsed and checked, before anything is
// written.
type commitRequest struct {
	header commitOp
	ops    []commitOp
}

// readCommit parses an NDJSON commit body: every line that is not blank
// (spaces, tabs and a CR are JSON's white space; a form feed or U+00A0 is
// not) is one JSON object with a "key"; at most one is the header.
func readCommit(body io.Reader) (commitRequest, error) {
	var req commitRequest
	counted := &countingReader{r: io.LimitReader(body, maxCommitBytes+1)}
	sc := bufio.NewScanner(counted)
	sc.Buffer(make([]byte, 64<<10), maxCommitBytes)
	headers := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.Trim(sc.Bytes(), " \t\r") // JSON's own white space only
		if len(line) == 0 {
			continue
		}
		if line[0] != '{' {
			return req, badRequest("commit line %d is not a JSON object", n)
		}
		var op commitOp
		if err := json.Unmarshal(line, &op); err != nil {
			return req, badRequest("commit line %d is not JSON: %v", n, err)
		}
		if op.Key == "header" {
			if headers++; headers > 1 {
				return req, badRequest("commit line %d is a second header", n)
			}
			req.header = op
			continue
		}
		req.ops = append(req.ops, op)
	}
	if counted.n > maxCommitBytes {
		return req, tooLargeCommit()
	}
	if err := sc.Err(); err != nil {
		return req, badRequest("reading the commit: %v", err)
	}
	return req, nil
}

func tooLargeCommit() error {
	return &TooLargeError{Message: fmt.Sprintf("the commit body is over the %d-byte limit", maxCommitBytes),
		Hint: "commit fewer or smaller regular files; large files go through Xet"}
}

// changes checks every operation of the commit and turns it into a store
// change; it reads the index (lfs oids) and writes nothing. It drops each
// regular file's base64 text once decoded, so that the body's text and its
// decoded bytes together stay within what the request reserved.
func (h *Hub) changes(ctx context.Context, tenant string, ops []commitOp) ([]store.Change, error) {
	out := make([]store.Change, 0, len(ops))
	for i := range ops {
		op := ops[i]
		ops[i].Value.Content = ""
		p := strings.TrimPrefix(op.Value.Path, "/")
		if op.Key == "deletedFolder" {
			p = strings.TrimSuffix(p, "/")
		}
		switch op.Key {
		case "file", "lfsFile", "deletedFile", "deletedFolder":
		default:
			return nil, badRequest("unknown commit operation %q (file, lfsFile, deletedFile or deletedFolder)", op.Key)
		}
		if why := repoPathProblem(p); why != "" {
			return nil, badRequest("%s %q: %s", op.Key, op.Value.Path, why)
		}
		switch op.Key {
		case "file":
			ch, err := regularChange(p, op)
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		case "lfsFile":
			ch, err := h.lfsChange(ctx, tenant, p, op)
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		case "deletedFile":
			out = append(out, store.Change{Op: store.DeleteFile, Path: p})
		case "deletedFolder":
			out = append(out, store.Change{Op: store.DeleteFolder, Path: p})
		}
	}
	return out, nil
}

// regularChange decodes a regular file (base64 in the commit).
func regularChange(p string, op commitOp) (store.Change, error) {
	if op.Value.Encoding != "" && op.Value.Encoding != "base64" {
		return store.Change{}, badRequest("file %s: unknown encoding %q", p, op.Value.Encoding)
	}
	data, err := base64.StdEncoding.DecodeString(op.Value.Content)
	if err != nil {
		return store.Change{}, badRequest("file %s: content is not base64", p)
	}
	if len(data) > maxRegularFileBytes {
		return store.Change{}, &TooLargeError{Message: fmt.Sprintf("file %s of %d bytes is over the %d bytes a regular file may have", p, len(data), maxRegularFileBytes),
			Hint: "upload large files through Xet (preupload answers lfs for them)"}
	}
	if data == nil {
		data = []byte{} // an empty file still has its (empty) blob
	}
	sum := sha256.Sum256(data)
	return store.Change{Op: store.PutFile, Path: p, Content: data,
		Entry: store.TreeEntry{SizeBytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), GitOID: gitBlobOID(data)}}, nil
}

// lfsChange maps an lfs oid to the tenant's uploaded file.
func (h *Hub) lfsChange(ctx context.Context, tenant, p string, op commitOp) (store.Change, error) {
	if op.Value.Algo != "" && op.Value.Algo != "sha256" {
		return store.Change{}, badRequest("lfsFile %s: unknown algo %q", p, op.Value.Algo)
	}
	oid := op.Value.OID
	if err := checkSHA256(oid); err != nil {
		return store.Change{}, badRequest("lfsFile %s: oid %v", p, err)
	}
	f, err := h.store.FileBySHA256(ctx, tenant, oid)
	if errors.Is(err, store.ErrNotFound) {
		return store.Change{}, badRequest("lfsFile %s: no file with sha256 %s was uploaded by tenant %s; upload it through Xet first", p, oid, tenant)
	}
	if err != nil {
		return store.Change{}, err
	}
	if op.Value.Size != nil && *op.Value.Size != int64(f.SizeBytes) {
		return store.Change{}, badRequest("lfsFile %s: size %d, the uploaded file has %d bytes", p, *op.Value.Size, f.SizeBytes)
	}
	size := int64(f.SizeBytes)
	return store.Change{Op: store.PutFile, Path: p,
		Entry: store.TreeEntry{SizeBytes: size, XetHash: f.Hash.String(), SHA256: oid, GitOID: gitBlobOID([]byte(lfsPointer(oid, size)))}}, nil
}

// commit: POST /api/{types}/{ns}/{name}/commit/{branch} with an NDJSON
// body (a header line, then one line per operation). Every operation is
// checked before anything is written; the store then applies the changes
// to the branch's head in its own transaction.
func (h *Hub) commit(c echo.Context) error {
	r, err := h.apiRepo(c, forWrite)
	if err != nil {
		return err
	}
	if c.QueryParam("create_pr") == "1" || c.QueryParam("create_pr") == "true" {
		return badRequest("openxet does not support pull requests; commit to a branch instead")
	}
	ctx := c.Request().Context()
	if n := c.Request().ContentLength; n > maxCommitBytes {
		return &TooLargeError{Message: fmt.Sprintf("the commit body of %d bytes is over the %d-byte limit", n, maxCommitBytes),
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

	req, err := readCommit(c.Request().Body)
	if err != nil {
		return err
	}
	changes, err := h.changes(ctx, r.Tenant, req.ops)
	if err != nil {
		return err
	}
	summary := req.header.Value.Summary
	if summary == "" {
		summary = "Commit with huggingface_hub"
	}
	branch := revision(c)
	parent := req.header.Value.ParentCommit
	cm, err := h.store.Commit(ctx, r, branch, store.NewCommit{Parent: parent, Summary: summary, Description: req.header.Value.Description, Changes: changes,
		Author: h.cfg.Principal(c).Author()})
	switch {
	case errors.Is(err, store.ErrEntryNotFound):
		return hubNotFound("EntryNotFound", "%v", err)
	case errors.Is(err, store.ErrNoRepo):
		return hubNotFound("RepoNotFound", "repository %s not found", h.shown(r))
	case errors.Is(err, store.ErrNoBranch):
		return hubNotFound("RevisionNotFound", "branch %s not found in %s", branch, r)
	case errors.Is(err, store.ErrRefMoved) && parent != "":
		return &StaleParentError{Parent: parent, Branch: branch, Cause: err}
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"commitUrl": h.repoURL(c, r) + "/commit/" + cm.SHA, "commitOid": cm.SHA, "success": true})
}
