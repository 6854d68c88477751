package hub_test

import (
	"context"
	"encoding/json"
	"testing"
)

func (e env) info(t *testing.T, token, path string) map[string]any {
	t.Helper()
	r := e.Do("GET", path, token, nil)
	if r.Status != 200 {
		t.Fatalf("%s: %d %s", path, r.Status, r.Body)
	}
	return r.JSON(t)
}

// TestRepoSettingsRoute: PUT …/settings stores visibility (or private)
// and gated, which repo info and listings show; bad input is 400 and
// changes nothing; another tenant's repo is 404 while private, 403 while
// it may read it (internal).
func TestRepoSettingsRoute(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"m","private":true}`)
	put := func(token, body string) response {
		return e.Do("PUT", "/api/models/alice/m/settings", token, []byte(body))
	}
	for _, c := range []struct {
		body    string
		private bool
		gated   any
	}{
		{`{"visibility":"public"}`, false, false},
		{`{"gated":"manual"}`, false, "manual"},
		{`{"private":true,"gated":false}`, true, false},
		{`{"gated":"auto","visibility":"internal"}`, false, "auto"},
	} {
		if r := put(alice, c.body); r.Status != 200 {
			t.Fatalf("%s: %d %s", c.body, r.Status, r.Body)
		}
		info := e.info(t, alice, "/api/models/alice/m")
		if info["private"] != c.private || info["gated"] != c.gated {
			t.Errorf("%s: private %v gated %v, want %v %v", c.body, info["private"], info["gated"], c.private, c.gated)
		}
	}
	var listed []map[string]any
	json.Unmarshal(e.Do("GET", "/api/models?gated=true", alice, nil).Body, &listed)
	if len(listed) != 1 || listed[0]["gated"] != "auto" {
		t.Errorf("listing gated=true: %v", listed)
	}
	for _, body := range []string{`{}`, `{"gated":true}`, `{"gated":"sometimes"}`, `{"visibility":"everyone"}`, `not json`} {
		if r := put(alice, body); r.Status != 400 {
			t.Errorf("%s: %d %s, want 400", body, r.Status, r.Body)
		}
	}
	if info := e.info(t, alice, "/api/models/alice/m"); info["gated"] != "auto" || info["private"] != false {
		t.Errorf("after bad input: %v", info)
	}
	if r := put(bob, `{"gated":false}`); r.Status != 403 {
		t.Errorf("another tenant on an internal repo: %d %s, want 403", r.Status, r.Body)
	}
	put(alice, `{"visibility":"private"}`)
	hubRefusal(t, "another tenant", put(bob, `{"gated":false}`), 404, "not_found", "RepoNotFound", "repository alice/m not found. Check the repo id, revision and path")
	if info := e.info(t, alice, "/api/models/alice/m"); info["gated"] != "auto" {
		t.Errorf("bob's refused change changed the repo: %v", info)
	}
}

// TestMoveRepoRoute: a move within the tenant keeps the history under the
// new name and frees the old one; another namespace is 403 (as repo
// creation), another tenant's repo 404, a taken name 409, bad input 400.
func TestMoveRepoRoute(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"a"}`)
	e.createRepoJSON(alice, `{"name":"taken"}`)
	e.createRepoJSON(bob, `{"name":"bobs"}`)
	line, _ := e.xetFileLine(alice, "w.bin", 3)
	if r := e.commitLines(alice, "alice/a", line); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	head := mustHead(t, e, alice, "alice/a")
	move := func(token, body string) response { return e.Do("POST", "/api/repos/move", token, []byte(body)) }
	for _, c := range []struct {
		name, token, body string
		status            int
	}{
		{"bad json", alice, `{`, 400},
		{"no namespace", alice, `{"fromRepo":"a","toRepo":"alice/b"}`, 400},
		{"bad type", alice, `{"fromRepo":"alice/a","toRepo":"alice/b","type":"bucket"}`, 400},
		{"bad name", alice, `{"fromRepo":"alice/a","toRepo":"alice/b..c"}`, 400},
		{"other namespace", alice, `{"fromRepo":"alice/a","toRepo":"bob/a"}`, 403},
		{"taken", alice, `{"fromRepo":"alice/a","toRepo":"alice/taken"}`, 409},
		{"missing", alice, `{"fromRepo":"alice/none","toRepo":"alice/b"}`, 404},
		{"another tenant's repo", alice, `{"fromRepo":"bob/bobs","toRepo":"alice/bobs"}`, 404},
		{"as bob", bob, `{"fromRepo":"alice/a","toRepo":"bob/a"}`, 404},
	} {
		if r := move(c.token, c.body); r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		}
	}
	if mustHead(t, e, alice, "alice/a") != head {
		t.Fatalf("a refused move changed the repo")
	}
	r := move(alice, `{"fromRepo":"alice/a","toRepo":"alice/b","type":"model"}`)
	if r.Status != 200 || r.JSON(t)["id"] != "alice/b" {
		t.Fatalf("move: %d %s", r.Status, r.Body)
	}
	if got := mustHead(t, e, alice, "alice/b"); got != head {
		t.Errorf("moved head %s, want %s", got, head)
	}
	if r := e.Do("GET", "/alice/b/resolve/main/w.bin", alice, nil); r.Status != 200 {
		t.Errorf("file after the move: %d", r.Status)
	}
	for _, p := range []string{"/api/models/alice/a", "/api/models/alice/a/tree/main", "/alice/a/resolve/main/w.bin"} {
		hubRefusal(t, "old name "+p, e.Do("GET", p, alice, nil), 404, "not_found", "RepoNotFound", "repository alice/a was moved to alice/b. Use the new name, alice/b")
	}
	// Only for the tenant's own names: bob learns nothing.
	hubRefusal(t, "old name as bob", e.Do("GET", "/api/models/alice/a", bob, nil), 404, "not_found", "RepoNotFound", "repository alice/a not found. Check the repo id, revision and path")
	e.createRepoJSON(alice, `{"name":"a"}`) // the old name is free
	if r := e.Do("GET", "/api/models/alice/a", alice, nil); r.Status != 200 {
		t.Errorf("the new repo at the old name: %d %s", r.Status, r.Body)
	}
}

// TestDuplicateRepoRoute: a duplicate has the source's history and files,
// costs no byte of quota and uploads nothing; exist_ok's 409 carries the
// url; another namespace is 403, another tenant's source 404.
func TestDuplicateRepoRoute(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"src","type":"dataset"}`)
	line, content := e.xetFileLine(alice, "data/w.bin", 4)
	r := e.Do("POST", "/api/datasets/alice/src/commit/main", alice, []byte(`{"key":"header","value":{"summary":"w"}}`+"\n"+line+"\n"))
	if r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	ctx := context.Background()
	usage, _ := e.Store.Usage(ctx, "alice")
	dup := func(token, path, body string) response { return e.Do("POST", path, token, []byte(body)) }
	r = dup(alice, "/api/datasets/alice/src/duplicate", `{"repository":"alice/copy","visibility":"private"}`)
	if r.Status != 200 {
		t.Fatalf("duplicate: %d %s", r.Status, r.Body)
	}
	if m := r.JSON(t); m["url"] != e.URL+"/datasets/alice/copy" || m["filesCopyPending"] != false {
		t.Errorf("answer %v", m)
	}
	if u, _ := e.Store.Usage(ctx, "alice"); u != usage {
		t.Errorf("usage %d after the duplicate, want %d", u, usage)
	}
	got := e.Do("GET", "/datasets/alice/copy/resolve/main/data/w.bin", alice, nil)
	if got.Status != 200 || string(got.Body) != string(content) {
		t.Errorf("duplicate's file: %d, %d bytes", got.Status, len(got.Body))
	}
	if info := e.info(t, alice, "/api/datasets/alice/copy"); info["private"] != true {
		t.Errorf("duplicate info %v", info)
	}
	for _, c := range []struct {
		name, token, path, body string
		status                  int
	}{
		{"exists", alice, "/api/datasets/alice/src/duplicate", `{"repository":"alice/copy"}`, 409},
		{"other namespace", alice, "/api/datasets/alice/src/duplicate", `{"repository":"bob/copy"}`, 403},
		{"bad repository", alice, "/api/datasets/alice/src/duplicate", `{"repository":"copy2"}`, 400},
		{"bad visibility", alice, "/api/datasets/alice/src/duplicate", `{"repository":"alice/copy2","visibility":"x"}`, 400},
		{"another tenant's source", bob, "/api/datasets/alice/src/duplicate", `{"repository":"bob/copy"}`, 404},
		{"missing source", alice, "/api/datasets/alice/none/duplicate", `{"repository":"alice/copy3"}`, 404},
	} {
		if r := dup(c.token, c.path, c.body); r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		} else if c.status == 409 && r.JSON(t)["url"] != e.URL+"/datasets/alice/copy" {
			t.Errorf("409 without the url: %s", r.Body)
		}
	}
}

// TestStorageListing: /api/settings/repositories lists every repo of the
// tenant, with visibility and the bytes at head; another namespace lists
// nothing.
func TestStorageListing(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"m","private":true}`)
	e.createRepoJSON(alice, `{"name":"d","type":"dataset","private":false}`)
	e.createRepoJSON(bob, `{"name":"bobs"}`)
	e.commitLines(alice, "alice/m", regularFileLine("a.txt", []byte("12345")))
	var items []map[string]any
	json.Unmarshal(e.Do("GET", "/api/settings/repositories", alice, nil).Body, &items)
	if len(items) != 2 {
		t.Fatalf("items %v", items)
	}
	byID := map[string]map[string]any{}
	for _, it := range items {
		byID[it["id"].(string)+" "+it["type"].(string)] = it
	}
	m, d := byID["alice/m model"], byID["alice/d dataset"]
	if m == nil || d == nil || m["visibility"] != "private" || d["visibility"] != "public" || m["updatedAt"] == nil ||
		m["storage"].(float64) < 5 || d["storage"].(float64) == 0 || m["storagePercent"].(float64)+d["storagePercent"].(float64) < 99.9 {
		t.Errorf("items %v", items)
	}
	for _, p := range []string{"/api/organizations/bob/settings/repositories"} {
		var other []map[string]any
		json.Unmarshal(e.Do("GET", p, alice, nil).Body, &other)
		if len(other) != 0 {
			t.Errorf("%s: %v", p, other)
		}
	}
}
