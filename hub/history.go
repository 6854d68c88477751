package hub

import (
	"html"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// The commits listing (huggingface_hub's list_repo_commits, @huggingface/hub's
// listCommits and countCommits).

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
	r, err := h.apiRepo(c, forRead)
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
		// A commit made by a robot credential (or before commits had
		// authors) is the namespace's; one made with a personal token, or
		// pushed with git, names its author.
		who := h.shown(r).Tenant
		if cm.Author.Name != "" && cm.Author != store.TenantAuthor(r.Tenant) {
			who = cm.Author.Name
		}
		j := commitJSON{ID: cm.SHA, Title: cm.Summary, Message: cm.Description, Authors: []author{{who}}, Date: cm.Created.Format(hubTime)}
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

// isFolder reports whether a tree (sorted by path) holds files under the
// folder p.
func isFolder(tree []store.TreeEntry, p string) bool {
	prefix := p + "/"
	i := sort.Search(len(tree), func(i int) bool { return tree[i].Path >= prefix })
	return i < len(tree) && strings.HasPrefix(tree[i].Path, prefix)
}

// lastCommitJSON is a commit as the expand answers name it.
func lastCommitJSON(cm store.Commit) map[string]any {
	return map[string]any{"id": cm.SHA, "title": cm.Summary, "date": cm.Created.Format(hubTime)}
}
