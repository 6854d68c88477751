package hub_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestRepoInfoCarriesTheCard: repo info has README.md's YAML front matter
// as cardData, with library_name, pipeline_tag and tags from it; a README
// without front matter, or with front matter that is not a mapping, has
// none.
func TestRepoInfoCarriesTheCard(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	readme := "---\nlicense: mit\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- openxet\n- 7\nextra:\n  depth: [1, 2]\n---\n# model\n"
	if r := e.commitLines(alice, "alice/m", regularFileLine("README.md", []byte(readme))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	var info map[string]any
	json.Unmarshal(e.Do("GET", "/api/models/alice/m", alice, nil).Body, &info)
	want := map[string]any{"license": "mit", "library_name": "transformers", "pipeline_tag": "text-generation",
		"tags": []any{"openxet", float64(7)}, "extra": map[string]any{"depth": []any{float64(1), float64(2)}}}
	if !reflect.DeepEqual(info["cardData"], want) || info["library_name"] != "transformers" || info["pipeline_tag"] != "text-generation" ||
		!reflect.DeepEqual(info["tags"], []any{"openxet"}) {
		t.Errorf("info: cardData %v, library_name %v, pipeline_tag %v, tags %v", info["cardData"], info["library_name"], info["pipeline_tag"], info["tags"])
	}
	for _, body := range []string{"# no front matter\n", "---\n- a list\n---\n", "---\nbad: [yaml\n---\n", "---\n---\n", "---\nlicense: mit\n"} {
		if r := e.commitLines(alice, "alice/m", regularFileLine("README.md", []byte(body))); r.Status != 200 {
			t.Fatalf("commit: %d %s", r.Status, r.Body)
		}
		var info map[string]any
		json.Unmarshal(e.Do("GET", "/api/models/alice/m", alice, nil).Body, &info)
		if _, ok := info["cardData"]; ok || info["library_name"] != nil || !reflect.DeepEqual(info["tags"], []any{}) {
			t.Errorf("README %q: cardData %v, library_name %v, tags %v", body, info["cardData"], info["library_name"], info["tags"])
		}
	}
}

// TestTreeExpandHasLastCommit: ?expand=true gives each file and folder of
// the page the newest commit that changed it (or anything under it).
func TestTreeExpandHasLastCommit(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	first := mustHead(t, e, alice, "alice/m")
	commit := func(summary string, lines ...string) string {
		t.Helper()
		body := `{"key":"header","value":{"summary":"` + summary + `"}}` + "\n" + strings.Join(lines, "\n")
		r := e.Do("POST", "/api/models/alice/m/commit/main", alice, []byte(body))
		if r.Status != 200 {
			t.Fatalf("commit %s: %d %s", summary, r.Status, r.Body)
		}
		return r.JSON(t)["commitOid"].(string)
	}
	c1 := commit("one", regularFileLine("a.txt", []byte("a")), regularFileLine("d/x.txt", []byte("x")), regularFileLine("d/y.txt", []byte("y")))
	c2 := commit("two", regularFileLine("d/y.txt", []byte("y2")))
	c3 := commit("three", regularFileLine("b.txt", []byte("b")), regularFileLine("a.txt", []byte("a")))
	tree := func(q string) map[string]map[string]any {
		t.Helper()
		r := e.Do("GET", "/api/models/alice/m/tree/main"+q, alice, nil)
		var items []map[string]any
		if r.Status != 200 || json.Unmarshal(r.Body, &items) != nil {
			t.Fatalf("tree%s: %d %s", q, r.Status, r.Body)
		}
		out := map[string]map[string]any{}
		for _, it := range items {
			out[it["path"].(string)] = it
		}
		return out
	}
	got := tree("?expand=true")
	for p, want := range map[string]struct{ sha, title string }{
		".gitattributes": {first, "initial commit"}, "a.txt": {c1, "one"}, "d": {c2, "two"}, "b.txt": {c3, "three"},
	} {
		lc, _ := got[p]["lastCommit"].(map[string]any)
		if lc["id"] != want.sha || lc["title"] != want.title || lc["date"] == nil {
			t.Errorf("%s: lastCommit %v, want %s %q", p, got[p]["lastCommit"], want.sha, want.title)
		}
	}
	got = tree("?expand=true&recursive=true")
	if lc := got["d/x.txt"]["lastCommit"].(map[string]any); lc["id"] != c1 {
		t.Errorf("d/x.txt: %v, want %s", lc, c1)
	}
	if _, ok := tree("")["a.txt"]["lastCommit"]; ok {
		t.Errorf("lastCommit without expand")
	}
	if r := e.Do("GET", "/api/models/alice/m/tree/main?expand=true", bob, nil); r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("another tenant: %d %s", r.Status, r.Body)
	}
}

// TestListingFullHasSiblings: list_models(full=True) and expand=siblings
// give each repo's files at its head; without them there are none.
func TestListingFullHasSiblings(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.commitLines(alice, "alice/m", regularFileLine("config.json", []byte("{}")))
	for _, c := range []struct {
		q    string
		want []any
	}{
		{"?full=true", []any{map[string]any{"rfilename": ".gitattributes"}, map[string]any{"rfilename": "config.json"}}},
		{"?full=True", []any{map[string]any{"rfilename": ".gitattributes"}, map[string]any{"rfilename": "config.json"}}},
		{"?expand=siblings&expand=sha", []any{map[string]any{"rfilename": ".gitattributes"}, map[string]any{"rfilename": "config.json"}}},
		{"", nil},
	} {
		var items []map[string]any
		json.Unmarshal(e.Do("GET", "/api/models"+c.q, alice, nil).Body, &items)
		if len(items) != 1 {
			t.Fatalf("%s: %v", c.q, items)
		}
		sib, _ := items[0]["siblings"].([]any)
		if !reflect.DeepEqual(sib, c.want) {
			t.Errorf("%s: siblings %v, want %v", c.q, sib, c.want)
		}
	}
}

// TestAnonymousRepoRequestsAnswerRepoNotFound: without a token, the repo
// and file routes answer 401 with X-Error-Code RepoNotFound (what the Hub
// answers for a repo it will not show; huggingface_hub raises
// RepositoryNotFoundError, so repo_exists and file_exists say False),
// whether the repo exists or not; other routes keep their plain 401.
func TestAnonymousRepoRequestsAnswerRepoNotFound(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	for _, c := range []struct{ method, path, code string }{
		{"GET", "/api/models/alice/m", "RepoNotFound"},
		{"GET", "/api/models/alice/nope", "RepoNotFound"},
		{"GET", "/api/datasets/alice/m/revision/main", "RepoNotFound"},
		{"HEAD", "/alice/m/resolve/main/.gitattributes", "RepoNotFound"},
		{"GET", "/datasets/alice/m/resolve/main/a.csv", "RepoNotFound"},
		{"GET", "/spaces/alice/m/raw/main/app.py", "RepoNotFound"},
		{"GET", "/api/whoami-v2", "unauthorized"},
		{"GET", "/api/models", "unauthorized"},
	} {
		r := e.Do(c.method, c.path, "", nil)
		if r.Status != 401 || r.Header.Get("X-Error-Code") != c.code {
			t.Errorf("%s %s: %d, X-Error-Code %q; want 401 %s", c.method, c.path, r.Status, r.Header.Get("X-Error-Code"), c.code)
		}
	}
	// A wrong token is not a repo question: a plain 401.
	if r := e.Do("GET", "/api/models/alice/m", "hf_oxt_nope_nope", nil); r.Status != 401 || r.Header.Get("X-Error-Code") != "unauthorized" {
		t.Errorf("bad token: %d %q", r.Status, r.Header.Get("X-Error-Code"))
	}
}
