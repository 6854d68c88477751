package hub

import (
	"context"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// treeItems lists the files and (derived) folders under dir.
func treeItems(cm store.Commit, dir string, recursive bool) []map[string]any {
	dir = strings.Trim(dir, "/")
	items := []map[string]any{}
	seenDirs := map[string]bool{}
	var dirs map[string]string
	addDir := func(p string) {
		if !seenDirs[p] {
			seenDirs[p] = true
			if dirs == nil {
				dirs = treeIDs(cm)
			}
			items = append(items, dirItem(dirs, p))
		}
	}
	for _, e := range cm.Tree {
		rel := e.Path
		if dir != "" {
			if !strings.HasPrefix(e.Path, dir+"/") {
				continue
			}
			rel = strings.TrimPrefix(e.Path, dir+"/")
		}
		parts := strings.Split(rel, "/")
		if !recursive && len(parts) > 1 {
			addDir(path.Join(dir, parts[0]))
			continue
		}
		if recursive {
			for i := 1; i < len(parts); i++ {
				addDir(path.Join(dir, strings.Join(parts[:i], "/")))
			}
		}
		items = append(items, fileItem(e))
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i]["path"].(string) < items[j]["path"].(string) })
	return items
}

// fileItem is a file as the tree and paths-info routes answer it.
func fileItem(e store.TreeEntry) map[string]any {
	item := map[string]any{"type": "file", "path": e.Path, "size": e.SizeBytes, "oid": e.GitOID}
	if e.XetHash != "" {
		item["lfs"] = map[string]any{"oid": e.SHA256, "size": e.SizeBytes, "pointerSize": len(lfsPointer(e.SHA256, e.SizeBytes))}
		item["xetHash"] = e.XetHash
	}
	return item
}

// dirItem is a folder (derived from the paths under it) as the tree and
// paths-info routes answer it: its oid is its git tree's (treeIDs).
func dirItem(dirs map[string]string, p string) map[string]any {
	return map[string]any{"type": "directory", "path": p, "oid": dirs[p], "size": 0}
}

// treeIDs is the git tree id of each folder of cm. A tree git cannot hold
// (a commit kept from before commit ids were git's, whose paths git
// refuses) has none, and its folders' oids are "".
func treeIDs(cm store.Commit) map[string]string {
	dirs, err := cm.TreeIDs()
	if err != nil {
		return map[string]string{}
	}
	return dirs
}

func (h *Hub) tree(c echo.Context) error {
	r, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	dir := param(c, "*")
	items := treeItems(cm, dir, c.QueryParam("recursive") == "true" || c.QueryParam("recursive") == "1")
	if dir != "" && len(items) == 0 {
		return hubNotFound("EntryNotFound", "path %s not found in %s at %s", dir, r, cm.SHA)
	}
	start := 0
	if cur := c.QueryParam("cursor"); cur != "" {
		n, err := strconv.Atoi(cur)
		if err != nil || n < 0 || n > len(items) {
			return badRequest("bad cursor %q", cur)
		}
		start = n
	}
	end := min(start+treePageSize, len(items))
	if truthy(c.QueryParam("expand")) {
		if err := h.lastCommits(c.Request().Context(), r, cm, items[start:end]); err != nil {
			return err
		}
	}
	if end < len(items) {
		q := c.QueryParams()
		q.Set("cursor", strconv.Itoa(end))
		next := h.cfg.BaseURL(c) + c.Request().URL.EscapedPath() + "?" + q.Encode()
		c.Response().Header().Set("Link", "<"+next+`>; rel="next"`)
	}
	return c.JSON(http.StatusOK, h.forReader(c, items[start:end]))
}

// forReader drops the Xet hashes of items for a reader without a token:
// it has no CAS token to read them with, and a client that sees no hash
// downloads the files from resolve instead.
func (h *Hub) forReader(c echo.Context, items []map[string]any) []map[string]any {
	if h.cfg.Principal(c).Anonymous {
		for _, it := range items {
			delete(it, "xetHash")
		}
	}
	return items
}

// truthy reads a boolean query parameter as the clients send it.
func truthy(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

// lastCommits sets each item's lastCommit (id, title, date), as the Hub
// does for ?expand=true: the newest commit of head's history that changed
// the file, or anything under the directory (store.LastChanges, which
// paths-info's expand reads too).
func (h *Hub) lastCommits(ctx context.Context, r store.RepoID, head store.Commit, items []map[string]any) error {
	paths := make([]string, len(items))
	for i, it := range items {
		paths[i] = it["path"].(string)
	}
	last, err := h.store.LastChanges(ctx, r, head.SHA, paths)
	if err != nil {
		return err
	}
	for i, p := range paths {
		if lc, ok := last[p]; ok {
			items[i]["lastCommit"] = lastCommitJSON(lc)
		}
	}
	return nil
}
