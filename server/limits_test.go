package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/limits"
)

// fakeClock is the explicit clock the rate limiters read in these tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (e *testEnv) setClock() *fakeClock {
	clk := &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	e.srv.now = clk.Now
	return clk
}

// putLimits sets a tenant's overrides through the admin API.
func (e *testEnv) putLimits(tenant string, doc map[string]any) {
	e.t.Helper()
	b, _ := json.Marshal(doc)
	if r := e.do("PUT", "/api/openxet/v1/admin/tenants/"+tenant+"/limits", e.admin, b); r.Status != 200 {
		e.t.Fatalf("put limits: %d %s", r.Status, r.Body)
	}
}

// probe is a cheap authenticated request: its status is 404 when admitted.
func (e *testEnv) probe(token string) response {
	e.t.Helper()
	return e.do("GET", "/v1/reconstructions/"+strings.Repeat("ab", 32), token, nil)
}

func TestOverRateAnswers429WithRetryAfter(t *testing.T) {
	e := newTestEnv(t)
	clk := e.setClock()
	alice := e.credential("alice", "read")
	// One request every 2 s, burst 1: the wait after a request is exactly 2 s.
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 0.5, "tenant_burst": 1})
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("first request: %d %s", r.Status, r.Body)
	}
	r := e.probe(alice)
	wantError(t, r, 429, "rate_limited")
	body := r.json(t)
	if body["limit"] != "tenant" || body["hint"] == "" {
		t.Fatalf("body %s", r.Body)
	}
	if got := r.Header.Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q, want 2", got)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"tenant";q=1;w=2` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if got := r.Header.Get("RateLimit"); got != `"tenant";r=0;t=2` {
		t.Fatalf("RateLimit %q", got)
	}
	clk.Add(2*time.Second - time.Millisecond)
	wantError(t, e.probe(alice), 429, "rate_limited")
	clk.Add(time.Millisecond)
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("retry at Retry-After: %d %s", r.Status, r.Body)
	}
}

// TestRetryAfterIsExact: over random rates and bursts, a client that waits
// the Retry-After it was given is admitted, and one that comes back a
// moment before the exact wait is not.
func TestRetryAfterIsExact(t *testing.T) {
	e := newTestEnv(t)
	clk := e.setClock()
	for i, c := range []struct {
		rps   float64
		burst int
	}{{0.25, 1}, {0.5, 3}, {1, 1}, {1, 5}, {4, 2}, {8, 10}, {0.1, 2}, {0.125, 4}} {
		tenant := fmt.Sprintf("t%d", i)
		tok := e.credential(tenant, "read")
		e.putLimits(tenant, map[string]any{"tenant_requests_per_second": c.rps, "tenant_burst": c.burst})
		for n := 0; n < c.burst; n++ {
			if r := e.probe(tok); r.Status != 404 {
				t.Fatalf("%+v: request %d within burst: %d", c, n, r.Status)
			}
		}
		r := e.probe(tok)
		wantError(t, r, 429, "rate_limited")
		secs, _ := strconv.Atoi(r.Header.Get("Retry-After"))
		exact := time.Duration(float64(time.Second) / c.rps)
		if secs < 1 || time.Duration(secs)*time.Second < exact || time.Duration(secs-1)*time.Second >= exact {
			t.Fatalf("%+v: Retry-After %d for an exact wait of %s", c, secs, exact)
		}
		clk.Add(exact - time.Millisecond)
		wantError(t, e.probe(tok), 429, "rate_limited")
		clk.Add(time.Millisecond)
		if r := e.probe(tok); r.Status != 404 {
			t.Fatalf("%+v: at the exact wait: %d", c, r.Status)
		}
		clk.Add(time.Duration(secs)*time.Second + time.Hour) // refill for the next case's sake
	}
}

// TestRateHeadersAtTheBounds: at the smallest and largest rate an admin may
// set, Retry-After, RateLimit and the window of RateLimit-Policy agree with
// the limiter (a retry at Retry-After succeeds, not a moment before), and
// rates outside the bounds are refused with 400 naming the field, changing
// nothing.
func TestRateHeadersAtTheBounds(t *testing.T) {
	e := newTestEnv(t)
	clk := e.setClock()
	for i, c := range []struct {
		rps          float64
		burst        int
		retry        string
		policy, rate string
		exact        time.Duration
	}{
		{limits.MinRequestsPerSecond, 1, "1000", `"credential";q=1;w=1000`, `"credential";r=0;t=1000`, 1000 * time.Second},
		{limits.MinRequestsPerSecond, 3, "1000", `"credential";q=3;w=3000`, `"credential";r=0;t=1000`, 1000 * time.Second},
		{limits.MaxRequestsPerSecond, 1, "1", `"credential";q=1;w=1`, `"credential";r=0;t=1`, time.Nanosecond},
	} {
		tenant := fmt.Sprintf("b%d", i)
		tok := e.credential(tenant, "read")
		e.putLimits(tenant, map[string]any{"credential_requests_per_second": c.rps, "credential_burst": c.burst})
		for n := 0; n < c.burst; n++ {
			if r := e.probe(tok); r.Status != 404 {
				t.Fatalf("%+v: request %d within burst: %d", c, n, r.Status)
			}
		}
		r := e.probe(tok)
		wantError(t, r, 429, "rate_limited")
		if got := [3]string{r.Header.Get("Retry-After"), r.Header.Get("RateLimit-Policy"), r.Header.Get("RateLimit")}; got != [3]string{c.retry, c.policy, c.rate} {
			t.Fatalf("%+v: headers %q", c, got)
		}
		if c.exact > time.Nanosecond {
			clk.Add(c.exact - time.Nanosecond)
			wantError(t, e.probe(tok), 429, "rate_limited")
			clk.Add(time.Nanosecond)
		} else {
			clk.Add(c.exact)
		}
		if r := e.probe(tok); r.Status != 404 {
			t.Fatalf("%+v: at the exact wait: %d", c, r.Status)
		}
		clk.Add(time.Hour * 24)
	}
	e.credential("alice", "read")
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 5})
	before := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil)
	for _, field := range []string{"tenant_requests_per_second", "credential_requests_per_second"} {
		for _, v := range []string{"1e-9", "1e-300", "0.000999", "1000000001", "1e300", "-1"} {
			r := e.do("PUT", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, []byte(`{"`+field+`": `+v+`}`))
			wantError(t, r, 400, "bad_request")
			if m := r.json(t)["message"].(string); !strings.Contains(m, field) {
				t.Fatalf("%s=%s: message %q does not name the field", field, v, m)
			}
		}
	}
	if after := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil); string(after.Body) != string(before.Body) {
		t.Fatalf("refused PUTs changed the limits: %s, was %s", after.Body, before.Body)
	}
}

func TestTenantsDoNotShareBuckets(t *testing.T) {
	e := newTestEnv(t)
	e.setClock()
	a1, a2 := e.credential("alice", "read"), e.credential("alice", "read")
	b1 := e.credential("bob", "read")
	for _, tn := range []string{"alice", "bob"} {
		e.putLimits(tn, map[string]any{"tenant_requests_per_second": 0.001, "tenant_burst": 3, "credential_requests_per_second": 0.001, "credential_burst": 2})
	}
	steps := []struct {
		tok, limit string
	}{
		{a1, ""}, {a1, ""}, {a1, "credential"}, // a1 spent its own burst of 2
		{a2, ""},           // the tenant bucket (3) has one left, a2's own is fresh
		{a2, "tenant"},     // alice's tenant bucket is empty
		{b1, ""}, {b1, ""}, // bob is untouched by alice
		{b1, "credential"},
	}
	for i, s := range steps {
		r := e.probe(s.tok)
		if s.limit == "" {
			if r.Status != 404 {
				t.Fatalf("step %d: %d %s", i, r.Status, r.Body)
			}
			continue
		}
		wantError(t, r, 429, "rate_limited")
		if got := r.json(t)["limit"]; got != s.limit {
			t.Fatalf("step %d: limit %v, want %s", i, got, s.limit)
		}
	}
}

// TestRefusalUsesNoOtherAllowance: a request the tenant limiter refuses
// does not spend the credential's allowance.
func TestRefusalUsesNoOtherAllowance(t *testing.T) {
	e := newTestEnv(t)
	clk := e.setClock()
	a1, a2 := e.credential("alice", "read"), e.credential("alice", "read")
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 1, "tenant_burst": 1, "credential_requests_per_second": 1, "credential_burst": 1})
	if r := e.probe(a2); r.Status != 404 { // spends the tenant's only token
		t.Fatal(r.Status)
	}
	for i := 0; i < 5; i++ {
		wantError(t, e.probe(a1), 429, "rate_limited") // tenant refuses; a1's own token stays
	}
	clk.Add(time.Second)
	if r := e.probe(a1); r.Status != 404 {
		t.Fatalf("a1 after the tenant refilled: %d %s", r.Status, r.Body)
	}
}

func TestInFlightLimitReleasesOnDrop(t *testing.T) {
	e := newTestEnv(t)
	tok := e.credential("alice", "write")
	e.putLimits("alice", map[string]any{"max_in_flight_per_credential": 1})
	id, _, _ := parseTok(tok)
	key := hashName(id)

	// A xorb upload whose body never comes holds the one slot.
	conn := e.stalledUpload(t, tok)
	r := e.probe(tok)
	wantError(t, r, 429, "rate_limited")
	if r.json(t)["limit"] != "in_flight" || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("in-flight refusal: %s %v", r.Body, r.Header)
	}
	conn.Close() // the client goes away mid-request
	e.handlers.waitIdle()
	if n := e.srv.gate.InFlight.Count(key); n != 0 {
		t.Fatalf("%d in flight after the server finished with the dropped upload, want 0", n)
	}
	if r := e.probe(tok); r.Status != 404 {
		t.Fatalf("after the drop: %d %s", r.Status, r.Body)
	}
}

// waitFor polls a precondition that another goroutine of the server makes
// true on a socket event no virtual clock can drive (the server has read a
// request's head). It is never the assertion: a test that asserts what the
// server did after a client went away waits with handlers.waitIdle. The
// bound only catches a server that never gets there; a loaded two-core
// machine under -race can take seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// handlerTracker counts the requests in a handler, so that a test can wait
// until the server has finished with a request whose client went away
// (there is no answer to wait for).
type handlerTracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newHandlerTracker() *handlerTracker {
	h := &handlerTracker{idle: make(chan struct{})}
	close(h.idle)
	return h
}

func (h *handlerTracker) enter() {
	h.mu.Lock()
	if h.n == 0 {
		h.idle = make(chan struct{})
	}
	h.n++
	h.mu.Unlock()
}

func (h *handlerTracker) leave() {
	h.mu.Lock()
	if h.n--; h.n == 0 {
		close(h.idle)
	}
	h.mu.Unlock()
}

// wrap tracks an http.Handler (newTestEnv's httptest server).
func (h *handlerTracker) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.enter()
		defer h.leave()
		next.ServeHTTP(w, r)
	})
}

// middleware tracks echo's whole chain, as a Pre middleware (serveLive,
// where Server.Serve runs the handler).
func (h *handlerTracker) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h.enter()
		defer h.leave()
		return next(c)
	}
}

// waitIdle blocks until no request is in a handler.
func (h *handlerTracker) waitIdle() {
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	<-idle
}

// clientFrom returns an HTTP client whose connections come from a given
// loopback address.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func doFrom(t *testing.T, c *http.Client, url, token string, headers ...string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestAuthFailuresPerIP(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted_proxy=%v", trusted), func(t *testing.T) {
			e := newTestEnv(t, func(c *Config) {
				if trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
				}
			})
			e.setClock()
			good := e.credential("alice", "read")
			url := e.http.URL + "/v1/reconstructions/" + strings.Repeat("ab", 32)
			spray := clientFrom("127.0.0.1")
			for i := 0; i < 60; i++ {
				if code := doFrom(t, spray, url, "hf_oxt_bad"); code != 401 {
					t.Fatalf("failure %d: %d", i+1, code)
				}
			}
			// The 61st attempt is refused before its token is checked,
			// even with a good token and a forged X-Forwarded-For.
			if code := doFrom(t, spray, url, good, "X-Forwarded-For: 10.9.9.9"); code != 429 && !trusted {
				t.Fatalf("61st attempt: %d", code)
			} else if trusted && code != 404 {
				t.Fatalf("through a trusted proxy the forwarded client is another IP: %d", code)
			}
			if code := doFrom(t, spray, url, good); code != 429 {
				t.Fatalf("61st attempt without forwarding: %d", code)
			}
			if code := doFrom(t, clientFrom("127.0.0.2"), url, good); code != 404 {
				t.Fatalf("another IP: %d", code)
			}
		})
	}
}

// TestAuthFailuresIPv6Per64: behind a trusted proxy, IPv6 clients are
// limited per /64 (one host is commonly given a whole /64), and an
// IPv4-mapped address is the IPv4 address.
func TestAuthFailuresIPv6Per64(t *testing.T) {
	e := newTestEnv(t, func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	e.setClock()
	good := e.credential("alice", "read")
	url := e.http.URL + "/v1/reconstructions/" + strings.Repeat("ab", 32)
	proxy := clientFrom("127.0.0.1")
	for i := range 60 {
		// Every failure from another address of the same /64.
		xff := fmt.Sprintf("X-Forwarded-For: 2001:db8:0:1::%x", i+1)
		if code := doFrom(t, proxy, url, "hf_oxt_bad", xff); code != 401 {
			t.Fatalf("failure %d: %d", i+1, code)
		}
	}
	for _, c := range []struct {
		xff  string
		want int
	}{
		{"2001:db8:0:1:ffff:ffff:ffff:ffff", 429}, // the same /64
		{"2001:db8:0:2::1", 404},                  // the next /64
		{"192.0.2.1", 404},
	} {
		if code := doFrom(t, proxy, url, good, "X-Forwarded-For: "+c.xff); code != c.want {
			t.Fatalf("%s with a good token: %d, want %d", c.xff, code, c.want)
		}
	}
	for i := range 60 {
		if code := doFrom(t, proxy, url, "hf_oxt_bad", "X-Forwarded-For: 192.0.2.1"); code != 401 {
			t.Fatalf("IPv4 failure %d: %d", i+1, code)
		}
	}
	if code := doFrom(t, proxy, url, good, "X-Forwarded-For: ::ffff:192.0.2.1"); code != 429 {
		t.Fatalf("IPv4-mapped form of a throttled IPv4 address: %d, want 429", code)
	}
}

func hashName(s string) string {
	return storeHashName(s)
}

var _ = context.Background
