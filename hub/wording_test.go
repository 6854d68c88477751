package hub_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRefusalsInTheHubsWords: the refusals huggingface_hub's own tests
// match by the Hub's sentence carry it (in X-Error-Message, which the
// client prints, and the body's error), with the Hub's status, and change
// nothing: a branch that exists ("Reference refs/heads/X already exists",
// 409, which create_branch(exist_ok=True) accepts), deleting main ("Cannot
// delete refs/heads/main"), a stale parent commit (412, "The branch was
// updated since you opened this page. Please refresh and try again.") and
// a move onto a repo that exists ("A model repository called … already
// exists").
func TestRefusalsInTheHubsWords(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	for _, name := range []string{"m", "other"} {
		e.createRepoJSON(alice, `{"name":"`+name+`"}`)
	}
	if r := e.commitLines(alice, "alice/m", regularFileLine("a.txt", []byte("a"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if r := e.Do("POST", "/api/models/alice/m/branch/dev", alice, nil); r.Status != 200 {
		t.Fatalf("branch: %d %s", r.Status, r.Body)
	}
	stale := `{"key":"header","value":{"summary":"x","parentCommit":"` + strings.Repeat("0", 40) + `"}}` + "\n" + regularFileLine("b.txt", []byte("b")) + "\n"
	before := e.state()
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		words                    string
	}{
		{"branch exists", "POST", "/api/models/alice/m/branch/dev", "", 409, "Reference refs/heads/dev already exists"},
		{"main exists", "POST", "/api/models/alice/m/branch/main", "", 409, "Reference refs/heads/main already exists"},
		{"delete main", "DELETE", "/api/models/alice/m/branch/main", "", 400, "Cannot delete refs/heads/main"},
		{"stale parent", "POST", "/api/models/alice/m/commit/main", stale, 412, "The branch was updated since you opened this page. Please refresh and try again."},
		{"move onto a repo", "POST", "/api/repos/move", `{"fromRepo":"alice/m","toRepo":"alice/other","type":"model"}`, 409, "A model repository called alice/other already exists"},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := e.Do(c.method, c.path, alice, body)
		msg := r.Header.Get("X-Error-Message")
		if r.Status != c.status || !strings.Contains(msg, c.words) || !strings.Contains(string(r.Body), c.words) {
			t.Errorf("%s: %d %q (%s), want %d with %q", c.name, r.Status, msg, r.Body, c.status, c.words)
		}
	}
	if diff := cmp.Diff(before, e.state()); diff != "" {
		t.Errorf("the refusals changed the state:\n%s", diff)
	}
}
