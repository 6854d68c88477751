package hub

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"html"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// The commits listing (huggingface_hub's list_repo_commits, @huggingface/hub's
// listCommits and countCommits) and the last commit that changed a path,
// which the expand answers of paths-info carry.

const (
	// commitsPageSize is the commits of a page when the request says no
	// limit; maxCommitsPageSize the most a limit may ask for (the Hub's).
	commitsPageSize    = 50
	maxCommitsPageSize = 1000
)

// commits: GET /api/{types}/{ns}/{name}/commits/{rev}?p=N&limit=M, the
// history of rev newest first, page p (from 0) of limit commits; a Link
// header with rel="next" names the next page and X-Total-Count says the
// length of the whole history. expand[]=formatted adds each commit's title
// and message as HTML (escaped text: openxet renders no Markdown).
func (h *Hub) commits(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	page, limit := 0, commitsPageSize
	if v := c.QueryParam("p"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return badRequest("p=%q is not a page number (0, 1, …)", v)
		}
		page = n
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCommitsPageSize {
			return badRequest("limit=%q is not a page size from 1 to %d", v, maxCommitsPageSize)
		}
		limit = n
	}
	if page > (1<<31)/limit {
		return badRequest("p=%d is past any history", page)
	}
	formatted := false
	for _, key := range []string{"expand[]", "expand"} {
		for _, v := range c.QueryParams()[key] {
			formatted = formatted || v == "formatted"
		}
	}
	head, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	list, total, err := h.store.History(c.Request().Context(), r, head.SHA, page*limit, limit)
	if err != nil {
		return err
	}
	type author struct {
		User string `json:"user"`
	}
	type formattedJSON struct {
		Title   string `json:"title"`
		Message string `json:"message"`
	}
	type commitJSON struct {
		ID        string         `json:"id"`
		Title     string         `json:"title"`
		Message   string         `json:"message"`
		Authors   []author       `json:"authors"`
		Date      string         `json:"date"`
		Formatted *formattedJSON `json:"formatted,omitempty"`
	}
	out := make([]commitJSON, 0, len(list))
	for _, cm := range list {
		// Every commit of a repo is made by a credential of its tenant, the
		// namespace: the tenant is the author openxet knows.
		j := commitJSON{ID: cm.SHA, Title: cm.Summary, Message: cm.Description, Authors: []author{{r.Tenant}}, Date: cm.Created.Format(hubTime)}
		if formatted {
			j.Formatted = &formattedJSON{html.EscapeString(cm.Summary), html.EscapeString(cm.Description)}
		}
		out = append(out, j)
	}
	hdr := c.Response().Header()
	hdr.Set("X-Total-Count", strconv.Itoa(total))
	if (page+1)*limit < total {
		q := c.QueryParams()
		q.Set("p", strconv.Itoa(page+1))
		q.Set("limit", strconv.Itoa(limit))
		hdr.Set("Link", "<"+h.cfg.BaseURL(c)+c.Request().URL.EscapedPath()+"?"+q.Encode()+`>; rel="next"`)
	}
	return c.JSON(http.StatusOK, out)
}

// lastCommits finds, for each of paths (files or folders of head), the
// newest commit of head's history that changed it: added it, or changed
// the file or a file under the folder. A path whose state goes back to the
// oldest commit the index holds gets that commit. Paths not in head get
// nothing. It reads one commit's tree at a time and stops once every path
// has its commit.
func (h *Hub) lastCommits(ctx context.Context, r store.RepoID, head store.Commit, paths []string) (map[string]store.Commit, error) {
	found := map[string]store.Commit{}
	pending := map[string]string{} // path -> its state in the newer commit
	for _, p := range paths {
		if st := pathState(head.Tree, p); st != "" {
			pending[p] = st
		}
	}
	if len(pending) == 0 {
		return found, nil
	}
	var newer store.Commit
	first := true
	err := h.store.WalkHistory(ctx, r, head.SHA, func(cm store.Commit) (bool, error) {
		if first {
			first, newer = false, cm
			return true, nil
		}
		for p, st := range pending {
			if older := pathState(cm.Tree, p); older != st {
				found[p] = newer
				delete(pending, p)
			}
		}
		newer = cm
		return len(pending) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	for p := range pending {
		found[p] = newer
	}
	return found, nil
}

// pathState sums what a tree holds at p: the file there, or every file
// under the folder p; "" when it holds neither.
func pathState(tree []store.TreeEntry, p string) string {
	if i := sort.Search(len(tree), func(i int) bool { return tree[i].Path >= p }); i < len(tree) && tree[i].Path == p {
		return "f:" + tree[i].GitOID + ":" + tree[i].XetHash
	}
	prefix := p + "/"
	i := sort.Search(len(tree), func(i int) bool { return tree[i].Path >= prefix })
	if i == len(tree) || !strings.HasPrefix(tree[i].Path, prefix) {
		return ""
	}
	sum := sha1.New()
	for ; i < len(tree) && strings.HasPrefix(tree[i].Path, prefix); i++ {
		sum.Write([]byte(tree[i].Path + "\x00" + tree[i].GitOID + "\x00" + tree[i].XetHash + "\x00"))
	}
	return "d:" + hex.EncodeToString(sum.Sum(nil))
}

// lastCommitJSON is a commit as the expand answers name it.
func lastCommitJSON(cm store.Commit) map[string]any {
	return map[string]any{"id": cm.SHA, "title": cm.Summary, "date": cm.Created.Format(hubTime)}
}
