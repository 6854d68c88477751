package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fetchURLBefore is how fetch URLs were made before the signer pooled its
// HMAC state: a fresh HMAC per call and the query through url.Values.
func fetchURLBefore(key []byte, base string, g fetchGrant) string {
	m := hmac.New(sha256.New, key)
	for _, p := range []string{"fetch", g.Xorb, strconv.FormatUint(g.Start, 10), strconv.FormatUint(g.End, 10), g.CredentialID, g.Tenant, strconv.FormatInt(g.Expiry, 10)} {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	q := url.Values{}
	q.Set("r", fmt.Sprintf("%d-%d", g.Start, g.End))
	q.Set("c", g.CredentialID)
	q.Set("t", g.Tenant)
	q.Set("x", strconv.FormatInt(g.Expiry, 10))
	q.Set("s", hex.EncodeToString(m.Sum(nil)))
	return base + "/v1/fetch/" + g.Xorb + "?" + q.Encode()
}

// TestFetchURLAsBefore: the pooled signer writes the same URL, byte for
// byte, as the url.Values construction it replaced, whose signature is a
// fresh HMAC per call, for tenants and credentials that need escaping; and
// the URL verifies.
func TestFetchURLAsBefore(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 32)
	pooled, bare := newSigner(key), signer{key: key}
	now := time.Unix(1_700_000_000, 0)
	grants := []fetchGrant{
		{Xorb: "ab" + string(bytes.Repeat([]byte("0"), 62)), Start: 0, End: 0, CredentialID: "c1", Tenant: "acme", Expiry: now.Unix() + 60},
		{Xorb: "ff", Start: 123456789, End: 1<<63 - 1, CredentialID: "id with space&=?", Tenant: "t/é+%", Expiry: now.Unix() + 3600},
	}
	var wg sync.WaitGroup
	for range 4 { // the pool is shared by concurrent requests
		wg.Go(func() {
			for i := range 200 {
				g := grants[i%len(grants)]
				want := fetchURLBefore(key, "http://127.0.0.1:1", g)
				for _, s := range []signer{pooled, bare} {
					got := s.fetchURL("http://127.0.0.1:1", g)
					if got != want {
						t.Errorf("fetchURL\n got %s\nwant %s", got, want)
						return
					}
					u, err := url.Parse(got)
					if err != nil {
						t.Error(err)
						return
					}
					back, err := pooled.parseFetchURL(g.Xorb, u.Query(), now)
					if err != nil || back != g {
						t.Errorf("parseFetchURL: %+v %v, want %+v", back, err, g)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkFetchURL signs one fetch URL, as a reconstruction does per
// fetch range: with the pooled HMAC state (newSigner), with a fresh HMAC
// per call (a bare signer), and as it was made before (fetchURLBefore).
//
//	go test -run '^$' -bench FetchURL -benchmem ./server/
func BenchmarkFetchURL(b *testing.B) {
	key := bytes.Repeat([]byte{3}, 32)
	g := fetchGrant{Xorb: hex.EncodeToString(key), Start: 1 << 20, End: 64<<20 - 1, CredentialID: "0123456789abcdef", Tenant: "acme", Expiry: 1_700_000_000}
	for name, s := range map[string]signer{"pooled": newSigner(key), "fresh": {key: key}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.fetchURL("http://127.0.0.1:4000", g)
			}
		})
	}
	b.Run("before", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fetchURLBefore(key, "http://127.0.0.1:4000", g)
		}
	})
}
