package server

import (
	"context"
	"fmt"
	"testing"

	"openxet/hub"
	"openxet/limits"
	"openxet/store"

	"openxet/store/accounts"
)

// BenchmarkAuthorization is the per-request cost of deciding who a
// request is and what it may do to a repo (docs/people.md): a robot
// credential of the repo's organization against a write token of a user
// who belongs to 50 organizations, the repo's among them. "decide" is
// authentication and the repo's level alone (both cached after the first
// request: no index read); "repo-info" is a whole GET of the repo's info
// through the server. Compare the personal/robot ratio within one run.
func BenchmarkAuthorization(b *testing.B) {
	e := newTestEnv(b, func(c *Config) {
		c.Limits.TenantRate = limits.Rate{PerSecond: 1e9, Burst: 1e9}
		c.Limits.CredentialRate = limits.Rate{PerSecond: 1e9, Burst: 1e9}
	})
	ctx := context.Background()
	robot := e.credential("acme", "write")
	e.createRepo(robot, "m")
	if _, err := e.st.CreateUser(ctx, "pat", "pat@example.com", false); err != nil {
		b.Fatal(err)
	}
	for i := range 49 {
		org := fmt.Sprintf("org%02d", i)
		if _, err := e.st.CreateOrg(ctx, org); err != nil {
			b.Fatal(err)
		}
		if _, err := e.st.SetMember(ctx, org, "pat", accounts.RoleRead); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.st.SetMember(ctx, "acme", "pat", accounts.RoleWrite); err != nil {
		b.Fatal(err)
	}
	_, personal, err := e.st.CreateToken(ctx, "pat", accounts.TokenSpec{Role: accounts.RoleWrite})
	if err != nil {
		b.Fatal(err)
	}
	repo := store.RepoID{Tenant: "acme", Type: "model", Name: "m"}
	for _, c := range []struct{ name, tok string }{{"robot", robot}, {"personal-50-orgs", personal}} {
		b.Run("decide/"+c.name, func(b *testing.B) {
			for b.Loop() {
				id, err := e.srv.authenticate(ctx, c.tok)
				if err != nil {
					b.Fatal(err)
				}
				p := &hub.Principal{Tenant: id.Tenant, Scopes: id.Scopes, Access: id.access, User: id.person}
				if p.Level(repo) < accounts.WriteAccess {
					b.Fatal("no write level")
				}
			}
		})
		b.Run("repo-info/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if r := e.do("GET", "/api/models/acme/m", c.tok, nil); r.Status != 200 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
		})
	}
}
