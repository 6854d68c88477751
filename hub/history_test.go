package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// historyRepo makes alice/m with three commits: c1 adds a.txt, dir/x.txt
// and big.bin (Xet), c2 changes dir/x.txt, c3 adds b.txt. It returns the
// env, alice's token, bob's, and the commits oldest first (with the
// initial commit first).
func historyRepo(t *testing.T) (env, string, string, []string) {
	t.Helper()
	e := newEnv(t)
	alice, bob := e.Credential("alice", "read", "write"), e.Credential("bob", "read", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.createRepoJSON(bob, `{"name":"m"}`)
	shas := []string{mustHead(t, e, alice, "alice/m")}
	big, _ := e.xetFileLine(alice, "big.bin", 1)
	for _, lines := range [][]string{
		{regularFileLine("a.txt", []byte("a")), regularFileLine("dir/x.txt", []byte("x1")), big},
		{regularFileLine("dir/x.txt", []byte("x2"))},
		{regularFileLine("b.txt", []byte("b"))},
	} {
		if r := e.commitLines(alice, "alice/m", lines...); r.Status != 200 {
			t.Fatalf("commit: %d %s", r.Status, r.Body)
		}
		shas = append(shas, mustHead(t, e, alice, "alice/m"))
	}
	return e, alice, bob, shas
}

func decodeList(t *testing.T, name string, r response) []map[string]any {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("%s: %d %s", name, r.Status, r.Body)
	}
	var out []map[string]any
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatalf("%s: %v in %s", name, err, r.Body)
	}
	return out
}

// TestPathsInfo: paths-info answers each file or folder asked for, as the
// tree route answers it, from a form body (huggingface_hub) or a JSON one
// (@huggingface/hub), leaving out paths that are neither; with expand,
// each has the last commit that changed it.
func TestPathsInfo(t *testing.T) {
	e, alice, _, shas := historyRepo(t)
	form := func(expand string, paths ...string) []byte {
		return []byte(url.Values{"paths": paths, "expand": {expand}}.Encode())
	}
	formCT := "Content-Type: application/x-www-form-urlencoded"
	jsonCT := "Content-Type: application/json"

	// The same shapes as the tree route.
	tree := map[string]map[string]any{}
	for _, it := range decodeList(t, "tree", e.Do("GET", "/api/models/alice/m/tree/main?recursive=true", alice, nil)) {
		tree[it["path"].(string)] = it
	}
	got := decodeList(t, "form", e.Do("POST", "/api/models/alice/m/paths-info/main", alice, form("false", "big.bin", "nope.txt", "dir", "a.txt", "/a.txt"), formCT))
	if want := []map[string]any{tree["big.bin"], tree["dir"], tree["a.txt"]}; !reflect.DeepEqual(got, want) {
		t.Errorf("paths-info (form): %v\nwant %v", got, want)
	}
	if lfs, _ := got[0]["lfs"].(map[string]any); got[0]["xetHash"] == nil || lfs["oid"] == nil || lfs["pointerSize"] == nil {
		t.Errorf("big.bin: %v; want xetHash and lfs {oid, size, pointerSize}", got[0])
	}
	if got[1]["type"] != "directory" || got[2]["type"] != "file" || got[2]["lfs"] != nil {
		t.Errorf("dir and a.txt: %v, %v; want a directory and a regular file", got[1], got[2])
	}

	// expand: lastCommit is the newest commit that changed the path.
	wantLast := map[string]string{"a.txt": shas[1], "big.bin": shas[1], "dir": shas[2], "dir/x.txt": shas[2], "b.txt": shas[3]}
	for name, req := range map[string][]string{
		"form": {string(form("true", "a.txt", "big.bin", "dir", "dir/x.txt", "b.txt")), formCT},
		"json": {`{"paths":["a.txt","big.bin","dir","dir/x.txt","b.txt"],"expand":true}`, jsonCT},
	} {
		items := decodeList(t, name, e.Do("POST", "/api/models/alice/m/paths-info/main", alice, []byte(req[0]), req[1]))
		if len(items) != len(wantLast) {
			t.Fatalf("%s expand: %d items; want %d: %v", name, len(items), len(wantLast), items)
		}
		for _, it := range items {
			lc, _ := it["lastCommit"].(map[string]any)
			p := it["path"].(string)
			if lc["id"] != wantLast[p] || lc["title"] != "test" || lc["date"] == nil {
				t.Errorf("%s expand %s: lastCommit %v; want id %s, title test and a date", name, p, lc, wantLast[p])
			}
		}
	}
	// At an older revision the history is that revision's.
	items := decodeList(t, "at c1", e.Do("POST", "/api/models/alice/m/paths-info/"+shas[1], alice, []byte(`{"paths":["dir/x.txt","b.txt"],"expand":true}`), jsonCT))
	if len(items) != 1 || items[0]["lastCommit"].(map[string]any)["id"] != shas[1] {
		t.Errorf("paths-info at c1: %v; want dir/x.txt alone, last changed in c1 %s", items, shas[1])
	}
	// Without expand no lastCommit; nothing found is an empty list.
	items = decodeList(t, "no expand", e.Do("POST", "/api/models/alice/m/paths-info/main", alice, []byte(`{"paths":["a.txt"]}`), jsonCT))
	if len(items) != 1 || items[0]["lastCommit"] != nil {
		t.Errorf("paths-info without expand: %v; want a.txt without lastCommit", items)
	}
	if items := decodeList(t, "none", e.Do("POST", "/api/models/alice/m/paths-info/main", alice, form("false", "nope"), formCT)); len(items) != 0 {
		t.Errorf("paths-info of a missing path: %v; want []", items)
	}
	// A JSON body without a Content-Type is read as JSON.
	if items := decodeList(t, "untyped JSON", e.Do("POST", "/api/models/alice/m/paths-info/main", alice, []byte(` {"paths":["a.txt","dir"]}`))); len(items) != 2 {
		t.Errorf("paths-info of JSON without Content-Type: %v; want a.txt and dir", items)
	}
	// HEAD names the default branch.
	if items := decodeList(t, "HEAD", e.Do("POST", "/api/models/alice/m/paths-info/HEAD", alice, form("false", "b.txt"), formCT)); len(items) != 1 {
		t.Errorf("paths-info at HEAD: %v; want b.txt", items)
	}
}

// TestPathsInfoAndCommitsRefuse: unknown repos and revisions and another
// tenant's repo are 404 with the Hub's error codes (never 403), bad input
// is 400 or 413, and none of it changes anything.
func TestPathsInfoAndCommitsRefuse(t *testing.T) {
	e, alice, bob, _ := historyRepo(t)
	jsonCT := "Content-Type: application/json"
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("f%d", i)
	}
	manyBody, _ := json.Marshal(map[string]any{"paths": many})
	for _, c := range []struct {
		name, method, path, token, body string
		status                          int
		xErrorCode                      string
	}{
		{"unknown repo", "POST", "/api/models/alice/none/paths-info/main", alice, `{"paths":["a.txt"]}`, 404, "RepoNotFound"},
		{"unknown rev", "POST", "/api/models/alice/m/paths-info/nobranch", alice, `{"paths":["a.txt"]}`, 404, "RevisionNotFound"},
		{"other tenant", "POST", "/api/models/alice/m/paths-info/main", bob, `{"paths":["a.txt"]}`, 404, "RepoNotFound"},
		{"bad JSON", "POST", "/api/models/alice/m/paths-info/main", alice, `{"paths":`, 400, "bad_request"},
		{"too many paths", "POST", "/api/models/alice/m/paths-info/main", alice, string(manyBody), 413, "payload_too_large"},
		{"commits of an unknown repo", "GET", "/api/models/alice/none/commits/main", alice, "", 404, "RepoNotFound"},
		{"commits of an unknown rev", "GET", "/api/models/alice/m/commits/nobranch", alice, "", 404, "RevisionNotFound"},
		{"commits of another tenant's repo", "GET", "/api/models/alice/m/commits/main", bob, "", 404, "RepoNotFound"},
		{"commits of another type", "GET", "/api/datasets/alice/m/commits/main", alice, "", 404, "RepoNotFound"},
		{"limit 0", "GET", "/api/models/alice/m/commits/main?limit=0", alice, "", 400, "bad_request"},
		{"limit over 1000", "GET", "/api/models/alice/m/commits/main?limit=1001", alice, "", 400, "bad_request"},
		{"bad page", "GET", "/api/models/alice/m/commits/main?p=-1", alice, "", 400, "bad_request"},
		{"duplicate into another tenant", "POST", "/api/models/alice/m/lfs-files/duplicate", alice, `{"target":{"type":"model","name":"bob/m"},"files":[]}`, 404, "RepoNotFound"},
		{"duplicate from another tenant", "POST", "/api/models/alice/m/lfs-files/duplicate", bob, `{"target":{"type":"model","name":"bob/m"},"files":[]}`, 404, "RepoNotFound"},
		{"duplicate into an unknown repo", "POST", "/api/models/alice/m/lfs-files/duplicate", alice, `{"target":{"type":"model","name":"alice/none"},"files":[]}`, 404, "RepoNotFound"},
		{"duplicate, bad target", "POST", "/api/models/alice/m/lfs-files/duplicate", alice, `{"target":{"type":"model","name":"none"},"files":[]}`, 400, "bad_request"},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := e.Do(c.method, c.path, c.token, body, jsonCT)
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.xErrorCode {
			t.Errorf("%s: %d, X-Error-Code %q; want %d, %s (%s)", c.name, r.Status, r.Header.Get("X-Error-Code"), c.status, c.xErrorCode, r.Body)
		}
	}
	if r := e.Do("POST", "/api/models/alice/m/paths-info/main", alice, []byte("paths=a.txt&expand=maybe"), "Content-Type: application/x-www-form-urlencoded"); r.Status != 400 {
		t.Errorf("expand=maybe: %d %s; want 400", r.Status, r.Body)
	}
}

// TestCommitsListing: the commits route pages the history newest first
// with the fields list_repo_commits and listCommits read, a Link to the
// next page and X-Total-Count (countCommits).
func TestCommitsListing(t *testing.T) {
	e, alice, _, shas := historyRepo(t)
	var got []string
	path := "/api/models/alice/m/commits/main?limit=3"
	pages := 0
	for path != "" {
		r := e.Do("GET", path, alice, nil)
		if r.Header.Get("X-Total-Count") != "4" {
			t.Errorf("%s: X-Total-Count %q; want 4", path, r.Header.Get("X-Total-Count"))
		}
		for _, it := range decodeList(t, path, r) {
			got = append(got, it["id"].(string))
			authors, _ := it["authors"].([]any)
			if len(authors) != 1 || authors[0].(map[string]any)["user"] != "alice" || it["date"] == nil || it["title"] == nil || it["message"] == nil || it["formatted"] != nil {
				t.Errorf("commit %v: want authors [{user: alice}], date, title, message, no formatted", it)
			}
		}
		path = ""
		if link := r.Header.Get("Link"); link != "" {
			next, ok := strings.CutSuffix(link, `>; rel="next"`)
			if !ok || !strings.HasPrefix(next, "<"+e.URL) {
				t.Fatalf("Link %q", link)
			}
			path = strings.TrimPrefix(next, "<"+e.URL)
		}
		pages++
	}
	want := []string{shas[3], shas[2], shas[1], shas[0]}
	if !reflect.DeepEqual(got, want) || pages != 2 {
		t.Errorf("commits in %d pages: %v; want 2 pages of %v", pages, got, want)
	}
	// The oldest is the repo's initial commit; p and limit address pages.
	items := decodeList(t, "p=1", e.Do("GET", "/api/models/alice/m/commits/main?p=1&limit=3", alice, nil))
	if len(items) != 1 || items[0]["title"] != "initial commit" || items[0]["message"] != "" {
		t.Errorf("p=1&limit=3: %v; want the initial commit", items)
	}
	// At a commit, its own history; expand[]=formatted adds HTML text.
	r := e.Do("GET", "/api/models/alice/m/commits/"+shas[1]+"?expand%5B%5D=formatted", alice, nil)
	items = decodeList(t, "formatted", r)
	f, _ := items[0]["formatted"].(map[string]any)
	if len(items) != 2 || items[0]["id"] != shas[1] || f["title"] != "test" || f["message"] != "" || r.Header.Get("Link") != "" || r.Header.Get("X-Total-Count") != "2" {
		t.Errorf("commits at c1, formatted: %v (Link %q, total %q); want c1 and the initial commit, formatted, no Link", items, r.Header.Get("Link"), r.Header.Get("X-Total-Count"))
	}
	// countCommits asks for limit=1 and reads the total.
	if r := e.Do("GET", "/api/models/alice/m/commits/HEAD?limit=1", alice, nil); r.Header.Get("X-Total-Count") != "4" || len(decodeList(t, "limit=1", r)) != 1 {
		t.Errorf("limit=1 at HEAD: %d items, X-Total-Count %q; want 1 and 4", len(decodeList(t, "limit=1", r)), r.Header.Get("X-Total-Count"))
	}
}

// TestRevisionHEADIsTheDefaultBranch: @huggingface/hub's modelInfo asks
// for revision/HEAD when given no revision.
func TestRevisionHEADIsTheDefaultBranch(t *testing.T) {
	e, alice, _, shas := historyRepo(t)
	r := e.Do("GET", "/api/models/alice/m/revision/HEAD?expand=sha", alice, nil)
	if r.Status != 200 || r.JSON(t)["sha"] != shas[3] {
		t.Errorf("revision/HEAD: %d %s; want the head of main %s", r.Status, r.Body, shas[3])
	}
}

// TestCopyCommitCostsNoBytes: the commit huggingface_hub sends for a
// CommitOperationCopy of a Xet file (an lfsFile line with the source's
// oid and no size) adds the file without a byte charged, within a repo
// and across two repos of the tenant after lfs-files/duplicate.
func TestCopyCommitCostsNoBytes(t *testing.T) {
	e, alice, _, _ := historyRepo(t)
	e.createRepoJSON(alice, `{"name":"dest","type":"dataset"}`)
	ctx := context.Background()
	usage := func() int64 {
		t.Helper()
		ts, err := e.Store.Tenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range ts {
			if tn.Name == "alice" {
				return tn.UsageBytes
			}
		}
		t.Fatal("no tenant alice")
		return 0
	}
	before := usage()
	items := decodeList(t, "source", e.Do("POST", "/api/models/alice/m/paths-info/main", alice, []byte(`{"paths":["big.bin"]}`), "Content-Type: application/json"))
	lfs := items[0]["lfs"].(map[string]any)
	copyLine := fmt.Sprintf(`{"key":"lfsFile","value":{"path":"copy/big.bin","algo":"sha256","oid":%q}}`, lfs["oid"])
	if r := e.commitLines(alice, "alice/m", copyLine); r.Status != 200 {
		t.Fatalf("copy commit: %d %s", r.Status, r.Body)
	}
	dup := fmt.Sprintf(`{"target":{"type":"dataset","name":"alice/dest"},"files":[{"xetHash":%q,"sha256":%q,"filename":"big.bin"},{"xetHash":"","sha256":"%064x","filename":"gone.bin"}]}`,
		items[0]["xetHash"], lfs["oid"], 7)
	r := e.Do("POST", "/api/models/alice/m/lfs-files/duplicate", alice, []byte(dup), "Content-Type: application/json")
	failed, _ := r.JSON(t)["failed"].([]any)
	if r.Status != 200 || len(failed) != 1 || failed[0].(map[string]any)["sha256"] != fmt.Sprintf("%064x", 7) {
		t.Errorf("duplicate: %d %s; want 200 with the unknown file alone failed", r.Status, r.Body)
	}
	body := `{"key":"header","value":{"summary":"copy"}}` + "\n" + strings.Replace(copyLine, "copy/big.bin", "big.bin", 1) + "\n"
	if r := e.Do("POST", "/api/datasets/alice/dest/commit/main", alice, []byte(body)); r.Status != 200 {
		t.Fatalf("cross-repo copy commit: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/api/models/alice/m/paths-info/main", "/api/datasets/alice/dest/paths-info/main"} {
		path := "copy/big.bin"
		if strings.Contains(p, "dest") {
			path = "big.bin"
		}
		got := decodeList(t, p, e.Do("POST", p, alice, []byte(`{"paths":["`+path+`"]}`), "Content-Type: application/json"))
		if len(got) != 1 || got[0]["xetHash"] != items[0]["xetHash"] || got[0]["size"] != items[0]["size"] {
			t.Errorf("%s %s: %v; want the source's xetHash and size %v", p, path, got, items[0])
		}
	}
	if after := usage(); after != before {
		t.Errorf("usage %d bytes before the copies, %d after; want no change", before, after)
	}
}
