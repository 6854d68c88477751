package hub_test

import (
	"testing"

	"openxet/server"
)

// TestAuthCheck: GET …/auth-check[/write] (HfApi.auth_check) answers 200 {}
// when the caller may read (or change) the repo, 403 when it may read but
// not change it, 404 RepoNotFound when it cannot see it (the same answer
// for a private repo of another tenant and a missing one), and without a
// token 401 RepoNotFound unless anonymous reads let it read a public repo.
func TestAuthCheck(t *testing.T) {
	for _, anon := range []bool{false, true} {
		e := newEnv(t, func(c *server.Config) { c.AnonymousReads = anon })
		alice, aliceRead, bob := e.Credential("alice", "write"), e.Credential("alice", "read"), e.Credential("bob", "write")
		for _, v := range []string{"public", "internal", "private"} {
			e.createRepoJSON(alice, `{"name":"`+v+`","visibility":"`+v+`"}`)
		}
		type want struct {
			status int
			code   string // X-Error-Code, "" for 200
		}
		ok, forbidden, notFound, unauth := want{200, ""}, want{403, "forbidden"}, want{404, "RepoNotFound"}, want{401, "RepoNotFound"}
		anonPublic := unauth
		if anon {
			anonPublic = ok
		}
		for _, c := range []struct {
			who, token, repo string
			read, write      want
		}{
			{"owner", alice, "private", ok, ok},
			{"owner", alice, "public", ok, ok},
			{"owner", alice, "none", notFound, notFound},
			{"read-only credential", aliceRead, "private", ok, forbidden},
			{"read-only credential", aliceRead, "public", ok, forbidden},
			{"other tenant", bob, "public", ok, forbidden},
			{"other tenant", bob, "internal", ok, forbidden},
			{"other tenant", bob, "private", notFound, notFound},
			{"other tenant", bob, "none", notFound, notFound},
			{"anonymous", "", "public", anonPublic, unauth},
			{"anonymous", "", "internal", unauth, unauth},
			{"anonymous", "", "private", unauth, unauth},
			{"anonymous", "", "none", unauth, unauth},
		} {
			for _, p := range []struct {
				suffix string
				want   want
			}{{"", c.read}, {"/write", c.write}} {
				name := c.who + " " + c.repo + " auth-check" + p.suffix
				r := e.Do("GET", "/api/models/alice/"+c.repo+"/auth-check"+p.suffix, c.token, nil)
				if r.Status != p.want.status || r.Header.Get("X-Error-Code") != p.want.code {
					t.Errorf("anonymous reads %v, %s: %d %q %s, want %d %q", anon, name, r.Status, r.Header.Get("X-Error-Code"), r.Body, p.want.status, p.want.code)
					continue
				}
				if p.want.status == 200 && string(r.Body) != "{}\n" {
					t.Errorf("%s: body %q, want {}", name, r.Body)
				}
				if p.want == notFound && r.Header.Get("X-Error-Message") != "repository alice/"+c.repo+" not found. Check the repo id, revision and path" {
					t.Errorf("%s: X-Error-Message %q, the answer of a missing repo", name, r.Header.Get("X-Error-Message"))
				}
			}
		}
		// Another type: no model of that name, so not found.
		if r := e.Do("GET", "/api/datasets/alice/private/auth-check", alice, nil); r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
			t.Errorf("dataset: %d %q", r.Status, r.Header.Get("X-Error-Code"))
		}
	}
}
