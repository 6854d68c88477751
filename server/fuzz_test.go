package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"openxet/limits"
	"openxet/xet"
)

// FuzzAuthenticate feeds arbitrary Authorization headers to the server's
// authentication (credential tokens and CAS tokens). Whatever the input:
// a refusal is 401 unauthorized (never a 500), and an accepted token is one
// the server issued, resolving to exactly the identity it was issued for.
// The fuzzer cannot forge an HMAC or guess a secret, so acceptance of any
// token that is not a seed (up to the harmless slack below) is a finding.
func FuzzAuthenticate(f *testing.F) {
	e := newTestEnv(f)
	ctx := context.Background()
	type want struct{ credential, tenant, scopes string }
	issued := map[string]want{} // credential token → identity
	for _, c := range []struct {
		tenant string
		scopes []string
	}{{"alice", []string{"write"}}, {"alice", []string{"read"}}, {"bob", []string{"read", "write"}}, {"admin-2", []string{"admin"}}} {
		tok := e.credential(c.tenant, c.scopes...)
		id, _, _ := parseTok(tok)
		cred, err := e.st.Credential(ctx, id)
		if err != nil {
			f.Fatal(err)
		}
		issued[tok] = want{id, c.tenant, strings.Join(cred.Scopes, ",")}
		f.Add("Bearer " + tok)
		// git's credential helpers and git-lfs: the token as the Basic
		// password, any user name.
		f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("git:"+tok)))
	}
	revoked := e.credential("alice", "write")
	revokedID, _, _ := parseTok(revoked)
	e.st.RevokeCredential(ctx, revokedID)
	f.Add("Bearer " + revoked)
	// CAS tokens: the payload a token carries → its claims.
	casIssued := map[string]casClaims{}
	exp := time.Now().Add(24 * time.Hour).Unix()
	for _, w := range issued {
		for _, scope := range []string{"read", "write"} {
			cl := casClaims{CredentialID: w.credential, Tenant: w.tenant, Scopes: []string{scope}, Expiry: exp}
			ct := e.srv.signer.casToken(cl)
			p, _, _ := strings.Cut(strings.TrimPrefix(ct, casTokenPrefix), ".")
			casIssued[p] = cl
			f.Add("Bearer " + ct)
		}
	}
	expired := e.srv.signer.casToken(casClaims{CredentialID: revokedID, Tenant: "alice", Scopes: []string{"read"}, Expiry: 1})
	f.Add("Bearer " + expired)
	f.Add("Bearer " + e.srv.signer.casToken(casClaims{CredentialID: revokedID, Tenant: "alice", Scopes: []string{"read"}, Expiry: exp}))
	for _, s := range []string{"", "Bearer", "Bearer ", "bearer hf_oxt_", "Basic abc", "Bearer oxc1.", "Bearer oxc1..", "Bearer oxc1.e30.",
		"Bearer hf_oxt_0123456789abcdef_" + strings.Repeat("0", 64), "Bearer hf_oxt_0123456789ABCDEF_" + strings.Repeat("F", 64),
		"Bearer oxc1." + base64.RawURLEncoding.EncodeToString([]byte(`{"c":"x","t":"alice","s":["admin"],"e":9999999999}`)) + ".AAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := bearer(header)
		if !ok {
			return
		}
		id, err := e.srv.authenticate(ctx, tok)
		if err != nil {
			if ae := toAPIError(err); ae.Status != 401 || ae.Code != "unauthorized" {
				t.Fatalf("token %q: refused with %d %s (%v), want 401 unauthorized", tok, ae.Status, ae.Code, err)
			}
			return
		}
		got := want{id.CredentialID, id.Tenant, strings.Join(id.Scopes, ",")}
		if !id.viaCASToken {
			if w, ok := issued[tok]; !ok || w != got {
				t.Fatalf("credential token %q accepted as %+v; issued: %v", tok, got, ok)
			}
			return
		}
		p, sig, _ := strings.Cut(strings.TrimPrefix(tok, casTokenPrefix), ".")
		cl, ok := casIssued[p]
		if !ok {
			t.Fatalf("CAS token %q with a payload the server never signed accepted as %+v", tok, got)
		}
		if w := (want{cl.CredentialID, cl.Tenant, strings.Join(cl.Scopes, ",")}); w != got {
			t.Fatalf("CAS token accepted as %+v, issued for %+v", got, w)
		}
		// The signature may differ from the issued one only in the unused
		// low bits of its last base64 character (Go's decoder ignores
		// them); the bytes it decodes to are the issued MAC.
		want, _ := base64.RawURLEncoding.DecodeString(strings.SplitN(strings.TrimPrefix(e.srv.signer.casToken(cl), casTokenPrefix), ".", 2)[1])
		if got, err := base64.RawURLEncoding.DecodeString(sig); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("CAS token %q accepted with a signature that is not the issued MAC", tok)
		}
	})
}

// FuzzFetchURL feeds arbitrary xorb path segments and query strings to the
// fetch URL check. A refusal is errFetchURLInvalid (403), and an accepted
// URL grants exactly one of the grants the server signed, never more.
func FuzzFetchURL(f *testing.F) {
	s := signer{key: bytes.Repeat([]byte{7}, 32)}
	now := time.Unix(1_800_000_000, 0)
	x1 := strings.Repeat("ab", 32)
	grants := []fetchGrant{
		{Xorb: x1, Start: 0, End: 99, CredentialID: "0123456789abcdef", Tenant: "alice", Expiry: now.Unix() + 3600},
		{Xorb: x1, Start: 100, End: 100, CredentialID: "0123456789abcdef", Tenant: "alice", Expiry: now.Unix() + 1},
		{Xorb: strings.Repeat("0", 64), Start: 5, End: math.MaxUint64, CredentialID: "fedcba9876543210", Tenant: "bob.b-2", Expiry: math.MaxInt64},
		{Xorb: x1, Start: 0, End: 99, CredentialID: "0123456789abcdef", Tenant: "alice", Expiry: now.Unix()}, // expired
	}
	issued := map[fetchGrant]bool{}
	for _, g := range grants {
		issued[g] = g.Expiry > now.Unix()
		u, _ := url.Parse(s.fetchURL("http://h", g))
		f.Add(strings.TrimPrefix(u.Path, "/v1/fetch/"), u.RawQuery)
	}
	f.Add(x1, "r=0-99&c=0123456789abcdef&t=alice&x=1800003600&s=")
	f.Add(x1, "r=99-0&c=&t=&x=-1&s=zz")
	f.Add("", "%zz&r=;&&s")
	u, _ := url.Parse(s.fetchURL("http://h", grants[0]))
	f.Add(x1, u.RawQuery+"&r=0-99")
	f.Add(x1, u.RawQuery+"&"+u.RawQuery)
	f.Fuzz(func(t *testing.T, xorb, rawQuery string) {
		q, _ := url.ParseQuery(rawQuery) // a malformed query still yields what parsed
		g, err := s.parseFetchURL(xorb, q, now)
		if err != nil {
			if !errors.Is(err, errFetchURLInvalid) {
				t.Fatalf("refused with %v, want errFetchURLInvalid", err)
			}
			if ae := toAPIError(err); ae.Status != 403 {
				t.Fatalf("refused with status %d", ae.Status)
			}
			return
		}
		if valid, ok := issued[g]; !ok || !valid {
			t.Fatalf("xorb %q query %q accepted as %+v, which was never granted (or has expired)", xorb, rawQuery, g)
		}
		if g.Start > g.End || now.Unix() >= g.Expiry {
			t.Fatalf("accepted grant %+v", g)
		}
		for k, v := range q {
			if len(v) != 1 {
				t.Fatalf("query %q accepted with %q given %d times", rawQuery, k, len(v))
			}
		}
	})
}

// FuzzFetchRange sends arbitrary Range headers with a signed fetch URL for
// the middle of a stored xorb to a live server. The answer is either 206
// with bytes that lie inside the granted range and equal the stored ones,
// or 403; never anything outside the grant, never a 5xx.
func FuzzFetchRange(f *testing.F) {
	e := newTestEnv(f, func(c *Config) {
		unlimited := limits.Rate{PerSecond: 1e9, Burst: 1 << 30}
		c.Limits.TenantRate, c.Limits.CredentialRate = unlimited, unlimited
		c.AuthFailuresPerMinute = 1 << 30
	})
	alice := e.credential("alice", "write")
	aliceID, _, _ := parseTok(alice)
	body, info := xet.BuildXorb(randomChunks(70, 4, 3000), false)
	if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
		f.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	stored := body[:info.StreamLen]
	g := fetchGrant{Xorb: info.Hash.String(), Start: 1000, End: 8999, CredentialID: aliceID, Tenant: "alice", Expiry: time.Now().Add(24 * time.Hour).Unix()}
	fetchURL := e.srv.signer.fetchURL(e.http.URL, g)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, rh := range []string{"", "bytes=1000-8999", "bytes=1000-", "bytes=-10", "bytes=0-", "bytes=999-1000", "bytes=8999-9000",
		"bytes=5000-4000", "bytes=18446744073709551615-", "bytes=1000-18446744073709551615", "bytes=-18446744073709551615", "bytes=1-2,3-4", "items=1-2"} {
		f.Add(rh)
	}
	f.Fuzz(func(t *testing.T, rh string) {
		req, err := http.NewRequest("GET", fetchURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rh != "" {
			req.Header["Range"] = []string{rh}
		}
		res, err := client.Do(req)
		if err != nil {
			return // a header value net/http will not send
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("Range %q: body: %v", rh, err)
		}
		switch res.StatusCode {
		case 206:
			var a, b uint64
			if _, err := fmt.Sscanf(res.Header.Get("Content-Range"), "bytes %d-%d/*", &a, &b); err != nil {
				t.Fatalf("Range %q: Content-Range %q", rh, res.Header.Get("Content-Range"))
			}
			if a < g.Start || b > g.End || a > b {
				t.Fatalf("Range %q: served bytes %d-%d outside the grant %d-%d", rh, a, b, g.Start, g.End)
			}
			if !bytes.Equal(got, stored[a:b+1]) {
				t.Fatalf("Range %q: %d bytes served differ from the stored %d-%d", rh, len(got), a, b)
			}
		case 403:
			if !bytes.Contains(got, []byte(`"forbidden"`)) {
				t.Fatalf("Range %q: 403 %s", rh, got)
			}
		default:
			t.Fatalf("Range %q: %d %s", rh, res.StatusCode, got)
		}
	})
}
