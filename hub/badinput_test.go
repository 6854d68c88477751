package hub_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestBadInputChangesNothing sends what a careless or hostile client sends
// at the edges (issue "Security and correctness, round 4", item 4): each
// is refused with a sentence, and the repo is as it was.
func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.createRepoJSON(alice, `{"name":"int","visibility":"internal"}`)
	if r := e.commitLines(alice, "alice/m", regularFileLine("fd", []byte("file")), regularFileLine("dir/a.txt", []byte("a"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	head := mustHead(t, e, alice, "alice/m")
	for name, lines := range map[string][]string{
		"a file under a file":          {regularFileLine("fd/child", []byte("x"))},
		"a file named as a folder":     {regularFileLine("dir", []byte("x"))},
		"both in one commit":           {regularFileLine("n", []byte("x")), regularFileLine("n/o", []byte("y"))},
		`a Windows "..\" path`:         {regularFileLine(`..\ddd`, []byte("x"))},
		`a Windows ".git" path`:        {regularFileLine(`sub\.git\config`, []byte("x"))},
		`a "..\" inside a folder name`: {regularFileLine(`a/..\..\b`, []byte("x"))},
	} {
		r := e.commitLines(alice, "alice/m", lines...)
		if r.Status != 400 || r.JSON(t)["code"] != "bad_request" || r.Header.Get("X-Error-Message") == "" {
			t.Errorf("%s: %d %s, want 400 bad_request with a sentence", name, r.Status, r.Body)
		}
	}
	if got := mustHead(t, e, alice, "alice/m"); got != head {
		t.Errorf("a refused commit moved main: %s, was %s", got, head)
	}

	// A branch named refs/heads/x is refused, not created as x.
	r := e.Do("POST", "/api/models/alice/m/branch/"+url.PathEscape("refs/heads/x"), alice, []byte(`{}`))
	if r.Status != 400 {
		t.Errorf("branch refs/heads/x: %d %s, want 400", r.Status, r.Body)
	}
	if r := e.Do("GET", "/api/models/alice/m/refs", alice, nil); strings.Contains(string(r.Body), `"x"`) || strings.Contains(string(r.Body), "refs/heads/x") && strings.Count(string(r.Body), "refs/heads/") > 1 {
		t.Errorf("refs after the refused branch: %s", r.Body)
	}

	// A deletion names a whole repo id: "alice/int" is alice's repo, never
	// one of bob's own namespace; bob may read it, not delete it.
	r = e.Do("DELETE", "/api/repos/delete", bob, []byte(`{"type":"model","name":"alice/int"}`))
	if r.Status != 403 {
		t.Errorf("bob deletes alice/int: %d %s, want 403 (he may read it, not change it)", r.Status, r.Body)
	}
	if r := e.Do("GET", "/api/models/alice/int", alice, nil); r.Status != 200 {
		t.Fatalf("alice/int after bob's refused deletion: %d", r.Status)
	}
	if r := e.Do("DELETE", "/api/repos/delete", alice, []byte(`{"type":"model","name":"alice/int"}`)); r.Status != 200 {
		t.Errorf("alice deletes alice/int by its id: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/api/models/alice/int", alice, nil); r.Status != 404 {
		t.Errorf("alice/int after its deletion: %d", r.Status)
	}
}

// TestPathsDecodedOnce commits files whose names hold percent signs and
// reads each on resolve, raw, tree and paths-info with its name escaped
// once, as the clients send it: each is found, and its escaped form is not
// read as another name.
func TestPathsDecodedOnce(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	names := []string{"percent%2e%2e.txt", "d%2Fx/in.txt", "100%.txt", "a b+c.txt"}
	var lines []string
	for _, n := range names {
		lines = append(lines, regularFileLine(n, []byte("body of "+n)))
	}
	if r := e.commitLines(alice, "alice/m", lines...); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	for _, n := range names {
		esc := (&url.URL{Path: n}).EscapedPath()
		esc = strings.ReplaceAll(esc, "%25", "%25") // EscapedPath keeps "/" and escapes "%"
		for _, route := range []string{"resolve", "raw"} {
			r := e.Do("GET", "/alice/m/"+route+"/main/"+esc, alice, nil)
			if r.Status != 200 || string(r.Body) != "body of "+n {
				t.Errorf("%s %s (sent %s): %d %q", route, n, esc, r.Status, r.Body)
			}
		}
	}
	if r := e.Do("GET", "/alice/m/resolve/main/percent..txt", alice, nil); r.Status != 404 {
		t.Errorf("percent..txt, a name no file has: %d", r.Status)
	}
	dir := (&url.URL{Path: "d%2Fx"}).EscapedPath()
	r := e.Do("GET", "/api/models/alice/m/tree/main/"+dir, alice, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"d%2Fx/in.txt"`) {
		t.Errorf("tree of d%%2Fx: %d %s", r.Status, r.Body)
	}
}

// TestDeletedFileOfAFolder: a deletedFile naming a folder (no trailing
// "/", as huggingface_hub's delete_file sends it) deletes the folder, as
// the Hub does; a file of a name that only prefixes others stays.
func TestDeletedFileOfAFolder(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	if r := e.commitLines(alice, "alice/m", regularFileLine("d/a.txt", []byte("a")), regularFileLine("d/e/b.txt", []byte("b")), regularFileLine("dd", []byte("c"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if r := e.commitLines(alice, "alice/m", deleteLine("deletedFile", "d")); r.Status != 200 {
		t.Fatalf("deletedFile d: %d %s", r.Status, r.Body)
	}
	for p, want := range map[string]int{"d/a.txt": 404, "d/e/b.txt": 404, "dd": 200} {
		if r := e.Do("HEAD", "/alice/m/resolve/main/"+p, alice, nil); r.Status != want {
			t.Errorf("%s after deletedFile d: %d, want %d", p, r.Status, want)
		}
	}
}
