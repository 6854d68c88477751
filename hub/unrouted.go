package hub

import (
	"net/http"
	"strings"
)

// Unrouted is the answer, when no route took a request, to a GET or HEAD
// of a repo id without a namespace (/api/models/gpt2,
// /api/models/gpt2/revision/main, /api/models/gpt2/tree/main,
// /gpt2/resolve/main/config.json): 404 RepoNotFound, the answer for a repo
// that does not exist, since no repo here lives outside a namespace, so
// that huggingface_hub's repo_exists and file_exists return False. nil for
// any other request (the server's "no such route").
func (h *Hub) Unrouted(method, path string) error {
	if method != http.MethodGet && method != http.MethodHead {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if parts[0] == "api" {
		if len(parts) < 3 || parts[2] == "" {
			return nil
		}
		if _, ok := repoTypePlural[parts[1]]; !ok {
			return nil
		}
		if len(parts) == 3 || (len(parts) == 5 && parts[3] == "revision") || (len(parts) >= 5 && parts[3] == "tree") {
			return namelessNotFound(parts[2])
		}
		return nil
	}
	if parts[0] == "datasets" || parts[0] == "spaces" {
		parts = parts[1:]
	}
	if len(parts) >= 4 && parts[0] != "" && (parts[1] == "resolve" || parts[1] == "raw") && !h.reserved[parts[0]] {
		return namelessNotFound(parts[0])
	}
	return nil
}

func namelessNotFound(name string) error {
	return hubNotFound(RepoNotFound, "repository %s not found", name)
}
