package server

import (
	"context"
	"strings"
	"testing"

	"openxet/xet"

	"openxet/store/accounts"
)

func TestAuthRefusals(t *testing.T) {
	e := newTestEnv(t)
	write := e.credential("alice", "write")
	read := e.credential("alice", "read")
	revoked := e.credential("alice", "write")
	id, _, _ := parseTok(revoked)
	if _, err := e.st.RevokeCredential(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	e.srv.creds.forget(id)
	if _, err := e.st.CreateUser(context.Background(), "pat", "pat@example.com", false); err != nil {
		t.Fatal(err)
	}
	_, personal, err := e.st.CreateToken(context.Background(), "pat", accounts.TokenSpec{Role: accounts.RoleWrite})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SuspendUser(context.Background(), "pat"); err != nil {
		t.Fatal(err)
	}
	_, info := xet.BuildXorb(randomChunks(9, 1, 100), false)
	path := "/v1/xorbs/default/" + info.Hash.String()
	cases := []struct {
		name, token string
		status      int
		code        string
	}{
		{"no token", "", 401, "unauthorized"},
		{"malformed", "hf_nope", 401, "unauthorized"},
		{"unknown id", "hf_oxt_0123456789abcdef_" + string(make64('a')), 401, "unauthorized"},
		{"wrong secret", write[:len(write)-4] + "0000", 401, "unauthorized"},
		{"revoked", revoked, 401, "unauthorized"},
		{"personal token of a suspended user", personal, 401, "unauthorized"},
		{"read scope on a write route", read, 403, "forbidden"},
		{"forged CAS token", casTokenPrefix + "eyJjIjoiYSJ9.AAAA", 401, "unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.snapshot()
			wantError(t, e.do("POST", path, c.token, []byte{1, 2, 3}), c.status, c.code)
			if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
				t.Fatal("state changed")
			}
		})
	}
	// Admin routes refuse non-admins.
	wantError(t, e.do("GET", "/api/openxet/v1/admin/tenants", write, nil), 403, "forbidden")
	if r := e.do("GET", "/api/openxet/v1/admin/tenants", e.admin, nil); r.Status != 200 {
		t.Fatalf("admin: %d %s", r.Status, r.Body)
	}
	// Probes need nothing.
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := e.do("GET", p, "", nil); r.Status != 200 {
			t.Fatalf("%s: %d", p, r.Status)
		}
	}
	wantError(t, e.do("GET", "/metrics", write, nil), 403, "forbidden")
	r := e.do("GET", "/metrics", e.admin, nil)
	if r.Status != 200 {
		t.Fatalf("metrics: %d", r.Status)
	}
	for _, want := range []string{`openxet_refusals_total{code="unauthorized"} 7`, `openxet_refusals_total{code="forbidden"}`,
		`openxet_rate_limit_refusals_total{limit="auth_failures"} 0`, `openxet_memory_refusals_total{reason="busy",share="credential"} 0`,
		`openxet_memory_budget_bytes 1.073741824e+09`, "openxet_memory_waits_total 0"} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestCASTokenRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	write := e.credential("alice", "write")
	id, _, _ := parseTok(write)
	cred, _ := e.st.Credential(context.Background(), id)
	tok := e.srv.signer.casToken(casClaims{CredentialID: cred.ID, Tenant: "alice", Scopes: []string{"read"}, Expiry: e.srv.now().Unix() + 60})
	x, info := xet.BuildXorb(randomChunks(10, 1, 100), false)
	wantError(t, e.do("POST", "/v1/xorbs/default/"+info.Hash.String(), tok, x), 403, "forbidden")
	expired := e.srv.signer.casToken(casClaims{CredentialID: cred.ID, Tenant: "alice", Scopes: []string{"read"}, Expiry: e.srv.now().Unix() - 1})
	wantError(t, e.do("GET", "/v1/reconstructions/"+info.Hash.String(), expired, nil), 401, "unauthorized")
	wantError(t, e.do("GET", "/v1/reconstructions/"+info.Hash.String(), tok, nil), 404, "not_found")
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

func parseTok(tok string) (id, secret string, err error) {
	return accounts.ParseToken(tok)
}
