package hub_test

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	"openxet/store/accounts"
	"openxet/testgit"
)

// TestGitWithPersonalTokens: stock git and git-lfs with a user's personal
// token as the Basic password (what `hf auth login
// --add-to-git-credential` stores): a writing member of organization acme
// clones its private repo and pushes to it, large files included (git-lfs
// uploads them through the LFS batch route into acme's CAS, charged to
// acme); a reading member clones but its push is refused with 403; a user
// who is not a member gets 404 on every git route, as from the API; and
// the head does not move on a refusal.
func TestGitWithPersonalTokens(t *testing.T) {
	testgit.Need(t, true)
	e := newEnv(t)
	ctx := context.Background()
	robot := e.Credential("acme", "write")
	e.createRepoJSON(robot, `{"name":"m","private":true}`)
	tokens := map[string]string{}
	for user, role := range map[string]string{"pat": "write", "rita": "read", "out": ""} {
		if _, err := e.Store.CreateUser(ctx, user, user+"@example.com", false); err != nil {
			t.Fatal(err)
		}
		if role != "" {
			if _, err := e.Store.SetMember(ctx, "acme", user, role); err != nil {
				t.Fatal(err)
			}
		}
		_, tok, err := e.Store.CreateToken(ctx, user, accounts.TokenSpec{Role: accounts.RoleWrite})
		if err != nil {
			t.Fatal(err)
		}
		tokens[user] = tok
	}
	before, err := e.Store.Usage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	p := newPushClone(t, e, tokens["pat"], "acme/m", true)
	weights := bytes.Repeat([]byte{9, 8, 7, 6, 200}, 40_000)
	p.write("model.bin", weights)
	p.write("README.md", []byte("# by pat\n"))
	head := p.commit("pat's model")
	p.must("push", "-q", "origin", "main")
	if got := mustHead(t, e, robot, "acme/m"); got != head {
		t.Fatalf("the API's head %s, git's %s", got, head)
	}
	if r := e.Do("GET", "/acme/m/resolve/main/model.bin", tokens["rita"], nil); r.Status != 200 || !bytes.Equal(r.Body, weights) {
		t.Fatalf("model.bin to the read member: %d, %d bytes", r.Status, len(r.Body))
	}
	after, err := e.Store.Usage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("acme's stored bytes %d → %d after pat's push of LFS files", before, after)
	}

	r := newPushClone(t, e, tokens["rita"], "acme/m", true)
	r.write("README.md", []byte("# by rita\n"))
	r.commit("rita's change")
	r.refused("403", "-q", "origin", "main")
	refs := "/acme/m/info/refs?service=git-upload-pack"
	if got := e.Do("GET", refs, "", nil, basic(tokens["out"])); got.Status != 404 {
		t.Errorf("a user who is not a member: %d, want 404", got.Status)
	}
	if got := e.Do("GET", "/acme/m/info/refs?service=git-receive-pack", "", nil, basic(tokens["out"])); got.Status != 404 {
		t.Errorf("a push by a user who is not a member: %d, want 404", got.Status)
	}
	u, _ := url.Parse(e.URL)
	if out, err := runGit(t, t.TempDir(), "clone", "-q", "http://git:"+tokens["out"]+"@"+u.Host+"/acme/m", "c"); err == nil {
		t.Errorf("clone by a user who is not a member succeeded: %s", out)
	}
	if got := mustHead(t, e, robot, "acme/m"); got != head {
		t.Errorf("head moved from %s to %s on a refusal", head, got)
	}
	e.IndexAgrees()
}
