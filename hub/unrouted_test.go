package hub_test

import "testing"

// TestRepoIDWithoutNamespace: a GET or HEAD of a repo id without a
// namespace (gpt2) answers as a repo that does not exist, 404 RepoNotFound,
// with a token or without, so that repo_exists and file_exists return
// False; the routes beside them answer as before.
func TestRepoIDWithoutNamespace(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	missing := e.Do("GET", "/api/models/alice/none", alice, nil).JSON(t)
	for _, tok := range []string{alice, ""} {
		for _, c := range []struct{ method, path, name string }{
			{"GET", "/api/models/gpt2", "gpt2"},
			{"HEAD", "/api/models/gpt2", "gpt2"},
			{"GET", "/api/datasets/squad", "squad"},
			{"GET", "/api/models/gpt2/revision/main", "gpt2"},
			{"GET", "/api/spaces/app/tree/main", "app"},
			{"GET", "/api/models/gpt2/tree/main/sub/x.txt", "gpt2"},
			{"GET", "/gpt2/resolve/main/config.json", "gpt2"},
			{"HEAD", "/gpt2/resolve/main/config.json", "gpt2"},
			{"GET", "/gpt2/raw/main/sub/config.json", "gpt2"},
		} {
			name := c.method + " " + c.path
			r := e.Do(c.method, c.path, tok, nil)
			text := "repository " + c.name + " not found. Check the repo id, revision and path"
			if c.method == "HEAD" {
				if r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" || r.Header.Get("X-Error-Message") != text {
					t.Errorf("%s: %d %q %q, want 404 RepoNotFound %q", name, r.Status, r.Header.Get("X-Error-Code"), r.Header.Get("X-Error-Message"), text)
				}
				continue
			}
			m := hubRefusal(t, name, r, 404, "not_found", "RepoNotFound", text)
			if m["hint"] != missing["hint"] || m["code"] != missing["code"] {
				t.Errorf("%s: %v, want the answer of a missing repo %v", name, m, missing)
			}
		}
	}
	// Unchanged: the listings, the repo routes, unknown types, other
	// methods and paths no route takes.
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/api/models", 200, ""},
		{"GET", "/api/models/alice/m", 200, ""},
		{"GET", "/api/models/alice/m/revision/main", 200, ""},
		{"GET", "/api/models/alice/m/tree/main", 200, ""},
		{"GET", "/alice/m/resolve/main/.gitattributes", 200, ""},
		{"GET", "/api/models/alice/none", 404, "RepoNotFound"},
		{"GET", "/api/kernels/gpt2", 404, "not_found"},
		{"GET", "/api/users/alice", 404, "not_found"},
		{"POST", "/api/models/gpt2", 404, "not_found"},
		{"DELETE", "/gpt2/resolve/main/config.json", 404, "not_found"},
		{"GET", "/api/models/gpt2/refs/x", 404, "not_found"},
		{"GET", "/v1/resolve/main/x", 404, "not_found"},
	} {
		r := e.Do(c.method, c.path, alice, nil)
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.code {
			t.Errorf("%s %s: %d %q %s, want %d %q", c.method, c.path, r.Status, r.Header.Get("X-Error-Code"), r.Body, c.status, c.code)
		}
	}
}
