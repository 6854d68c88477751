package hub

import (
	"bytes"
	"html/template"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/limits"

	"openxet/store/accounts"
)

// The pages a browser reaches: the landing page at / (what this server
// is, its version and readiness, how to point hf at it) and the repo
// pages behind the URLs the hf CLI prints (…/{ns}/{name}, …/tree/{rev},
// …/blob/{rev}/{path}, …/commit/{sha}, with /datasets/ and /spaces/).
//
// A browser sends no bearer token, and a tenant's repos are visible only to
// its credentials (docs/design.md §2). So without a token a repo page is the same
// for every name, existing or not, public or private: it says how to fetch
// the repo with the CLI and shows nothing of it. With an Authorization
// header of the repo's tenant (curl, a browser extension) the page shows
// the repo: its latest commit and its files with their sizes.

func (h *Hub) pageRoutes(e *echo.Echo) {
	e.GET("/", h.landing)
	auth := h.pageAuth
	for _, p := range []string{"", "/datasets", "/spaces"} {
		e.GET(p+"/:ns/:name", h.repoPage, auth)
		e.GET(p+"/:ns/:name/tree/:rev", h.repoPage, auth)
		e.GET(p+"/:ns/:name/tree/:rev/*", h.repoPage, auth)
		e.GET(p+"/:ns/:name/blob/:rev/*", h.repoPage, auth)
		e.GET(p+"/:ns/:name/commit/:rev", h.repoPage, auth)
	}
}

// reservedNamespace reports whether a first path segment belongs to an
// API ("api" or one of Config.ReservedNamespaces): a path under one is
// never a repo page (an unknown API path stays a JSON 404).
func (h *Hub) reservedNamespace(ns string) bool { return h.reserved[ns] }

// isRepoPagePath reports whether p is the path of a repo page.
func (h *Hub) isRepoPagePath(p string) bool {
	rest := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(p, "/datasets/"), "/spaces/"), "/")
	segs := strings.Split(rest, "/")
	if len(segs) < 2 || segs[0] == "" || segs[1] == "" || h.reservedNamespace(segs[0]) {
		return false
	}
	return len(segs) == 2 || segs[2] == "tree" || segs[2] == "blob" || segs[2] == "commit"
}

// apiMiss answers a GET of an API path that reached the repo pages: 405
// when the path is a route of another method (GET /v1/shards), else 404.
func apiMiss(c echo.Context) error {
	p := c.Request().URL.Path
	for _, r := range c.Echo().Routes() {
		if r.Path == p && r.Method != http.MethodGet {
			return echo.ErrMethodNotAllowed
		}
	}
	return echo.ErrNotFound
}

// pageAuth lets a request without Authorization through anonymously and
// runs the usual guard (auth, scope, rate limits) on one that has it.
func (h *Hub) pageAuth(next echo.HandlerFunc) echo.HandlerFunc {
	guarded := h.cfg.Guard(accounts.ScopeRead)(next)
	return func(c echo.Context) error {
		if c.Request().Header.Get("Authorization") == "" {
			return next(c)
		}
		return guarded(c)
	}
}

// landingPublicRepos is how many public repos the landing page lists;
// the listings (GET /api/models, …) page through all of them.
const landingPublicRepos = 20

// publicRow is one public repo on the landing page.
type publicRow struct {
	ID, Type, Page, Updated string
}

// landing serves the landing page. With anonymous reads on it lists the
// newest public repos, at most landingPublicRepos, and links the listings
// for the rest; a listing that fails leaves the list out, not the page.
func (h *Hub) landing(c echo.Context) error {
	data := map[string]any{
		"Version": h.cfg.Version,
		"Ready":   h.cfg.Ready(c.Request().Context()),
		"Base":    h.cfg.BaseURL(c),
	}
	if h.cfg.AnonymousReads {
		repos, err := h.cfg.Store.NewestPublicRepos(c.Request().Context(), landingPublicRepos)
		if err == nil {
			rows := make([]publicRow, 0, len(repos))
			for _, r := range repos {
				page := "/" + r.Tenant + "/" + r.Name
				if r.Type != "model" {
					page = "/" + r.Type + "s" + page
				}
				rows = append(rows, publicRow{ID: r.Tenant + "/" + r.Name, Type: r.Type, Page: page, Updated: r.Updated.UTC().Format("2006-01-02 15:04")})
			}
			data["Public"], data["PublicMax"] = rows, landingPublicRepos
		}
	}
	return h.page(c, http.StatusOK, "landing", data)
}

// fileRow is one line of a repo page's file list.
type fileRow struct {
	Path, Size string
	Bytes      int64
	Xet        bool
}

func (h *Hub) repoPage(c echo.Context) error {
	ns, name := param(c, "ns"), param(c, "name")
	if h.reservedNamespace(ns) {
		return apiMiss(c)
	}
	typ := repoTypeOfPath(c.Request().URL.Path)
	rev := param(c, "rev")
	sub := strings.Trim(param(c, "*"), "/")
	flag := ""
	if typ != "model" {
		flag = " --repo-type " + typ
	}
	data := map[string]any{
		"Base": h.cfg.BaseURL(c), "Repo": ns + "/" + name, "Type": typ, "TypeFlag": flag, "Rev": rev, "Path": sub,
		"LsCommand": typ + "s ls",
	}
	if h.cfg.Principal(c) == nil {
		// No token: the same page for every name.
		return h.page(c, http.StatusOK, "repo-anonymous", data)
	}
	r, err := h.repoID(c, typ, forRead)
	if err != nil {
		return err
	}
	if rev == "" {
		rev = "main"
	}
	cm, err := h.resolveRev(c, r, strings.TrimPrefix(rev, "refs/heads/"))
	if err != nil {
		return err
	}
	repo, err := h.store.Repo(c.Request().Context(), r)
	if err != nil {
		return err
	}
	var files []fileRow
	var total int64
	for _, e := range cm.Tree {
		if sub != "" && e.Path != sub && !strings.HasPrefix(e.Path, sub+"/") {
			continue
		}
		files = append(files, fileRow{Path: e.Path, Size: limits.HumanBytes(e.SizeBytes), Bytes: e.SizeBytes, Xet: e.XetHash != ""})
		total += e.SizeBytes
	}
	if sub != "" && len(files) == 0 {
		return hubNotFound("EntryNotFound", "path %s not found in %s at %s", sub, r, cm.SHA)
	}
	data["Rev"], data["Commit"], data["Private"] = rev, cm, repo.VisibilityOf() == "private"
	data["Files"], data["Total"] = files, limits.HumanBytes(total)
	return h.page(c, http.StatusOK, "repo", data)
}

// page renders a page template whole before sending it, so a template
// error becomes a 500, not half a page.
func (h *Hub) page(c echo.Context, status int, name string, data any) error {
	var b bytes.Buffer
	if err := h.pages.ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	hdr := c.Response().Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Robots-Tag", "noindex")
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	return c.HTMLBlob(status, b.Bytes())
}

// parsePages parses the page templates (no JavaScript; one inline style).
func parsePages() *template.Template {
	funcs := template.FuncMap{
		"ns":   func(repo string) string { ns, _, _ := strings.Cut(repo, "/"); return ns },
		"base": func(repo string) string { _, name, _ := strings.Cut(repo, "/"); return name },
	}
	return template.Must(template.New("pages").Funcs(funcs).Parse(pageTemplates))
}

const pageTemplates = `
{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.}}</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;background:#fff}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
code,pre{font:14px/1.45 ui-monospace,monospace;background:#f4f4f6;border-radius:4px}
code{padding:.1rem .3rem} pre{padding:.8rem 1rem;overflow-x:auto}
.muted{color:#666} .ok{color:#137333;font-weight:600} .bad{color:#b3261e;font-weight:600}
table{border-collapse:collapse;width:100%} th,td{text-align:left;padding:.25rem .5rem;border-bottom:1px solid #eee}
td.size{text-align:right;white-space:nowrap} .tag{font-size:.8rem;border:1px solid #bbb;border-radius:3px;padding:0 .3rem;margin-left:.4rem}
footer{margin-top:3rem;font-size:.85rem;color:#666}
</style></head><body>{{end}}

{{define "foot"}}<footer>openxet · <a href="/">home</a> · <a href="/readyz">/readyz</a></footer></body></html>{{end}}

{{define "landing"}}{{template "head" "openxet"}}
<h1>openxet</h1>
<p class="muted">version <span id="version">{{.Version}}</span></p>
<p>A self-hosted storage server for Hugging Face's Xet protocol. The stock clients
(<code>hf</code>, <code>huggingface_hub</code>, <code>hf_xet</code>, <code>@huggingface/hub</code>) create
repositories, upload and download through it, as they do with the Hub. Each tenant has its own
quota and rate limits; a repo is private to its tenant unless its owner makes it internal (readable
with any credential of this server) or public (readable by anyone, when the operator allows it).</p>
<p>Status: {{if .Ready}}<span id="status" class="ok">ready</span>{{else}}<span id="status" class="bad">not ready</span>
(the index or the bucket cannot be reached; <code>/readyz</code> says more to the operator){{end}}</p>

<h2>Use it with the hf CLI</h2>
<p>Ask the operator for a credential (<code>hf_oxt_…</code>; they make one with
<code>openxet credentials create --tenant NAME --scope write</code>). Your tenant name is your namespace.</p>
<pre id="setup">export HF_ENDPOINT={{.Base}}
export HF_TOKEN=hf_oxt_…          # or: hf auth login --token hf_oxt_…
hf auth whoami
hf repos create my-model
hf upload NAME/my-model ./my-folder
hf models ls --author NAME
hf download NAME/my-model --local-dir ./copy</pre>

<h2>From code</h2>
<pre>from huggingface_hub import HfApi
api = HfApi(endpoint="{{.Base}}", token="hf_oxt_…")

import { uploadFiles } from "@huggingface/hub";
await uploadFiles({ hubUrl: "{{.Base}}", accessToken: "hf_oxt_…", repo: "NAME/my-model", files });</pre>
<p>Large files go through the Xet CAS API at the same address (<code>{{.Base}}/v1/…</code>); the clients
find it on their own.</p>
{{with .Public}}
<h2>Public repositories</h2>
<p>Readable without a token (<code>hf download NAME/REPO</code> with <code>HF_ENDPOINT</code> set and no <code>HF_TOKEN</code>).
The newest {{len .}}{{if eq (len .) $.PublicMax}} (of more){{end}}; every one is in the listings
<a href="/api/models?sort=lastModified&amp;direction=-1">models</a>,
<a href="/api/datasets?sort=lastModified&amp;direction=-1">datasets</a> and
<a href="/api/spaces?sort=lastModified&amp;direction=-1">spaces</a>, paged with <code>limit</code> and the <code>Link: rel="next"</code> header.</p>
<table id="public"><tr><th>repository</th><th>type</th><th>updated (UTC)</th></tr>
{{range .}}<tr><td><a href="{{.Page}}">{{.ID}}</a></td><td>{{.Type}}</td><td>{{.Updated}}</td></tr>
{{end}}</table>
{{end}}
{{template "foot"}}{{end}}

{{define "fetch"}}<pre id="fetch">export HF_ENDPOINT={{.Base}}
export HF_TOKEN=hf_oxt_…          # a credential of tenant {{.Repo | ns}}
hf {{.LsCommand}} {{.Repo}} -R{{if .Rev}} --revision {{.Rev}}{{end}}
hf download {{.Repo}}{{if .Path}} {{.Path}}{{end}}{{.TypeFlag}}{{if .Rev}} --revision {{.Rev}}{{end}} --local-dir ./{{.Repo | base}}</pre>{{end}}

{{define "repo-anonymous"}}{{template "head" (print .Repo " · openxet")}}
<h1 id="repo">{{.Repo}}</h1>
<p class="muted">a {{.Type}} repository address on an openxet server</p>
<p id="notice">openxet shows a repository only to credentials of its tenant, and a browser sends none:
this page cannot tell whether the repository exists or what it holds. Fetch it with the CLI and a
credential of the tenant:</p>
{{template "fetch" .}}
{{template "foot"}}{{end}}

{{define "repo"}}{{template "head" (print .Repo " · openxet")}}
<h1 id="repo">{{.Repo}}{{if .Private}}<span class="tag">private</span>{{end}}</h1>
<p class="muted">{{.Type}} repository · revision <code>{{.Rev}}</code>{{if .Path}} · <code>{{.Path}}</code>{{end}}</p>
<h2>Latest commit</h2>
<p id="commit"><code>{{.Commit.SHA}}</code> {{.Commit.Summary}} <span class="muted">({{.Commit.Created.Format "2006-01-02 15:04 MST"}})</span></p>
<h2>Files</h2>
<table id="files"><thead><tr><th>path</th><th>size</th><th>bytes</th></tr></thead><tbody>
{{range .Files}}<tr><td>{{.Path}}{{if .Xet}}<span class="tag">xet</span>{{end}}</td><td class="size">{{.Size}}</td><td class="size">{{.Bytes}}</td></tr>
{{else}}<tr><td colspan="3" class="muted">no files</td></tr>{{end}}
</tbody></table>
<p class="muted">{{len .Files}} files, {{.Total}}</p>
<h2>Fetch it</h2>
{{template "fetch" .}}
{{template "foot"}}{{end}}
`
