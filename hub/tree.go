package hub

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
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
	addDir := func(p string) {
		if !seenDirs[p] {
			seenDirs[p] = true
			sum := sha1.Sum([]byte("tree:" + cm.SHA + ":" + p))
			items = append(items, map[string]any{"type": "directory", "path": p, "oid": hex.EncodeToString(sum[:]), "size": 0})
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
		item := map[string]any{"type": "file", "path": e.Path, "size": e.SizeBytes, "oid": e.GitOID}
		if e.XetHash != "" {
			item["lfs"] = map[string]any{"oid": e.SHA256, "size": e.SizeBytes, "pointerSize": len(lfsPointer(e.SHA256, e.SizeBytes))}
			item["xetHash"] = e.XetHash
		}
		items = append(items, item)
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i]["path"].(string) < items[j]["path"].(string) })
	return items
}

func (h *Hub) tree(c echo.Context) error {
	r, err := h.apiRepo(c)
	if err != nil {
		return err
	}
	cm, err := h.resolveRev(c, r, revision(c))
	if err != nil {
		return err
	}
	dir := unescape(c.Param("*"))
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
	return c.JSON(http.StatusOK, items[start:end])
}

// maxLastCommitWalk bounds the commits lastCommits reads: an entry not
// changed in that many commits has no lastCommit.
const maxLastCommitWalk = 1000

// truthy reads a boolean query parameter as the clients send it.
func truthy(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

// lastCommits sets each item's lastCommit (id, title, date), as the Hub
// does for ?expand=true: the newest commit on head's first-parent chain
// that changed the file, or anything under the directory.
func (h *Hub) lastCommits(ctx context.Context, r store.RepoID, head store.Commit, items []map[string]any) error {
	pending := map[string]map[string]any{}
	for _, it := range items {
		pending[it["path"].(string)] = it
	}
	cur := head
	for n := 0; len(pending) > 0 && n < maxLastCommitWalk; n++ {
		var parent store.Commit
		if cur.Parent != "" {
			var err error
			parent, err = h.store.Resolve(ctx, r, cur.Parent)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		changed := changedPaths(cur, parent)
		for p, it := range pending {
			dir := it["type"] == "directory"
			if touches(changed, p, dir) {
				it["lastCommit"] = map[string]any{"id": cur.SHA, "title": cur.Summary, "date": cur.Created.Format(hubTime)}
				delete(pending, p)
			}
		}
		if cur.Parent == "" || parent.SHA == "" {
			break
		}
		cur = parent
	}
	return nil
}

// changedPaths lists the paths whose entry differs between a commit and
// its parent (added, removed or changed), sorted.
func changedPaths(c, parent store.Commit) []string {
	var out []string
	i, j := 0, 0
	for i < len(c.Tree) || j < len(parent.Tree) {
		switch {
		case j == len(parent.Tree) || (i < len(c.Tree) && c.Tree[i].Path < parent.Tree[j].Path):
			out = append(out, c.Tree[i].Path)
			i++
		case i == len(c.Tree) || parent.Tree[j].Path < c.Tree[i].Path:
			out = append(out, parent.Tree[j].Path)
			j++
		default:
			if c.Tree[i] != parent.Tree[j] {
				out = append(out, c.Tree[i].Path)
			}
			i, j = i+1, j+1
		}
	}
	return out
}

// touches reports whether changed (sorted) holds p, or for a directory
// anything under it.
func touches(changed []string, p string, dir bool) bool {
	if !dir {
		i := sort.SearchStrings(changed, p)
		return i < len(changed) && changed[i] == p
	}
	i := sort.SearchStrings(changed, p+"/")
	return i < len(changed) && strings.HasPrefix(changed[i], p+"/")
}
