package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"openxet/mirror"
)

// repoPath is the path of repo's API routes: "/api/models/ns/name".
func repoAPIPath(repo mirror.RepoRef) (string, error) {
	switch repo.Type {
	case "model", "dataset", "space":
	default:
		return "", fmt.Errorf("repo type %q: want model, dataset or space", repo.Type)
	}
	ns, name, ok := strings.Cut(repo.ID, "/")
	if !ok || !validIDPart(ns) || !validIDPart(name) {
		return "", fmt.Errorf("repo id %q: want namespace/name", repo.ID)
	}
	return "/api/" + repo.Type + "s/" + url.PathEscape(ns) + "/" + url.PathEscape(name), nil
}

// validIDPart is a namespace or name as the Hub allows them: letters,
// digits, '-', '_', '.', not "." or "..", at most 96 characters.
func validIDPart(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 96 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// urlOf is the upstream URL of an escaped path and an encoded query.
func (c *Client) urlOf(escapedPath, query string) *url.URL {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + escapedPath
	p, err := url.PathUnescape(u.RawPath)
	if err == nil {
		u.Path = p
	}
	u.RawQuery = query
	return &u
}

// Revision resolves rev of repo with GET /api/{type}s/{id}/revision/{rev}
// (the commit, gated, lastModified) and lists its files with the paged
// GET /api/{type}s/{id}/tree/{sha}?recursive=true, as huggingface_hub's
// repo_info and list_repo_tree do. Errors: ErrNotFound (the answer's
// X-Error-Code in the *Error), ErrUnreachable, ErrBadAnswer.
func (c *Client) Revision(ctx context.Context, repo mirror.RepoRef, rev string) (mirror.Revision, error) {
	api, err := repoAPIPath(repo)
	if err != nil {
		return mirror.Revision{}, err
	}
	if rev == "" {
		return mirror.Revision{}, fmt.Errorf("empty revision")
	}
	u := c.urlOf(api+"/revision/"+url.PathEscape(rev), "")
	body, err := c.getJSON(ctx, "revision", u)
	if err != nil {
		return mirror.Revision{}, err
	}
	info, err := parseRevisionInfo(body)
	if err != nil {
		return mirror.Revision{}, badAnswer("revision", u, 200, "%v", err)
	}
	if isFullSHA(rev) && info.SHA != strings.ToLower(rev) {
		return mirror.Revision{}, badAnswer("revision", u, 200, "asked for commit %s, got %s", rev, info.SHA)
	}
	out := mirror.Revision{SHA: info.SHA, LastModified: info.LastModified, Gated: info.Gated}
	next := c.urlOf(api+"/tree/"+info.SHA, "recursive=true")
	seen := map[string]bool{}
	paths := map[string]bool{}
	for next != nil {
		if seen[next.String()] {
			return mirror.Revision{}, badAnswer("tree", next, 200, "the pages loop back to a page already read")
		}
		seen[next.String()] = true
		page, link, err := c.getTreePage(ctx, next)
		if err != nil {
			return mirror.Revision{}, err
		}
		files, err := parseTreePage(page)
		if err != nil {
			return mirror.Revision{}, badAnswer("tree", next, 200, "%v", err)
		}
		for _, f := range files {
			if paths[f.Path] {
				return mirror.Revision{}, badAnswer("tree", next, 200, "file %q listed twice", f.Path)
			}
			paths[f.Path] = true
		}
		out.Files = append(out.Files, files...)
		if len(out.Files) > c.maxFiles {
			return mirror.Revision{}, badAnswer("tree", next, 200, "more than %d files", c.maxFiles)
		}
		next = nil
		if link != "" {
			n, err := c.base.Parse(link)
			if err != nil || !c.ownHost(n) {
				return mirror.Revision{}, badAnswer("tree", u, 200, "next page link %q is not on the upstream", link)
			}
			next = n
		}
	}
	for _, s := range info.Siblings {
		if !paths[s] {
			return mirror.Revision{}, badAnswer("tree", u, 200, "file %q of the revision's siblings is not in its tree", s)
		}
	}
	slices.SortFunc(out.Files, func(a, b mirror.File) int { return strings.Compare(a.Path, b.Path) })
	out.Title, out.Message = c.commitText(ctx, api, info.SHA)
	if !isFullSHA(rev) && rev != "main" {
		out.Tag = c.isTag(ctx, api, rev)
	}
	return out, nil
}

// isTag reports whether the upstream's refs route (GET
// /api/{type}s/{id}/refs, what list_repo_refs reads) lists name among its
// tags; false when it does not answer, so that a name is shown as a
// branch, as before.
func (c *Client) isTag(ctx context.Context, api, name string) bool {
	body, err := c.getJSON(ctx, "refs", c.urlOf(api+"/refs", ""))
	if err != nil {
		return false
	}
	var refs struct {
		Tags []struct {
			Name string `json:"name"`
		} `json:"tags"`
	}
	if json.Unmarshal(body, &refs) != nil {
		return false
	}
	for _, t := range refs.Tags {
		if t.Name == name {
			return true
		}
	}
	return false
}

// maxCommitText caps a commit's title and message as the mirror keeps
// them.
const (
	maxCommitTitle   = 1 << 10
	maxCommitMessage = 64 << 10
)

// commitText is the title and message of commit sha as the upstream's
// commits route (GET /api/{type}s/{id}/commits/{sha}, what
// list_repo_commits reads) lists it first, or "" and "" when the upstream
// does not serve the route or lists another commit first: the text is
// what people read, never needed to serve a byte.
func (c *Client) commitText(ctx context.Context, api, sha string) (title, message string) {
	u := c.urlOf(api+"/commits/"+sha, "limit=1")
	body, err := c.getJSON(ctx, "commits", u)
	if err != nil {
		return "", ""
	}
	var list []struct {
		ID      string `json:"id"`
		Title   string `json:"title"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &list) != nil || len(list) == 0 || list[0].ID != sha {
		return "", ""
	}
	return clip(list[0].Title, maxCommitTitle), clip(list[0].Message, maxCommitMessage)
}

// clip cuts s to at most n bytes at a rune boundary, without control
// characters but newlines and tabs.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= 0x20 && r != 0x7f && r != utf8.RuneError) {
			return r
		}
		return -1
	}, s)
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1] // a rune the cut split
	}
	return s
}

func isFullSHA(s string) bool { return len(s) == 40 && isHex(s) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// getJSON GETs a JSON answer from the upstream's own host, with Token.
func (c *Client) getJSON(ctx context.Context, op string, u *url.URL) ([]byte, error) {
	b, _, err := c.getJSONHeader(ctx, op, u, c.token)
	return b, err
}

func (c *Client) getJSONHeader(ctx context.Context, op string, u *url.URL, bearer string) ([]byte, http.Header, error) {
	a, err := c.get(ctx, request{op: op, url: u, bearer: bearer, follow: true,
		header: http.Header{"Accept": {"application/json"}},
		accept: func(s int) bool { return s == http.StatusOK }})
	if err != nil {
		return nil, nil, err
	}
	defer a.Close()
	b, err := readCapped(a.Body, c.maxJSON)
	if err != nil {
		return nil, nil, c.bodyError(op, a, err)
	}
	return b, a.Header, nil
}

// getTreePage GETs one page of a tree and its Link rel="next" target.
func (c *Client) getTreePage(ctx context.Context, u *url.URL) ([]byte, string, error) {
	b, h, err := c.getJSONHeader(ctx, "tree", u, c.token)
	if err != nil {
		return nil, "", err
	}
	return b, nextLink(h.Values("Link")), nil
}

// bodyError classifies an error reading an answer's body: too long or
// cut short is a bad answer, anything else the upstream going away.
func (c *Client) bodyError(op string, a *answer, err error) error {
	if err == errTooLong {
		return badAnswer(op, a.Request.URL, a.StatusCode, "answer longer than %d bytes", c.maxJSON)
	}
	return &Error{Kind: mirror.ErrUnreachable, Op: op, URL: strip(a.Request.URL), Status: a.StatusCode, Message: "answer cut off", Err: err}
}

var errTooLong = fmt.Errorf("too long")

func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLong
	}
	return b, nil
}

// nextLink finds the target of rel="next" in Link header values, as
// requests' parse_header_links (huggingface_hub's paginate) reads them.
func nextLink(values []string) string {
	for _, v := range values {
		for _, part := range splitLinks(v) {
			target, params, ok := strings.Cut(part, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "rel") && slices.Contains(strings.Fields(strings.ToLower(strings.Trim(strings.TrimSpace(val), `"'`))), "next") {
					return target[1 : len(target)-1]
				}
			}
		}
	}
	return ""
}

// splitLinks splits a Link header value at the commas between links
// (not those inside <…>).
func splitLinks(v string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '<':
			depth++
		case '>':
			depth = max(depth-1, 0)
		case ',':
			if depth == 0 {
				out = append(out, v[start:i])
				start = i + 1
			}
		}
	}
	return append(out, v[start:])
}

// revisionInfo is what Revision takes from a revision answer.
type revisionInfo struct {
	SHA          string
	LastModified time.Time
	Gated        bool
	Siblings     []string
}

// parseRevisionInfo reads a repo info answer (model_info, dataset_info,
// space_info): "sha" is required (40 hex digits), "gated" is false or a
// string ("auto", "manual"), "lastModified" an RFC 3339 time if present,
// "siblings" a list of {"rfilename": …}. Other fields are ignored.
func parseRevisionInfo(body []byte) (revisionInfo, error) {
	var raw struct {
		SHA          *string         `json:"sha"`
		LastModified *string         `json:"lastModified"`
		Gated        json.RawMessage `json:"gated"`
		Siblings     []struct {
			RFilename *string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := strictObject(body, &raw); err != nil {
		return revisionInfo{}, err
	}
	var info revisionInfo
	if raw.SHA == nil || !isFullSHA(*raw.SHA) {
		return revisionInfo{}, fmt.Errorf("no commit sha (40 hex digits) in the answer")
	}
	info.SHA = strings.ToLower(*raw.SHA)
	if raw.LastModified != nil && *raw.LastModified != "" {
		t, err := time.Parse(time.RFC3339Nano, *raw.LastModified)
		if err != nil {
			return revisionInfo{}, fmt.Errorf("lastModified %q is not an RFC 3339 time", *raw.LastModified)
		}
		info.LastModified = t
	}
	switch g := string(bytes.TrimSpace(raw.Gated)); {
	case g == "" || g == "null" || g == "false":
	case strings.HasPrefix(g, `"`):
		var s string
		if err := json.Unmarshal(raw.Gated, &s); err != nil {
			return revisionInfo{}, fmt.Errorf("gated: %v", err)
		}
		info.Gated = s != ""
	case g == "true":
		info.Gated = true
	default:
		return revisionInfo{}, fmt.Errorf("gated is %s, want false or a string", g)
	}
	for i, s := range raw.Siblings {
		if s.RFilename == nil {
			return revisionInfo{}, fmt.Errorf("sibling %d has no rfilename", i)
		}
		info.Siblings = append(info.Siblings, *s.RFilename)
	}
	return info, nil
}

// strictObject decodes a JSON object into v, refusing anything after it.
func strictObject(body []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("not the JSON the Hub answers: %v", err)
	}
	if d.More() {
		return fmt.Errorf("data after the JSON value")
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' && t[0] != '[' {
		return fmt.Errorf("not a JSON object")
	}
	return nil
}

// treeEntry is one entry of a tree answer.
type treeEntry struct {
	Type    *string `json:"type"`
	Path    *string `json:"path"`
	Size    *int64  `json:"size"`
	OID     *string `json:"oid"`
	XetHash *string `json:"xetHash"`
	LFS     *struct {
		OID  *string `json:"oid"`
		Size *int64  `json:"size"`
	} `json:"lfs"`
}

// parseTreePage reads one page of a tree answer: a JSON array of entries
// of type "file" (kept) or "directory" (skipped). A file needs a path
// that is relative and clean, a size ≥ 0 and a git oid; an "lfs" object
// needs an oid of 64 hex digits and the file's size; an "xetHash" that is
// not 64 hex digits (a gated repo's redacted hash) is treated as absent.
// Unknown fields are ignored.
func parseTreePage(body []byte) ([]mirror.File, error) {
	var entries []treeEntry
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '[' {
		return nil, fmt.Errorf("a tree page is not a JSON array")
	}
	if err := strictObject(body, &entries); err != nil {
		return nil, err
	}
	var files []mirror.File
	for i, e := range entries {
		if e.Type == nil || e.Path == nil {
			return nil, fmt.Errorf("tree entry %d has no type or path", i)
		}
		if *e.Type != "file" {
			if *e.Type != "directory" {
				return nil, fmt.Errorf("tree entry %d (%q) has type %q", i, *e.Path, *e.Type)
			}
			continue
		}
		if err := checkPath(*e.Path); err != nil {
			return nil, fmt.Errorf("tree entry %d: %v", i, err)
		}
		if e.Size == nil || *e.Size < 0 {
			return nil, fmt.Errorf("file %q has no size", *e.Path)
		}
		if e.OID == nil || !isHex(*e.OID) || (len(*e.OID) != 40 && len(*e.OID) != 64) {
			return nil, fmt.Errorf("file %q has no git oid", *e.Path)
		}
		f := mirror.File{Path: *e.Path, Size: *e.Size, GitOID: strings.ToLower(*e.OID)}
		if e.LFS != nil {
			if e.LFS.OID == nil || len(*e.LFS.OID) != 64 || !isHex(*e.LFS.OID) {
				return nil, fmt.Errorf("file %q: lfs oid is not 64 hex digits", *e.Path)
			}
			if e.LFS.Size == nil || *e.LFS.Size != f.Size {
				return nil, fmt.Errorf("file %q: lfs size is not the file's size %d", *e.Path, f.Size)
			}
			f.SHA256 = strings.ToLower(*e.LFS.OID)
		}
		if e.XetHash != nil && len(*e.XetHash) == 64 && isHex(*e.XetHash) {
			f.XetHash = strings.ToLower(*e.XetHash)
		}
		files = append(files, f)
	}
	return files, nil
}

// checkPath refuses a file path a mirror could not store as given: empty,
// absolute, with an empty, "." or ".." segment, a backslash or a control
// character, or longer than 4096 bytes.
func checkPath(p string) error {
	if p == "" || len(p) > 4096 {
		return fmt.Errorf("path %q is empty or too long", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q is not relative and clean", p)
		}
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f || r == '\\' {
			return fmt.Errorf("path %q has a control character or a backslash", p)
		}
	}
	return nil
}
