package hub

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// Hub features openxet deliberately does not serve. Each of their routes
// answers 501 not_served with a sentence that names the feature, so that
// every client prints "openxet does not serve X" (huggingface_hub shows
// X-Error-Message after its "501 Server Error" line and does not retry a
// 501; @huggingface/hub shows the body's error) rather than a bare 404 or
// a repo-not-found. docs/api.md lists them.

// notServed is the refusal for a feature openxet does not serve.
func notServed(what, hint string) error {
	return &NotServedError{What: what, Hint: hint}
}

// notServedRoute is one route of a feature not served.
type notServedRoute struct {
	methods []string
	path    string
	what    string
	hint    string
}

var anyMethod = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

const (
	hintSocial = "this server stores repos and their files; there is nothing to like, follow or discuss"
	hintPR     = "commit to a branch instead (create_pr=False), and merge branches on your side"
	hintSpaces = "this server stores a Space's files but runs nothing; run the app elsewhere"
	// hintLFSFiles: list_lfs_files and permanently_delete_lfs_files.
	hintLFSFiles = "list a revision's files with GET /api/{type}s/{repo}/tree/{rev}?recursive=true; to free a file's bytes, delete it from every revision (a commit, then super-squash) and the collector releases them"
)

// unservedRoutes are the Hub routes of features openxet does not serve
// (paths as huggingface_hub 2.4.0 and @huggingface/hub call them).
var unservedRoutes = []notServedRoute{
	{[]string{http.MethodPost, http.MethodDelete}, "/api/:types/:ns/:name/like", "likes", hintSocial},
	{[]string{http.MethodGet}, "/api/:types/:ns/:name/likers", "likes", hintSocial},
	{[]string{http.MethodGet}, "/api/users/:user/likes", "likes", hintSocial},
	{anyMethod, "/api/:types/:ns/:name/discussions", "discussions or pull requests", hintPR},
	{anyMethod, "/api/:types/:ns/:name/discussions/*", "discussions or pull requests", hintPR},
	{anyMethod, "/api/:types/:ns/:name/user-access-request/*", "gated access requests", "repos here are never gated; a repo's tenant reads it"},
	{[]string{http.MethodGet}, "/api/:types/:ns/:name/lfs-files", "LFS file listings", hintLFSFiles},
	{[]string{http.MethodPost}, "/api/:types/:ns/:name/lfs-files/batch", "LFS file deletion", hintLFSFiles},
	{anyMethod, "/api/:types/:ns/:name/runtime", "Space runtimes", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/secrets", "Space secrets", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/variables", "Space variables", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/hardware", "Space hardware", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/sleeptime", "Space sleep times", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/pause", "Space runtimes", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/restart", "Space runtimes", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/volumes", "Space volumes", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/dev-mode", "Space dev mode", hintSpaces},
	{anyMethod, "/api/:types/:ns/:name/logs/*", "Space logs", hintSpaces},
	{anyMethod, "/api/spaces/hardware", "Space hardware", hintSpaces},
	{anyMethod, "/api/collections", "collections", hintSocial},
	{anyMethod, "/api/collections/*", "collections", hintSocial},
	{anyMethod, "/api/settings/webhooks", "webhooks", "poll the repo's refs (GET /api/{type}s/{repo}/refs) instead"},
	{anyMethod, "/api/settings/webhooks/*", "webhooks", "poll the repo's refs (GET /api/{type}s/{repo}/refs) instead"},
	{anyMethod, "/api/jobs/*", "jobs", "this server stores files and runs nothing"},
	{anyMethod, "/api/scheduled-jobs/*", "jobs", "this server stores files and runs nothing"},
	{anyMethod, "/api/buckets/*", "buckets", "store the files in a model or dataset repo"},
	{anyMethod, "/api/papers/*", "papers", hintSocial},
	{anyMethod, "/api/daily_papers", "papers", hintSocial},
	{[]string{http.MethodGet}, "/api/users/:user/overview", "user profiles", "GET /api/whoami-v2 names the tenant of a token"},
	{[]string{http.MethodGet}, "/api/users/:user/followers", "user profiles", hintSocial},
	{[]string{http.MethodGet}, "/api/users/:user/following", "user profiles", hintSocial},
	{[]string{http.MethodGet}, "/api/organizations/:org/overview", "organization profiles", "GET /api/organizations/{org}/members lists its members and their roles"},
	{[]string{http.MethodGet}, "/api/organizations/:org/followers", "organization profiles", hintSocial},
}

// notServedRoutes answers the routes of features openxet does not serve,
// behind the guard (a valid credential of any scope) so that they count
// against the caller's limits like every other call.
func (h *Hub) notServedRoutes(e *echo.Echo) {
	guard := h.cfg.Guard("")
	for _, r := range unservedRoutes {
		e.Match(r.methods, r.path, func(echo.Context) error { return notServed(r.what, r.hint) }, guard)
	}
}
