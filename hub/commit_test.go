package hub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// state is what a refused request must leave as it was: every object of
// the bucket, every index table's row count, every tenant's usage.
type state struct {
	Objects []string
	Rows    map[string]int64
	Usage   map[string]int64
}

func (e env) state() state {
	e.TB.Helper()
	ctx := context.Background()
	var s state
	it := e.Store.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		s.Objects = append(s.Objects, obj.Key)
	}
	var err error
	if s.Rows, err = e.Store.Counts(ctx); err != nil {
		e.TB.Fatal(err)
	}
	ts, err := e.Store.Tenants(ctx)
	if err != nil {
		e.TB.Fatal(err)
	}
	s.Usage = map[string]int64{}
	for _, tn := range ts {
		s.Usage[tn.Name] = tn.UsageBytes
	}
	return s
}

// commitTo commits NDJSON lines (a header first) to a revision of repo.
func (e env) commitTo(token, repo, rev string, lines ...string) response {
	e.TB.Helper()
	body := `{"key":"header","value":{"summary":"test"}}` + "\n" + strings.Join(lines, "\n") + "\n"
	return e.Do("POST", "/api/models/"+repo+"/commit/"+url.PathEscape(rev), token, []byte(body))
}

// deleteLine is a deletedFile or deletedFolder operation (or any key
// with a path), the path JSON-escaped.
func deleteLine(key, path string) string {
	p, _ := json.Marshal(path)
	return fmt.Sprintf(`{"key":%q,"value":{"path":%s}}`, key, p)
}

// TestRefusedCommitsChangeNothing: a commit with a bad operation anywhere
// (a bad path, a line that is not a JSON object, a deletion of what is not
// there, a stale parent) or to a revision that is not a branch is refused
// with a 4xx that says why, and leaves the bucket, the index and the usage
// as they were: the valid regular file before the bad line leaves no blob.
func TestRefusedCommitsChangeNothing(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	if r := e.commitLines(alice, "alice/m", regularFileLine("d/a.txt", []byte("a")), regularFileLine("keep.txt", []byte("k"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/models/alice/m/tag/main", alice, []byte(`{"tag":"vt"}`)); r.Status != 200 {
		t.Fatalf("tag: %d %s", r.Status, r.Body)
	}
	head := mustHead(t, e, alice, "alice/m")
	fresh := regularFileLine("fresh.txt", []byte("bytes that no refused commit may store"))
	before := e.state()
	long := strings.Repeat("a/", 512) + "x"
	for _, c := range []struct {
		name   string
		rev    string
		lines  []string
		status int
		code   string // X-Error-Code
		text   string // in the message
	}{
		{"deletedFile ../x", "main", []string{fresh, deleteLine("deletedFile", "../x")}, 400, "bad_request", `the path has a ".." component`},
		{"deletedFile a/../b", "main", []string{fresh, deleteLine("deletedFile", "a/../b")}, 400, "bad_request", `".." component`},
		{"deletedFile empty", "main", []string{fresh, deleteLine("deletedFile", "")}, 400, "bad_request", "the path is empty"},
		{"deletedFile /", "main", []string{fresh, deleteLine("deletedFile", "/")}, 400, "bad_request", "the path is empty"},
		{"deletedFile NUL", "main", []string{fresh, deleteLine("deletedFile", "a\x00b")}, 400, "bad_request", "control character"},
		{"deletedFile newline", "main", []string{fresh, deleteLine("deletedFile", "a\nb")}, 400, "bad_request", "control character"},
		{"deletedFile too long", "main", []string{fresh, deleteLine("deletedFile", long)}, 400, "bad_request", "over the 1024"},
		{"deletedFile a//b", "main", []string{fresh, deleteLine("deletedFile", "a//b")}, 400, "bad_request", "empty component"},
		{"deletedFile .git", "main", []string{fresh, deleteLine("deletedFile", ".git/config")}, 400, "bad_request", ".git"},
		{"deletedFolder ../x", "main", []string{fresh, deleteLine("deletedFolder", "../x/")}, 400, "bad_request", `".." component`},
		{"deletedFolder empty", "main", []string{fresh, deleteLine("deletedFolder", "")}, 400, "bad_request", "the path is empty"},
		{"deletedFolder /", "main", []string{fresh, deleteLine("deletedFolder", "/")}, 400, "bad_request", "the path is empty"},
		{"deletedFolder a/../b", "main", []string{fresh, deleteLine("deletedFolder", "a/../b")}, 400, "bad_request", `".." component`},
		{"deletedFolder NUL", "main", []string{fresh, deleteLine("deletedFolder", "a\x00")}, 400, "bad_request", "control character"},
		{"deletedFolder too long", "main", []string{fresh, deleteLine("deletedFolder", long)}, 400, "bad_request", "over the 1024"},
		{"file ../x", "main", []string{fresh, regularFileLine("../x", []byte("x"))}, 400, "bad_request", `".." component`},
		{"file not base64", "main", []string{fresh, `{"key":"file","value":{"path":"b.txt","content":"%%%","encoding":"base64"}}`}, 400, "bad_request", "not base64"},
		{"lfsFile unknown oid", "main", []string{fresh, `{"key":"lfsFile","value":{"path":"b.bin","algo":"sha256","oid":"` + strings.Repeat("ab", 32) + `","size":3}}`}, 400, "bad_request", "upload it through Xet first"},
		{"unknown key", "main", []string{fresh, deleteLine("copyFolder", "x")}, 400, "bad_request", "unknown commit operation"},
		{"not JSON", "main", []string{fresh, "this is not json"}, 400, "bad_request", "line 3 is not a JSON object"},
		{"JSON not an object", "main", []string{fresh, "[1,2]"}, 400, "bad_request", "not a JSON object"},
		{"null", "main", []string{fresh, "null"}, 400, "bad_request", "not a JSON object"},
		{"a form feed", "main", []string{fresh, "\f"}, 400, "bad_request", "not a JSON object"},
		{"a no-break space", "main", []string{fresh, "\u00a0"}, 400, "bad_request", "not a JSON object"},
		{"trailing garbage", "main", []string{fresh, deleteLine("deletedFile", "keep.txt") + " x"}, 400, "bad_request", "not JSON"},
		{"a second header", "main", []string{fresh, `{"key":"header","value":{"summary":"again"}}`}, 400, "bad_request", "second header"},
		{"missing file", "main", []string{fresh, deleteLine("deletedFile", "nope.txt")}, 404, "EntryNotFound", "no file nope.txt to delete"},
		{"missing folder", "main", []string{fresh, deleteLine("deletedFolder", "nope/")}, 404, "EntryNotFound", "no folder nope to delete"},
		{"a file under a file", "main", []string{fresh, regularFileLine("keep.txt/x", []byte("x"))}, 400, "bad_request", "keep.txt is a file, so keep.txt/x cannot be in a folder of that name"},
		{"a file named as a folder", "main", []string{fresh, regularFileLine("d", []byte("x"))}, 400, "bad_request", "d is a file, so d/a.txt cannot be in a folder of that name"},
		{`a Windows "..\" path`, "main", []string{fresh, regularFileLine(`..\ddd`, []byte("x"))}, 400, "bad_request", `the path has a ".." component`},
		{"a tag", "vt", []string{fresh}, 400, "bad_request", "vt is a tag of alice/m: not a branch: tags cannot be committed to, only branches"},
		{"a tag's ref", "refs/tags/vt", []string{fresh}, 400, "bad_request", "tags cannot be committed to"},
		{"a pull request", "refs/pr/1", []string{fresh}, 400, "bad_request", "commits go to branches"},
		{"a commit id", head, []string{fresh}, 400, "bad_request", "40 hex digits read as a commit id"},
		{"a bad branch name", "a..b", []string{fresh}, 400, "bad_request", `".." is not allowed`},
		{"no such branch", "dev", []string{fresh}, 404, "RevisionNotFound", "branch dev not found in alice/m"},
	} {
		r := e.commitTo(alice, "alice/m", c.rev, c.lines...)
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.code || !strings.Contains(r.Header.Get("X-Error-Message"), c.text) {
			t.Errorf("%s: %d, X-Error-Code %q, X-Error-Message %q; want %d, %s, saying %q", c.name, r.Status,
				r.Header.Get("X-Error-Code"), r.Header.Get("X-Error-Message"), c.status, c.code, c.text)
			continue
		}
		if m := r.JSON(t); !strings.Contains(fmt.Sprint(m["error"]), c.text) {
			t.Errorf("%s: body error %q does not say %q", c.name, m["error"], c.text)
		}
	}
	// A stale parent commit: 412 precondition_failed, with the sentence
	// huggingface_hub prints after its "412 Client Error" line.
	stale := `{"key":"header","value":{"summary":"x","parentCommit":"` + strings.Repeat("0", 40) + `"}}` + "\n" + fresh + "\n"
	r := e.Do("POST", "/api/models/alice/m/commit/main", alice, []byte(stale))
	hubRefusal(t, "stale parent", r, 412, "precondition_failed", "precondition_failed",
		"parent commit "+strings.Repeat("0", 40)+" is not the head of main. The branch was updated since you opened this page. Please refresh and try again. Pull the new head and commit again")
	if diff := cmp.Diff(before, e.state()); diff != "" {
		t.Fatalf("refused commits changed the state:\n%s", diff)
	}
	if got := mustHead(t, e, alice, "alice/m"); got != head {
		t.Fatalf("head moved from %s to %s", head, got)
	}

	// The same operations without the bad one go through: the folder and
	// the file named with a leading and a trailing "/" as clients send them.
	r = e.commitLines(alice, "alice/m", fresh, deleteLine("deletedFolder", "/d/"), deleteLine("deletedFile", "/keep.txt"))
	if r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if files := e.tree(t, alice, "alice/m"); !cmp.Equal(files, []string{".gitattributes", "fresh.txt"}) {
		t.Fatalf("tree %v", files)
	}
}

// tree lists the paths of repo's main, recursively.
func (e env) tree(t *testing.T, token, repo string) []string {
	t.Helper()
	r := e.Do("GET", "/api/models/"+repo+"/tree/main?recursive=true", token, nil)
	if r.Status != 200 {
		t.Fatalf("tree: %d %s", r.Status, r.Body)
	}
	var items []struct{ Type, Path string }
	if err := json.Unmarshal(r.Body, &items); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		if it.Type == "file" {
			out = append(out, it.Path)
		}
	}
	return out
}

// TestRefNamesFollowGit: every route that creates or names a branch or tag
// refuses a name git check-ref-format refuses (or that reads as a full ref
// or a commit id) with 400 and the rule it breaks, and writes nothing.
func TestRefNamesFollowGit(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	head := mustHead(t, e, alice, "alice/m")
	before := e.state()
	for _, name := range []string{
		"a..b", "x.lock", "a/b.lock", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[b", `a\b`, "a\x01b", "a\nb", "a\x7f",
		"refs/tags/evil", "refs/x", "refs/heads/refs/x", head, strings.ToUpper(head), ".x", "a/.x", "a/", "/a", "a//b", "a.", "@", "a@{1}", "-x", "HEAD",
		strings.Repeat("n", 201),
	} {
		esc := url.PathEscape(name)
		body, _ := json.Marshal(map[string]string{"tag": name})
		for _, c := range []struct {
			route, method, path string
			body                []byte
		}{
			{"create branch", "POST", "/api/models/alice/m/branch/" + esc, []byte(`{}`)},
			{"create tag", "POST", "/api/models/alice/m/tag/main", body},
			{"delete branch", "DELETE", "/api/models/alice/m/branch/" + esc, nil},
			{"delete tag", "DELETE", "/api/models/alice/m/tag/" + esc, nil},
			{"commit", "POST", "/api/models/alice/m/commit/" + esc, []byte(`{"key":"header","value":{"summary":"x"}}` + "\n" + regularFileLine("n.txt", []byte("n")) + "\n")},
			{"super-squash", "POST", "/api/models/alice/m/super-squash/" + esc, []byte(`{}`)},
		} {
			r := e.Do(c.method, c.path, alice, c.body)
			if r.Status != 400 || r.Header.Get("X-Error-Code") != "bad_request" || !strings.Contains(r.Header.Get("X-Error-Message"), "invalid branch or tag name") && !strings.Contains(r.Header.Get("X-Error-Message"), "not a branch") {
				t.Errorf("%s %q: %d, X-Error-Code %q, %s; want 400 bad_request naming the rule", c.route, name, r.Status, r.Header.Get("X-Error-Code"), r.Body)
			}
		}
	}
	if diff := cmp.Diff(before, e.state()); diff != "" {
		t.Fatalf("refused ref names changed the state:\n%s", diff)
	}
	// Names git allows are created, committed to and deleted.
	for _, name := range []string{"dev", "feature/x-1", "v1.0", "über", "x@y"} {
		esc := url.PathEscape(name)
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/api/models/alice/m/branch/" + esc, `{}`},
			{"POST", "/api/models/alice/m/commit/" + esc, `{"key":"header","value":{"summary":"x"}}` + "\n" + regularFileLine("n.txt", []byte(name)) + "\n"},
			{"POST", "/api/models/alice/m/tag/" + esc, `{"tag":"t-` + strings.ReplaceAll(name, "/", "-") + `"}`},
			{"DELETE", "/api/models/alice/m/tag/" + url.PathEscape("t-"+strings.ReplaceAll(name, "/", "-")), ""},
			{"DELETE", "/api/models/alice/m/branch/" + esc, ""},
		} {
			var b []byte
			if c.body != "" {
				b = []byte(c.body)
			}
			if r := e.Do(c.method, c.path, alice, b); r.Status != 200 {
				t.Errorf("%s %s: %d %s", c.method, c.path, r.Status, r.Body)
			}
		}
	}
}
