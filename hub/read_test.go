package hub_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// TestWhoamiNamesTheTenantAndRole: /api/whoami-v2 answers what
// huggingface_hub (name, orgs, auth.accessToken.role and displayName) and
// @huggingface/hub read: the tenant, and the credential's scopes as a role.
func TestWhoamiNamesTheTenantAndRole(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		tenant string
		scopes []string
		role   string
	}{
		{"alice", []string{"read"}, "read"},
		{"alice", []string{"write"}, "write"},
		{"ops", []string{"admin"}, "admin"},
		{"ops", []string{"admin", "write"}, "admin"},
	} {
		tok := e.Credential(c.tenant, c.scopes...)
		r := e.Do("GET", "/api/whoami-v2", tok, nil)
		if r.Status != 200 {
			t.Fatalf("%v: %d %s", c.scopes, r.Status, r.Body)
		}
		var got struct {
			Type, Name string
			Orgs       []any
			Auth       struct {
				Type        string
				AccessToken struct{ DisplayName, Role, CreatedAt string }
			}
			Openxet struct {
				Tenant, Credential string
				Scopes             []string
			}
		}
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		credID := strings.SplitN(strings.TrimPrefix(tok, "hf_oxt_"), "_", 2)[0]
		if got.Type != "user" || got.Name != c.tenant || got.Orgs == nil || len(got.Orgs) != 0 || got.Auth.Type != "access_token" ||
			got.Auth.AccessToken.Role != c.role || got.Auth.AccessToken.DisplayName != "openxet-"+c.tenant+"-"+credID ||
			got.Auth.AccessToken.CreatedAt == "" || got.Openxet.Credential != credID || !reflect.DeepEqual(got.Openxet.Scopes, c.scopes) {
			t.Errorf("%v: %s", c.scopes, r.Body)
		}
	}
	hubRefusal(t, "no token", e.Do("GET", "/api/whoami-v2", "", nil), 401, "unauthorized", "unauthorized",
		"missing Authorization: Bearer token. Send Authorization: Bearer <token> with a valid openxet credential or CAS token")
}

// TestRepoListingsShowOwnAndSharedRepos: /api/models and /api/datasets
// list the caller's own repos and the public or internal repos of other
// tenants, never their private ones (an author narrows to one tenant's),
// filter by search, sort, and page with Link like the Hub.
func TestRepoListingsShowOwnAndSharedRepos(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "read", "write"), e.Credential("bob", "write")
	for i, name := range []string{"zeta", "alpha", "Mid-Model"} {
		e.createRepoJSON(alice, fmt.Sprintf(`{"name":%q,"private":%v}`, name, i == 1))
	}
	e.createRepoJSON(alice, `{"name":"set","type":"dataset"}`)
	e.createRepoJSON(bob, `{"name":"bobs-model"}`)
	if r := e.commitLines(alice, "alice/alpha", regularFileLine("a.txt", []byte("a"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	ids := func(path, token string) ([]string, string) {
		t.Helper()
		r := e.Do("GET", path, token, nil)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		var items []map[string]any
		if err := json.Unmarshal(r.Body, &items); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, it := range items {
			if it["author"] != "alice" && it["author"] != "bob" || it["_id"] == "" || it["lastModified"] == "" || it["sha"] == "" {
				t.Errorf("%s: item %v", path, it)
			}
			out = append(out, it["id"].(string))
		}
		return out, r.Header.Get("Link")
	}
	for _, c := range []struct {
		path, token string
		want        []string
	}{
		{"/api/models", alice, []string{"alice/Mid-Model", "alice/alpha", "alice/zeta"}},
		{"/api/models?author=alice", alice, []string{"alice/Mid-Model", "alice/alpha", "alice/zeta"}},
		{"/api/models?author=bob", alice, []string{}},
		{"/api/models?author=nobody", alice, []string{}},
		{"/api/models", bob, []string{"alice/Mid-Model", "alice/zeta", "bob/bobs-model"}},
		{"/api/models?author=alice", bob, []string{"alice/Mid-Model", "alice/zeta"}},
		{"/api/models?search=alpha", bob, []string{}},
		{"/api/models?author=bob", bob, []string{"bob/bobs-model"}},
		{"/api/datasets", bob, []string{}},
		{"/api/models?sort=id&direction=-1", bob, []string{"bob/bobs-model", "alice/zeta", "alice/Mid-Model"}},
		{"/api/models?search=MODEL", alice, []string{"alice/Mid-Model"}},
		{"/api/models?search=alice/a", alice, []string{"alice/alpha"}},
		{"/api/models?sort=lastModified", alice, []string{"alice/alpha", "alice/Mid-Model", "alice/zeta"}},
		{"/api/models?sort=lastModified&direction=1", alice, []string{"alice/zeta", "alice/Mid-Model", "alice/alpha"}},
		{"/api/models?sort=id&direction=-1", alice, []string{"alice/zeta", "alice/alpha", "alice/Mid-Model"}},
		{"/api/models?sort=downloads", alice, []string{"alice/Mid-Model", "alice/alpha", "alice/zeta"}},
		{"/api/models?filter=text-generation", alice, []string{}},
		{"/api/datasets", alice, []string{"alice/set"}},
		{"/api/datasets?author=alice&search=se", alice, []string{"alice/set"}},
		{"/api/spaces", alice, []string{}},
	} {
		got, link := ids(c.path, c.token)
		if !reflect.DeepEqual(got, c.want) || link != "" {
			t.Errorf("%s: %v (Link %q), want %v", c.path, got, link, c.want)
		}
	}
	// Pages of 2: a Link to the next page, which keeps the query.
	got, link := ids("/api/models?author=alice&limit=2", alice)
	wantNext := "<" + e.URL + "/api/models?author=alice&cursor=2&limit=2>; rel=\"next\""
	if !reflect.DeepEqual(got, []string{"alice/Mid-Model", "alice/alpha"}) || link != wantNext {
		t.Fatalf("page 1: %v, Link %q; want Link %q", got, link, wantNext)
	}
	next, _ := url.Parse(strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`))
	got, link = ids(next.RequestURI(), alice)
	if !reflect.DeepEqual(got, []string{"alice/zeta"}) || link != "" {
		t.Fatalf("page 2: %v, Link %q", got, link)
	}
	// A private repo says so; the listing carries the head of main.
	r := e.Do("GET", "/api/models?search=alpha", alice, nil)
	var items []struct {
		ID      string `json:"id"`
		Private bool   `json:"private"`
		SHA     string `json:"sha"`
	}
	json.Unmarshal(r.Body, &items)
	if len(items) != 1 || !items[0].Private || items[0].SHA != mustHead(t, e, alice, "alice/alpha") {
		t.Errorf("alpha: %s", r.Body)
	}
	for _, c := range []struct{ path, text string }{
		{"/api/models?limit=0", `limit "0" is not a positive whole number`},
		{"/api/models?limit=x", `limit "x" is not a positive whole number`},
		{"/api/models?cursor=-1", `bad cursor "-1"`},
		{"/api/models?sort=size", `sort "size" is not one of id, lastModified, createdAt, downloads, likes, trendingScore`},
		{"/api/models?direction=up", `direction "up" is not -1 or 1`},
	} {
		hubRefusal(t, c.path, e.Do("GET", c.path, alice, nil), 400, "bad_request", "bad_request", c.text)
	}
	hubRefusal(t, "no token", e.Do("GET", "/api/models", "", nil), 401, "unauthorized", "unauthorized",
		"missing Authorization: Bearer token. Send Authorization: Bearer <token> with a valid openxet credential or CAS token")
}

// TestRawServesWhatGitStores: GET and HEAD /{repo}/raw/{rev}/{path} answer
// a regular file's bytes and a Xet file's git-lfs pointer; a missing file
// is 404 EntryNotFound (so @huggingface/hub's fileExists says false), and
// another tenant's repo is 404 RepoNotFound.
func TestRawServesWhatGitStores(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.createRepoJSON(alice, `{"name":"d","type":"dataset"}`)
	xetLine, content := e.xetFileLine(alice, "big.bin", 9)
	if r := e.commitLines(alice, "alice/m", regularFileLine("dir/a.txt", []byte("hello raw\n")), regularFileLine("empty.txt", nil), xetLine); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/datasets/alice/d/commit/main", alice, []byte(`{"key":"header","value":{"summary":"x"}}`+"\n"+regularFileLine("rows.csv", []byte("a,b\n"))+"\n")); r.Status != 200 {
		t.Fatalf("dataset commit: %d %s", r.Status, r.Body)
	}
	sum := sha256.Sum256(content)
	pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%x\nsize %d\n", sum, len(content)) // git-lfs's pointer format
	head := mustHead(t, e, alice, "alice/m")
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/alice/m/raw/main/dir/a.txt", 200, "hello raw\n"},
		{"/alice/m/raw/" + head + "/dir/a.txt", 200, "hello raw\n"},
		{"/alice/m/raw/refs%2Fheads%2Fmain/dir/a.txt", 200, "hello raw\n"},
		{"/alice/m/raw/main/empty.txt", 200, ""},
		{"/alice/m/raw/main/big.bin", 200, pointer},
		{"/datasets/alice/d/raw/main/rows.csv", 200, "a,b\n"},
	} {
		for _, method := range []string{"GET", "HEAD"} {
			r := e.Do(method, c.path, alice, nil)
			want := c.body
			if method == "HEAD" {
				want = ""
			}
			if r.Status != c.status || string(r.Body) != want || r.Header.Get("Content-Length") != fmt.Sprint(len(c.body)) || r.Header.Get("ETag") == "" {
				t.Errorf("%s %s: %d %q (Content-Length %q, ETag %q), want %d %q", method, c.path, r.Status, r.Body,
					r.Header.Get("Content-Length"), r.Header.Get("ETag"), c.status, want)
			}
		}
	}
	for _, c := range []struct {
		path, token, xcode string
	}{
		{"/alice/m/raw/main/nope.txt", alice, "EntryNotFound"},
		{"/alice/m/raw/main/dir", alice, "EntryNotFound"},
		{"/alice/m/raw/nobranch/dir/a.txt", alice, "RevisionNotFound"},
		{"/alice/m/raw/main/dir/a.txt", bob, "RepoNotFound"},
		{"/alice/nope/raw/main/dir/a.txt", alice, "RepoNotFound"},
		{"/alice/d/raw/main/rows.csv", alice, "RepoNotFound"}, // a dataset is not a model
	} {
		for _, method := range []string{"GET", "HEAD"} {
			r := e.Do(method, c.path, c.token, nil)
			if r.Status != 404 || r.Header.Get("X-Error-Code") != c.xcode {
				t.Errorf("%s %s: %d X-Error-Code %q, want 404 %s", method, c.path, r.Status, r.Header.Get("X-Error-Code"), c.xcode)
			}
		}
	}
	if r := e.Do("HEAD", "/alice/m/raw/main/dir/a.txt", "", nil); r.Status != 401 {
		t.Errorf("no token: %d", r.Status)
	}
}
