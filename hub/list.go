package hub

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// Repo listings: GET /api/models, /api/datasets and /api/spaces, as
// HfApi.list_models / list_datasets, `hf models ls`, `hf datasets ls` and
// @huggingface/hub's listModels / listDatasets call them. A tenant sees only
// its own repos: a listing for another author is empty, as the Hub's is for
// an author that does not exist, so it tells nothing about other tenants.
//
// Query parameters: author, search (a case-insensitive part of the repo
// id), sort (id, lastModified, createdAt; downloads, likes and
// trendingScore are 0 for every openxet repo, so they keep id order),
// direction (-1 or 1), limit (the page size, at most listPageSize) and
// cursor (from the Link header). filter and pipeline_tag match nothing,
// since openxet repos have no tags; gated=true and gated=false keep the
// repos whose gated setting says so (stored, never enforced);
// full=true (or expand=siblings) adds each repo's files at its head as
// siblings; the other Hub parameters (config, cardData, ...) are ignored.

// readRoutes are the Hub routes beside the repo ones of repos.go: who a
// token is, repo listings, and raw files.
func (h *Hub) readRoutes(e *echo.Echo) {
	public := h.cfg.GuardPublic()
	e.GET("/api/whoami-v2", h.whoami, h.cfg.Guard(""))
	e.GET("/api/organizations/:org/members", h.orgMembers, h.cfg.Guard("read"))
	e.GET("/api/models", h.listRepos("model"), public)
	e.GET("/api/datasets", h.listRepos("dataset"), public)
	e.GET("/api/spaces", h.listRepos("space"), public)
	for _, p := range []string{"", "/datasets", "/spaces"} {
		e.GET(p+"/:ns/:name/raw/:rev/*", h.raw, public)
		e.HEAD(p+"/:ns/:name/raw/:rev/*", h.raw, public)
	}
}

// listPageSize is the largest page of a listing; further pages are
// linked with Link: <…&cursor=N>; rel="next".
const listPageSize = 1000

func (h *Hub) listRepos(typ string) echo.HandlerFunc {
	return func(c echo.Context) error {
		q := c.QueryParams()
		pageSize, start, err := listPage(q)
		if err != nil {
			return err
		}
		less, desc, err := listOrder(q)
		if err != nil {
			return err
		}
		all, local, err := h.listable(c, typ, q.Get("author"))
		if err != nil {
			return err
		}
		repos := filterRepos(all, q.Get("search"), len(q["filter"]) > 0 || q.Get("pipeline_tag") != "")
		if g := q.Get("gated"); g == "true" || g == "false" {
			repos = slices.DeleteFunc(repos, func(r store.RepoSummary) bool { return (r.Gated != "") != (g == "true") })
		}
		// In id order first, then stable on the asked order: ties stay in
		// id order.
		sort.SliceStable(repos, func(i, j int) bool { return repos[i].RepoID.String() < repos[j].RepoID.String() })
		sort.SliceStable(repos, func(i, j int) bool {
			if desc {
				return less(repos[j], repos[i])
			}
			return less(repos[i], repos[j])
		})
		start = min(start, len(repos))
		end := min(start+pageSize, len(repos))
		if end < len(repos) {
			next := c.QueryParams()
			next.Set("cursor", strconv.Itoa(end))
			c.Response().Header().Set("Link", "<"+h.cfg.BaseURL(c)+c.Request().URL.EscapedPath()+"?"+next.Encode()+`>; rel="next"`)
		}
		// full=true (HfApi.list_models(full=True)) or expand=siblings adds
		// each repo's files at its head, as the Hub's listing does.
		full := truthy(q.Get("full")) || slices.Contains(q["expand"], "siblings") || slices.Contains(q["expand[]"], "siblings")
		items := make([]map[string]any, 0, end-start)
		for _, r := range repos[start:end] {
			item := repoListItem(r)
			if full {
				sib, err := h.listSiblings(c, r, local)
				if err != nil {
					return err
				}
				item["siblings"] = sib
			}
			items = append(items, item)
		}
		return c.JSON(http.StatusOK, items)
	}
}

// listPage reads a listing's page size (limit, at most listPageSize) and
// its start (cursor).
func listPage(q url.Values) (pageSize, start int, err error) {
	pageSize = listPageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, badRequest("limit %q is not a positive whole number", v)
		}
		pageSize = min(n, listPageSize)
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, badRequest("bad cursor %q", v)
		}
		start = n
	}
	return pageSize, start, nil
}

// listOrder reads a listing's order: sort and direction.
func listOrder(q url.Values) (less func(a, b store.RepoSummary) bool, desc bool, err error) {
	switch v := q.Get("direction"); v {
	case "", "1":
	case "-1":
		desc = true
	default:
		return nil, false, badRequest("direction %q is not -1 or 1", v)
	}
	less = func(a, b store.RepoSummary) bool { return a.RepoID.String() < b.RepoID.String() }
	switch v := q.Get("sort"); v {
	case "", "id", "downloads", "likes", "trendingScore", "trending_score":
	case "lastModified", "last_modified":
		less = func(a, b store.RepoSummary) bool { return a.Updated.Before(b.Updated) }
		desc = q.Get("direction") != "1" // newest first unless asked otherwise, as the Hub does
	case "createdAt", "created_at":
		less = func(a, b store.RepoSummary) bool { return a.Created.Before(b.Created) }
		desc = q.Get("direction") != "1"
	default:
		return nil, false, badRequest("sort %q is not one of id, lastModified, createdAt, downloads, likes, trendingScore", v)
	}
	return less, desc, nil
}

// listable is the repos of typ a caller may list: every repo of the
// namespaces it reads as a member (its own; for a personal token, the
// organizations its owner belongs to and its grant reaches), and the
// repos other namespaces shared (docs/sharing.md); an author narrows to
// one namespace's. A reader without a token, and a fine-grained token
// outside its list, lists the public repos. A mirrored repo is listed
// under the upstream's id, at the commit its main last resolved to
// (mirror.go); local maps such an id back to the repo.
func (h *Hub) listable(c echo.Context, typ, author string) (all []store.RepoSummary, local map[store.RepoID]store.RepoID, err error) {
	id := h.cfg.Principal(c)
	ctx := c.Request().Context()
	member := map[string]bool{}
	for _, ns := range memberNamespaces(id) {
		if author != "" && ns != author {
			continue
		}
		member[ns] = true
		repos, err := h.store.Repos(ctx, ns, typ)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, repos...)
	}
	if !member[author] {
		shared, err := h.store.SharedRepos(ctx, typ, id.Tenant, author, id.Anonymous || id.FineGrained)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range shared {
			if !member[r.Tenant] {
				all = append(all, r)
			}
		}
	}
	local = map[store.RepoID]store.RepoID{}
	for i := range all {
		pub := h.shown(all[i].RepoID)
		if pub != all[i].RepoID {
			local[pub] = all[i].RepoID
			if cm, err := h.store.Resolve(ctx, all[i].RepoID, mirrorMainRef); err == nil {
				all[i].HeadSHA, all[i].Updated = cm.SHA, cm.Created
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, nil, err
			}
			all[i].RepoID = pub
		}
	}
	return all, local, nil
}

// memberNamespaces is the namespaces p reads every repo of, sorted: its
// own, and a personal token's owner's organizations that its grant
// reaches (Principal.Member).
func memberNamespaces(p *Principal) []string {
	var out []string
	if p.Member(p.Tenant) {
		out = append(out, p.Tenant)
	}
	if p.User != nil {
		orgs := make([]string, 0, len(p.User.Roles))
		for org := range p.User.Roles {
			if org != p.Tenant && p.Member(org) {
				orgs = append(orgs, org)
			}
		}
		slices.Sort(orgs)
		out = append(out, orgs...)
	}
	return out
}

// listSiblings is the files of a listed repo at its head.
func (h *Hub) listSiblings(c echo.Context, r store.RepoSummary, local map[store.RepoID]store.RepoID) ([]map[string]any, error) {
	var cm store.Commit
	if r.HeadSHA != "" {
		id := r.RepoID
		if l, ok := local[id]; ok {
			id = l
		}
		var err error
		if cm, err = h.store.Resolve(c.Request().Context(), id, r.HeadSHA); err != nil {
			return nil, err
		}
	}
	sib := make([]map[string]any, 0, len(cm.Tree))
	for _, e := range cm.Tree {
		sib = append(sib, map[string]any{"rfilename": e.Path})
	}
	return sib, nil
}

// filterRepos keeps the repos whose id contains search (any case); none
// when the query asks for tags, which openxet repos do not have.
func filterRepos(repos []store.RepoSummary, search string, wantsTags bool) []store.RepoSummary {
	if wantsTags {
		return []store.RepoSummary{}
	}
	search = strings.ToLower(search)
	out := repos[:0]
	for _, r := range repos {
		if strings.Contains(strings.ToLower(r.RepoID.String()), search) {
			out = append(out, r)
		}
	}
	return out
}

// repoListItem is one entry of a listing, with the fields the clients read
// (huggingface_hub's ModelInfo / DatasetInfo, @huggingface/hub's entries).
func repoListItem(r store.RepoSummary) map[string]any {
	item := map[string]any{
		"_id": store.HashName(r.Type + "/" + r.RepoID.String())[:24], "id": r.RepoID.String(),
		"author": r.Tenant, "sha": r.HeadSHA, "private": r.VisibilityOf() == "private", "gated": gatedValue(r.Gated), "disabled": false,
		"downloads": 0, "likes": 0, "tags": []string{},
		"createdAt": r.Created.Format(hubTime), "lastModified": r.Updated.Format(hubTime),
	}
	if r.Type == "model" {
		item["modelId"] = r.RepoID.String()
	}
	return item
}

// gatedValue is a repo's gated setting as the Hub shows it: false, or
// "auto" / "manual".
func gatedValue(g string) any {
	if g == "" {
		return false
	}
	return g
}
