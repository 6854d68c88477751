package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// TestTenantCannotSeeAnotherTenantsData: a file, a repo, a xorb or a dedup
// entry of one tenant is "not found" for every credential of another, by
// every route and alias, with or without a Range (no size oracle).
func TestTenantCannotSeeAnotherTenantsData(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run("dedup_scope="+scope, func(t *testing.T) {
			e := newTestEnv(t, func(c *Config) { c.DedupScope = scope })
			alice := e.credential("alice", "write")
			bob := e.credential("bob", "write")
			bobID, _, _ := parseTok(bob)
			bobCAS := e.srv.signer.casToken(casClaims{CredentialID: bobID, Tenant: "bob", Scopes: []string{"write"}, Expiry: e.srv.now().Add(time.Hour).Unix()})
			x, info := xet.BuildXorb(randomChunks(50, 3, 20_000), false)
			f := e.upload(alice, x)
			if r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"secret-model"}`)); r.Status != 200 {
				t.Fatalf("create repo: %d %s", r.Status, r.Body)
			}
			h := f.Hash.String()
			for _, tok := range []string{bob, bobCAS} {
				for _, path := range []string{"/v1/reconstructions/" + h, "/reconstructions/" + h, "/reconstruction/" + h, "/v2/reconstructions/" + h} {
					wantError(t, e.do("GET", path, tok, nil), 404, "not_found")
					wantError(t, e.do("GET", path, tok, nil, "Range: bytes=999999999-"), 404, "not_found")
					wantError(t, e.do("GET", path, tok, nil, "Range: bytes=a-b"), 404, "not_found")
				}
				for _, path := range []string{"/api/models/alice/secret-model", "/api/models/alice/secret-model/revision/main",
					"/api/models/alice/secret-model/tree/main", "/api/models/alice/secret-model/xet-read-token/main",
					"/alice/secret-model/resolve/main/README.md"} {
					wantError(t, e.do("GET", path, tok, nil), 404, "not_found")
				}
				wantError(t, e.do("GET", "/api/models/alice/secret-model/xet-write-token/main", tok, nil), 404, "not_found")
				wantError(t, e.do("POST", "/api/models/alice/secret-model/commit/main", tok, []byte(`{}`)), 404, "not_found")
				wantError(t, e.do("DELETE", "/api/repos/delete", tok, []byte(`{"name":"secret-model","organization":"alice"}`)), 404, "not_found")
				wantError(t, e.do("POST", "/api/repos/create", tok, []byte(`{"name":"alice/other"}`)), 403, "forbidden")
			}
			// Existence of a xorb and its chunks is shared only under
			// global dedup (the design's trade-off: asking needs the hash,
			// which needs the content).
			head := e.do("HEAD", "/v1/xorbs/default/"+info.Hash.String(), bob, nil)
			chunk := e.do("GET", "/v1/chunks/default/"+info.Chunks[0].Hash.String(), bob, nil)
			if scope == "tenant" {
				if head.Status != 404 {
					t.Errorf("HEAD of alice's xorb by bob: %d, want 404", head.Status)
				}
				wantError(t, chunk, 404, "not_found")
			} else if head.Status != 200 {
				t.Errorf("HEAD of a stored xorb under global dedup: %d, want 200", head.Status)
			}
			// Alice herself reads it all.
			if r := e.do("GET", "/v1/reconstructions/"+h, alice, nil); r.Status != 200 {
				t.Fatalf("alice: %d %s", r.Status, r.Body)
			}
			if r := e.do("GET", "/api/models/alice/secret-model", alice, nil); r.Status != 200 {
				t.Fatalf("alice's repo: %d %s", r.Status, r.Body)
			}
		})
	}
}

// TestFetchURLAlteredInAnyFieldIs403: every field of a signed fetch URL is
// covered by its signature; an altered, removed or prepended value, an
// expired URL, a URL of a revoked credential and a URL of another key are
// all refused with 403.
func TestFetchURLAlteredInAnyFieldIs403(t *testing.T) {
	// Each refused URL counts as an authentication failure of this
	// address; the limiter has its own tests.
	e := newTestEnv(t, func(c *Config) { c.AuthFailuresPerMinute = 1 << 20 })
	clk := e.setClock()
	alice := e.credential("alice", "write")
	x, info := xet.BuildXorb(randomChunks(51, 4, 10_000), false)
	f := e.upload(alice, x)
	var rec reconJSON
	r := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil, "Range: bytes=10000-29999")
	if r.Status != 200 || json.Unmarshal(r.Body, &rec) != nil {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	good := rec.FetchInfo[info.Hash.String()][0].URL
	if r := e.fetch(good, ""); r.Status != 206 {
		t.Fatalf("untouched URL: %d %s", r.Status, r.Body)
	}
	u, _ := url.Parse(good)
	base := u.Scheme + "://" + u.Host
	q := u.Query()
	cases := alteredFetchURLs(u)
	xorb := strings.TrimPrefix(u.Path, "/v1/fetch/")
	other := signer{key: bytes.Repeat([]byte{9}, 32)}
	aliceID, _, _ := parseTok(alice)
	g, err := e.srv.signer.parseFetchURL(xorb, q, clk.Now())
	if err != nil || g.CredentialID != aliceID {
		t.Fatalf("parse the good URL: %+v %v", g, err)
	}
	cases["signed with another key"] = other.fetchURL(base, g)
	for name, target := range cases {
		if target == good {
			t.Fatalf("%s: not altered", name)
		}
		if r := e.fetch(target, ""); r.Status != 403 || !strings.Contains(string(r.Body), `"forbidden"`) {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
		}
	}
	t.Logf("%d altered fetch URLs refused", len(cases))

	// A Range header inside the URL narrows it; one outside is refused.
	if r := e.fetch(good, fmt.Sprintf("bytes=%d-%d", g.Start+1, g.End)); r.Status != 206 {
		t.Fatalf("narrowed: %d %s", r.Status, r.Body)
	}
	for _, rng := range []string{fmt.Sprintf("bytes=%d-%d", g.Start-1, g.End), fmt.Sprintf("bytes=%d-", g.End+1), "bytes=0-0,5-6", "bytes=x-y"} {
		wantError(t, e.fetch(good, rng), 403, "forbidden")
	}
	// Expiry: valid a moment before, refused at it.
	clk.Add(time.Unix(g.Expiry, 0).Sub(clk.Now()) - time.Second)
	if r := e.fetch(good, ""); r.Status != 206 {
		t.Fatalf("a second before expiry: %d %s", r.Status, r.Body)
	}
	clk.Add(time.Second)
	wantError(t, e.fetch(good, ""), 403, "forbidden")
	// A fresh URL works until its credential is revoked, at once.
	r = e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	json.Unmarshal(r.Body, &rec)
	fresh := rec.FetchInfo[info.Hash.String()][0].URL
	if r := e.fetch(fresh, ""); r.Status != 206 {
		t.Fatalf("fresh URL: %d", r.Status)
	}
	if r := e.do("DELETE", "/api/openxet/v1/admin/credentials/"+aliceID, e.admin, nil); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	wantError(t, e.fetch(fresh, ""), 403, "forbidden")
	wantError(t, e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil), 401, "unauthorized")
}

// alteredFetchURLs names the variants of the fetch URL u with one field
// altered: each query value changed, appended to, truncated, emptied,
// removed or given twice, and the xorb hash changed or in upper case.
func alteredFetchURLs(u *url.URL) map[string]string {
	base := u.Scheme + "://" + u.Host
	q := u.Query()
	build := func(path string, vals url.Values) string { return base + path + "?" + vals.Encode() }
	cases := map[string]string{}
	for _, k := range []string{"r", "c", "t", "x", "s"} {
		v := q.Get(k)
		alter := func(nv string) url.Values {
			c := url.Values{}
			for kk, vv := range q {
				c[kk] = append([]string(nil), vv...)
			}
			c[k] = []string{nv}
			return c
		}
		// Change one character of the value, in every position.
		for i := 0; i < len(v); i++ {
			b := []byte(v)
			switch {
			case b[i] >= '0' && b[i] <= '8', b[i] >= 'a' && b[i] <= 'e':
				b[i]++
			default:
				b[i] = '0'
			}
			cases[fmt.Sprintf("%s[%d] changed", k, i)] = build(u.Path, alter(string(b)))
		}
		cases[k+" appended to"] = build(u.Path, alter(v+"0"))
		cases[k+" truncated"] = build(u.Path, alter(v[:len(v)-1]))
		cases[k+" emptied"] = build(u.Path, alter(""))
		removed := alter(v)
		delete(removed, k)
		cases[k+" removed"] = build(u.Path, removed)
		// A parameter given twice is refused whatever the values: forged
		// first (the one url.Values.Get reads), genuine first, or the same.
		twice := alter("0")
		twice[k] = append(twice[k], v)
		cases[k+" given twice, forged first"] = build(u.Path, twice)
		twice = alter(v)
		twice[k] = append(twice[k], "0")
		cases[k+" given twice, genuine first"] = build(u.Path, twice)
		twice = alter(v)
		twice[k] = append(twice[k], v)
		cases[k+" given twice, same value"] = build(u.Path, twice)
	}
	xorb := strings.TrimPrefix(u.Path, "/v1/fetch/")
	for i := 0; i < len(xorb); i += 7 {
		b := []byte(xorb)
		b[i] = "1a"[btoi(b[i] == '1')]
		cases[fmt.Sprintf("xorb[%d] changed", i)] = build("/v1/fetch/"+string(b), q)
	}
	cases["xorb in upper case"] = build("/v1/fetch/"+strings.ToUpper(xorb), q)
	return cases
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCASTokensAreBoundToTheirClaims: a CAS token's tenant, scopes,
// credential and expiry cannot be changed, and it dies with its credential.
func TestCASTokensAreBoundToTheirClaims(t *testing.T) {
	e := newTestEnv(t)
	clk := e.setClock()
	alice := e.credential("alice", "write")
	bob := e.credential("bob", "write")
	aliceID, _, _ := parseTok(alice)
	bobID, _, _ := parseTok(bob)
	x, _ := xet.BuildXorb(randomChunks(52, 2, 10_000), false)
	fb := e.upload(bob, x)
	bobFile := "/v1/reconstructions/" + fb.Hash.String()

	claims := casClaims{CredentialID: aliceID, Tenant: "alice", Scopes: []string{"read"}, Expiry: clk.Now().Add(time.Hour).Unix()}
	tok := e.srv.signer.casToken(claims)
	if r := e.do("GET", bobFile, tok, nil); r.Status != 404 {
		t.Fatalf("alice's token on bob's file: %d", r.Status)
	}
	p, sig, _ := strings.Cut(strings.TrimPrefix(tok, casTokenPrefix), ".")
	for name, mut := range map[string]func(c *casClaims){
		"tenant":     func(c *casClaims) { c.Tenant = "bob" },
		"credential": func(c *casClaims) { c.CredentialID = bobID },
		"scopes":     func(c *casClaims) { c.Scopes = []string{"write", "admin"} },
		"expiry":     func(c *casClaims) { c.Expiry += 3600 },
	} {
		c := claims
		mut(&c)
		b, _ := json.Marshal(c)
		forged := casTokenPrefix + base64.RawURLEncoding.EncodeToString(b) + "." + sig
		wantError(t, e.do("GET", bobFile, forged, nil), 401, "unauthorized")
		wantError(t, e.do("GET", "/api/openxet/v1/admin/tenants", forged, nil), 401, "unauthorized")
		_ = name
	}
	wantError(t, e.do("GET", bobFile, casTokenPrefix+p+"."+sig+"x", nil), 401, "unauthorized")
	wantError(t, e.do("GET", bobFile, casTokenPrefix+p, nil), 401, "unauthorized")
	// Expiry is exact.
	clk.Add(time.Hour - time.Second)
	if r := e.do("GET", bobFile, tok, nil); r.Status != 404 {
		t.Fatalf("a second before expiry: %d %s", r.Status, r.Body)
	}
	clk.Add(time.Second)
	wantError(t, e.do("GET", bobFile, tok, nil), 401, "unauthorized")
	// Revocation kills the CAS tokens of the credential at once.
	tok = e.srv.signer.casToken(casClaims{CredentialID: aliceID, Tenant: "alice", Scopes: []string{"read"}, Expiry: clk.Now().Add(time.Hour).Unix()})
	if r := e.do("GET", bobFile, tok, nil); r.Status != 404 {
		t.Fatalf("fresh token: %d", r.Status)
	}
	e.do("DELETE", "/api/openxet/v1/admin/credentials/"+aliceID, e.admin, nil)
	wantError(t, e.do("GET", bobFile, tok, nil), 401, "unauthorized")
}

// TestCASTokenCannotRenewItself: the Hub token endpoints mint CAS tokens
// for a credential. If a CAS token could mint the next one, a leaked
// short-lived token would live for ever (until its credential is revoked).
func TestCASTokenCannotRenewItself(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	if r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"m"}`)); r.Status != 200 {
		t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
	var tok struct {
		AccessToken string `json:"accessToken"`
	}
	r := e.do("GET", "/api/models/alice/m/xet-write-token/main", alice, nil)
	if r.Status != 200 || json.Unmarshal(r.Body, &tok) != nil || !strings.HasPrefix(tok.AccessToken, casTokenPrefix) {
		t.Fatalf("write token: %d %s", r.Status, r.Body)
	}
	r = e.do("GET", "/api/models/alice/m/xet-write-token/main", tok.AccessToken, nil)
	wantError(t, r, 403, "forbidden")
}

// TestAdminRoutesRefuseNonAdmins: every admin route, and /metrics, refuses
// a request without a token (401) and one of a credential without the admin
// scope, whatever its other scopes, or of a CAS token (403), and changes
// nothing.
func TestAdminRoutesRefuseNonAdmins(t *testing.T) {
	e := newTestEnv(t)
	read := e.credential("alice", "read")
	write := e.credential("alice", "write")
	both := e.credential("alice", "read", "write")
	writeID, _, _ := parseTok(write)
	cas := e.srv.signer.casToken(casClaims{CredentialID: writeID, Tenant: "alice", Scopes: []string{"write"}, Expiry: e.srv.now().Add(time.Hour).Unix()})
	adminID, _, _ := parseTok(e.admin)
	routes := []struct {
		method, path, body string
	}{
		{"GET", "/api/openxet/v1/admin/tenants", ""},
		{"GET", "/api/openxet/v1/admin/tenants/alice/limits", ""},
		{"PUT", "/api/openxet/v1/admin/tenants/alice/limits", `{"quota_bytes": 1}`},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice/limits", ""},
		{"GET", "/api/openxet/v1/admin/credentials", ""},
		{"POST", "/api/openxet/v1/admin/credentials", `{"tenant":"alice","scopes":["admin"]}`},
		{"DELETE", "/api/openxet/v1/admin/credentials/" + adminID, ""},
		{"GET", "/api/openxet/v1/admin/nothing-here", ""},
		{"GET", "/metrics", ""},
		{"GET", "/api/openxet/v1/admin/usage", ""},
		{"GET", "/api/openxet/v1/admin/tenants/alice/usage", ""},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice", ""},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice/files/" + strings.Repeat("ab", 32), ""},
		{"POST", "/api/openxet/v1/admin/gc", ""},
	}
	before := e.snapshot()
	for _, rt := range routes {
		var body []byte
		if rt.body != "" {
			body = []byte(rt.body)
		}
		wantError(t, e.do(rt.method, rt.path, "", body), 401, "unauthorized")
		for _, tok := range []string{read, write, both, cas} {
			wantError(t, e.do(rt.method, rt.path, tok, body), 403, "forbidden")
		}
		if diff := cmp.Diff(before, e.snapshot()); diff != "" {
			t.Fatalf("%s %s changed state:\n%s", rt.method, rt.path, diff)
		}
	}
	if r := e.do("GET", "/api/openxet/v1/admin/tenants", e.admin, nil); r.Status != 200 {
		t.Fatalf("admin: %d %s", r.Status, r.Body)
	}
}

// lockedBuffer collects log output written from the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNoSecretInLogsOrMetrics drives every kind of request, good and bad,
// with the log at debug level, then looks for every secret in the log and
// in /metrics: credential tokens and their secrets (also wrong ones that
// were tried), CAS tokens and their signatures, fetch URL signatures, the
// signing key.
func TestNoSecretInLogsOrMetrics(t *testing.T) {
	logs := &lockedBuffer{}
	e := newTestEnv(t, func(c *Config) { c.ReadHeaderTimeout = 5 * time.Second })
	e.srv.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.serveLive(t) // also net/http's own error log
	alice := e.credential("alice", "write")
	secrets := []string{e.admin, alice, fmt.Sprintf("%x", e.srv.cfg.SigningKey)}
	x, info := xet.BuildXorb(randomChunks(53, 2, 10_000), true)
	f := e.upload(alice, x)
	var rec reconJSON
	json.Unmarshal(e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil).Body, &rec)
	fetch := rec.FetchInfo[info.Hash.String()][0].URL
	e.fetch(fetch, "")
	e.fetch(fetch+"0", "")
	u, _ := url.Parse(fetch)
	secrets = append(secrets, u.Query().Get("s"), u.RawQuery)
	// Hub tokens.
	e.do("POST", "/api/repos/create", alice, []byte(`{"name":"m"}`))
	r := e.do("GET", "/api/models/alice/m/xet-write-token/main", alice, nil)
	var tok struct {
		AccessToken string `json:"accessToken"`
	}
	json.Unmarshal(r.Body, &tok)
	if tok.AccessToken == "" {
		t.Fatalf("no CAS token: %d %s", r.Status, r.Body)
	}
	_, casSig, _ := strings.Cut(strings.TrimPrefix(tok.AccessToken, casTokenPrefix), ".")
	secrets = append(secrets, tok.AccessToken, casSig)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), tok.AccessToken, nil)
	// A credential made through the admin API (its token is in the answer).
	r = e.do("POST", "/api/openxet/v1/admin/credentials", e.admin, []byte(`{"tenant":"bob","scopes":["write"]}`))
	var cred struct{ Token string }
	json.Unmarshal(r.Body, &cred)
	secrets = append(secrets, cred.Token)
	// Failures: a wrong secret, a token in the wrong header, a forged CAS
	// token, a bad xorb and a refused admin call.
	wrong := alice[:len(alice)-8] + "deadbeef"
	secrets = append(secrets, wrong)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), wrong, nil)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), "", nil, "Authorization: Token "+alice)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), "", nil, "X-Api-Key: "+alice)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), tok.AccessToken+"x", nil)
	e.do("POST", "/v1/xorbs/default/"+info.Hash.String(), alice, []byte("bad"))
	e.do("GET", "/api/openxet/v1/admin/tenants", alice, nil)
	// A secret in the query string of a refused request.
	e.do("GET", "/v1/reconstructions/"+f.Hash.String()+"?token="+url.QueryEscape(alice), "", nil)
	metrics := e.do("GET", "/metrics", e.admin, nil)
	if metrics.Status != 200 {
		t.Fatalf("metrics: %d", metrics.Status)
	}
	out := logs.String()
	if !strings.Contains(out, `"path":"/v1/fetch/`) || !strings.Contains(out, `"tenant":"alice"`) {
		t.Fatalf("the log does not show the requests:\n%s", out)
	}
	for _, s := range secrets {
		for _, part := range secretParts(s) {
			if strings.Contains(out, part) {
				t.Errorf("the log holds a secret (%q…)", part[:8])
			}
			if strings.Contains(string(metrics.Body), part) {
				t.Errorf("/metrics holds a secret (%q…)", part[:8])
			}
		}
	}
}

// secretParts returns a secret and the parts of it that are secret on
// their own (the secret half of a credential token).
func secretParts(s string) []string {
	out := []string{s}
	if strings.HasPrefix(s, "hf_oxt_") {
		if _, secret, ok := strings.Cut(s[len("hf_oxt_"):], "_"); ok {
			out = append(out, secret)
		}
	}
	return out
}
