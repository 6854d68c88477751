package accounts

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/store/objects"
)

// TestTokens: a personal token is made for an active user, shown once
// (record and row hold only its secret's SHA-256), listed and revoked by
// its owner only; bad specs, inactive owners and others' revocations are
// refused with nothing changed.
func TestTokens(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
		a, _, b := openAt(t, newIndex(), fileBucket(t.TempDir()), func() time.Time { return at })
		mustPeople(t, a)
		tok, token, err := a.CreateToken(ctx, "alice", TokenSpec{Name: "read", Role: RoleRead, Expires: at.Add(24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		id, secret, err := ParseToken(token)
		if err != nil || id != tok.ID || !tok.CheckSecret(secret) || !tok.Personal() || tok.TokenRole() != RoleRead {
			t.Fatalf("token %q of %+v: %v", token, tok, err)
		}
		if rec, _ := b.ReadAll(ctx, CredentialKey(tok.ID)); bytes.Contains(rec, []byte(secret)) {
			t.Fatal("the record holds the secret")
		}
		got, err := a.Credential(ctx, tok.ID)
		if err != nil || !cmp.Equal(got, tok) {
			t.Fatalf("read back %+v %v, want %+v", got, err, tok)
		}
		toks, err := a.Tokens(ctx, "alice")
		roles := map[string]string{}
		for _, c := range toks {
			roles[c.Name] = c.TokenRole()
		}
		if want := map[string]string{"read": RoleRead, "laptop": RoleWrite, "ci": TokenFineGrained}; err != nil || !cmp.Equal(roles, want) {
			t.Fatalf("alice's tokens %+v %v", toks, err)
		}
		robots, _ := a.Credentials(ctx, "acme")
		before := snapshot(t, a, b)
		for _, tc := range []struct {
			name string
			do   func() error
			want string
		}{
			{"no role", func() error { _, _, err := a.CreateToken(ctx, "alice", TokenSpec{}); return err }, "invalid role"},
			{"role and grants", func() error {
				_, _, err := a.CreateToken(ctx, "alice", TokenSpec{Role: RoleRead, Grants: []Grant{{Namespace: "acme", Role: RoleRead}}})
				return err
			}, "invalid role"},
			{"admin role", func() error { _, _, err := a.CreateToken(ctx, "alice", TokenSpec{Role: RoleAdmin}); return err }, "invalid role"},
			{"admin grant", func() error {
				_, _, err := a.CreateToken(ctx, "alice", TokenSpec{Grants: []Grant{{Namespace: "acme", Role: RoleAdmin}}})
				return err
			}, "grant role"},
			{"expired", func() error {
				_, _, err := a.CreateToken(ctx, "alice", TokenSpec{Role: RoleRead, Expires: at})
				return err
			}, "expire"},
			{"suspended owner", func() error { _, _, err := a.CreateToken(ctx, "bob", TokenSpec{Role: RoleRead}); return err }, "suspended or deleted"},
			{"deleted owner", func() error { _, _, err := a.CreateToken(ctx, "carol", TokenSpec{Role: RoleRead}); return err }, "suspended or deleted"},
			{"no owner", func() error { _, _, err := a.CreateToken(ctx, "dave", TokenSpec{Role: RoleRead}); return err }, "not found"},
			{"revoke another's", func() error { _, err := a.RevokeToken(ctx, "bob", tok.ID); return err }, "not found"},
			{"revoke a robot", func() error { _, err := a.RevokeToken(ctx, "alice", robots[0].ID); return err }, "not found"},
		} {
			if err := tc.do(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		}
		if diff := cmp.Diff(before, snapshot(t, a, b)); diff != "" {
			t.Fatalf("refusals changed state (-before +after):\n%s", diff)
		}
		if r, err := a.RevokeToken(ctx, "alice", tok.ID); err != nil || !r.IsRevoked() {
			t.Fatalf("revoke own: %+v %v", r, err)
		}
		// Deleting a user revokes every token of theirs.
		if _, err := a.SetMember(ctx, "acme", "bob", RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if _, err := a.DeleteUser(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		toks, err = a.Tokens(ctx, "alice")
		if err != nil || len(toks) != 3 {
			t.Fatalf("a deleted user's tokens %+v %v", toks, err)
		}
		for _, c := range toks {
			if !c.IsRevoked() {
				t.Errorf("token %s of deleted alice is not revoked", c.Name)
			}
		}
		if ms, err := a.MembershipsOf(ctx, "alice"); err != nil || len(ms) != 0 {
			t.Fatalf("a deleted user's memberships %+v %v", ms, err)
		}
	})
}

// TestParseGrant: the CLI's grant forms, and what is refused.
func TestParseGrant(t *testing.T) {
	for in, want := range map[string]Grant{
		"acme":                     {Namespace: "acme", Role: RoleRead},
		"acme:write":               {Namespace: "acme", Role: RoleWrite},
		"acme/bert":                {Namespace: "acme", Type: "model", Name: "bert", Role: RoleRead},
		"datasets/acme/wiki:write": {Namespace: "acme", Type: "dataset", Name: "wiki", Role: RoleWrite},
	} {
		if g, err := ParseGrant(in); err != nil || g != want {
			t.Errorf("ParseGrant(%q) = %+v %v, want %+v", in, g, err, want)
		}
	}
	for _, in := range []string{"acme:admin", "Bad", "widgets/acme/x", "a/b/c/d", "acme:"} {
		if g, err := ParseGrant(in); err == nil {
			t.Errorf("ParseGrant(%q) = %+v, want an error", in, g)
		}
	}
}

// TestAccess: what a credential may do is its grant intersected with its
// owner's roles now; every way of losing access is nothing.
func TestAccess(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	alice := Person{User: User{Name: "alice"}, Roles: map[string]Level{"acme": WriteAccess, "labs": ReadAccess}}
	suspended := alice
	suspended.User.Suspended = now
	deleted := alice
	deleted.User.Deleted = now
	read := Credential{Tenant: "alice", Kind: KindUser, Scopes: []string{ScopeRead}}
	write := Credential{Tenant: "alice", Kind: KindUser, Scopes: []string{ScopeRead, ScopeWrite}}
	fine := Credential{Tenant: "alice", Kind: KindUser, Grants: []Grant{
		{Namespace: "acme", Type: "model", Name: "bert", Role: RoleWrite}, {Namespace: "labs", Role: RoleRead}}}
	robot := Credential{Tenant: "acme", Scopes: []string{ScopeRead, ScopeWrite}}
	expired := write
	expired.Expires = now
	revoked := write
	revoked.Revoked = now
	for _, tc := range []struct {
		name          string
		c             Credential
		owner         Person
		ns, typ, repo string
		want          Level
	}{
		{"write token, own namespace", write, alice, "alice", "model", "x", AdminAccess},
		{"write token, writer of acme", write, alice, "acme", "model", "x", WriteAccess},
		{"write token, reader of labs", write, alice, "labs", "model", "x", ReadAccess},
		{"write token, not a member", write, alice, "other", "model", "x", NoAccess},
		{"read token, own namespace", read, alice, "alice", "model", "x", ReadAccess},
		{"read token, writer of acme", read, alice, "acme", "model", "x", ReadAccess},
		{"fine, the repo it names", fine, alice, "acme", "model", "bert", WriteAccess},
		{"fine, another repo of acme", fine, alice, "acme", "model", "gpt", NoAccess},
		{"fine, a dataset of that name", fine, alice, "acme", "dataset", "bert", NoAccess},
		{"fine, acme itself", fine, alice, "acme", "", "", NoAccess},
		{"fine, write capped by role", fine, alice, "labs", "model", "x", ReadAccess},
		{"fine, own namespace not listed", fine, alice, "alice", "model", "x", NoAccess},
		{"suspended owner", write, suspended, "alice", "model", "x", NoAccess},
		{"deleted owner", write, deleted, "acme", "model", "x", NoAccess},
		{"no owner read", write, Person{}, "alice", "model", "x", NoAccess},
		{"another's person", write, Person{User: User{Name: "bob"}, Roles: map[string]Level{"acme": AdminAccess}}, "acme", "model", "x", NoAccess},
		{"expired", expired, alice, "alice", "model", "x", NoAccess},
		{"revoked", revoked, alice, "alice", "model", "x", NoAccess},
		{"robot, own org", robot, Person{}, "acme", "model", "x", WriteAccess},
		{"robot, another org", robot, Person{}, "labs", "model", "x", NoAccess},
		{"read robot", Credential{Tenant: "acme", Scopes: []string{ScopeRead}}, Person{}, "acme", "model", "x", ReadAccess},
		{"admin-only robot", Credential{Tenant: "acme", Scopes: []string{ScopeAdmin}}, Person{}, "acme", "model", "x", NoAccess},
	} {
		if got := Access(tc.c, tc.owner, now, tc.ns, tc.typ, tc.repo); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPerson: the owner as the decision reads them.
func TestPerson(t *testing.T) {
	ctx := context.Background()
	a, _, _ := openAt(t, t.TempDir()+"/index.db", fileBucket(t.TempDir()), nil)
	mustPeople(t, a)
	p, err := a.Person(ctx, "alice")
	if err != nil || p.Level("acme") != AdminAccess || p.Level("alice") != AdminAccess || p.Level("labs") != NoAccess {
		t.Fatalf("alice %+v %v", p, err)
	}
	if p, err := a.Person(ctx, "bob"); err != nil || p.Level("acme") != NoAccess || p.Roles["acme"] != ReadAccess {
		t.Fatalf("suspended bob %+v %v", p, err)
	}
	if _, err := a.Person(ctx, "dave"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("dave: %v", err)
	}
}
