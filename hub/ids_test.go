package hub_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRepoIDsIgnoreCase: as on the Hub, Org/Name and org/name are one
// repo. Every read answers for the repo as it was created (its id as
// created), a second repo whose name differs only in case is refused 409,
// and a reader of another tenant gets no more through a case variant than
// through the exact id.
func TestRepoIDsIgnoreCase(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"MyModel"}`)
	if r := e.commitLines(alice, "alice/MyModel", regularFileLine("a.txt", []byte("a"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	for _, id := range []string{"alice/MyModel", "alice/mymodel", "Alice/MYMODEL"} {
		r := e.Do("GET", "/api/models/"+id, alice, nil)
		if r.Status != 200 || r.JSON(t)["id"] != "alice/MyModel" {
			t.Errorf("info of %s: %d %s, want 200 for alice/MyModel", id, r.Status, r.Body)
		}
		if r := e.Do("GET", "/"+id+"/resolve/main/a.txt", alice, nil); r.Status != 200 || string(r.Body) != "a" {
			t.Errorf("resolve through %s: %d %q", id, r.Status, r.Body)
		}
		if r := e.Do("GET", "/api/models/"+id, bob, nil); r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
			t.Errorf("bob reads private %s: %d %s, want 404 RepoNotFound", id, r.Status, r.Header.Get("X-Error-Code"))
		}
	}
	if r := e.commitLines(alice, "alice/mymodel", regularFileLine("b.txt", []byte("b"))); r.Status != 200 {
		t.Errorf("commit through alice/mymodel: %d %s", r.Status, r.Body)
	}
	before := e.state()
	r := e.Do("POST", "/api/repos/create", alice, []byte(`{"name":"mymodel"}`))
	if r.Status != 409 || r.JSON(t)["id"] != "alice/MyModel" || !strings.HasSuffix(r.JSON(t)["url"].(string), "/alice/MyModel") {
		t.Errorf("create alice/mymodel beside alice/MyModel: %d %s, want 409 naming alice/MyModel", r.Status, r.Body)
	}
	if diff := cmp.Diff(before, e.state()); diff != "" {
		t.Errorf("the refused create changed the state:\n%s", diff)
	}
}

// TestShortCommitIDs: 7 or more leading hex digits of a commit id resolve
// to it, as git's abbreviated ids do; a prefix no commit has is 404
// RevisionNotFound.
func TestShortCommitIDs(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	if r := e.commitLines(alice, "alice/m", regularFileLine("a.txt", []byte("a"))); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	head := mustHead(t, e, alice, "alice/m")
	for _, n := range []int{7, 12, 39} {
		r := e.Do("GET", "/alice/m/resolve/"+head[:n]+"/a.txt", alice, nil)
		if r.Status != 200 || r.Header.Get("X-Repo-Commit") != head {
			t.Errorf("resolve at %s: %d, X-Repo-Commit %q, want %s", head[:n], r.Status, r.Header.Get("X-Repo-Commit"), head)
		}
		if r := e.Do("GET", "/api/models/alice/m/revision/"+head[:n], alice, nil); r.Status != 200 || r.JSON(t)["sha"] != head {
			t.Errorf("revision %s: %d %s", head[:n], r.Status, r.Body)
		}
	}
	other := "0000000"
	if strings.HasPrefix(head, other) {
		other = "fffffff"
	}
	if r := e.Do("GET", "/alice/m/resolve/"+other+"/a.txt", alice, nil); r.Status != 404 || r.Header.Get("X-Error-Code") != "RevisionNotFound" {
		t.Errorf("resolve at %s: %d %s", other, r.Status, r.Header.Get("X-Error-Code"))
	}
	if r := e.Do("GET", "/alice/m/resolve/"+head[:6]+"/a.txt", alice, nil); r.Status != 404 {
		t.Errorf("resolve at 6 digits %s: %d, want 404 (too short to name a commit)", head[:6], r.Status)
	}
}
