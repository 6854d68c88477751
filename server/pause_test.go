package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"openxet/limits"
	"openxet/xet"
)

// starvedCredential configures a credential limit of one request per 1000
// s with a burst of 1, so that a credential's second request is refused
// (Retry-After 1000) whatever the machine's pace.
func starvedCredential(pause time.Duration) func(*Config) {
	return func(c *Config) {
		c.Limits.CredentialRate = limits.Rate{PerSecond: 0.001, Burst: 1}
		c.RefusalPause = pause
	}
}

// keepAliveConn is one HTTP/1.1 connection to the test server, on which
// get sends requests one at a time.
type keepAliveConn struct {
	e    *testEnv
	conn net.Conn
	br   *bufio.Reader
}

func dialKeepAlive(t *testing.T, e *testEnv) *keepAliveConn {
	t.Helper()
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &keepAliveConn{e: e, conn: conn, br: bufio.NewReader(conn)}
}

// get sends GET path with token and returns the answer once its body is
// read.
func (k *keepAliveConn) get(path, token string) response {
	k.e.t.Helper()
	return k.e.rawRequestOn(k.conn, k.br, "GET", path, token)
}

// TestRefusalPausesTheConnection: a request-rate refusal is answered at
// once, with its Retry-After, and the connection's next request is read
// only after the pause. Only a lower bound on the time is checked, which a loaded machine
// cannot break.
func TestRefusalPausesTheConnection(t *testing.T) {
	const pause = 400 * time.Millisecond
	e := newTestEnv(t, starvedCredential(pause))
	e.serveLive(t)
	tok := e.credential("flooder", "read")
	path := "/v1/chunks/default/" + xet.Hash{9}.String()
	k := dialKeepAlive(t, e)
	if r := k.get(path, tok); r.Status != http.StatusNotFound {
		t.Fatalf("first request: %d, want 404 (a dedup miss, admitted)", r.Status)
	}
	// The server starts the pause after it writes the refusal, so the
	// clock starts before the refused request is sent: the server's pause
	// lies wholly inside what this side measures.
	sent := time.Now()
	r := k.get(path, tok)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1000" {
		t.Fatalf("second request: %d, Retry-After %q; want 429 and 1000", r.Status, r.Header.Get("Retry-After"))
	}
	r = k.get(path, tok)
	if waited := time.Since(sent); r.Status != http.StatusTooManyRequests || waited < pause {
		t.Fatalf("third request on the paused connection: %d after %v; want 429 after at least %v", r.Status, waited, pause)
	}
}

// TestRefusalPauseEndsAtShutdown: a refusal is answered although its
// connection is then paused for an hour, openxet_paused_connections counts
// the paused connection, and a graceful shutdown does not wait for it. With a
// pause of an hour, Serve would otherwise give up after its shutdown
// timeout and report it.
func TestRefusalPauseEndsAtShutdown(t *testing.T) {
	e := newTestEnv(t, starvedCredential(time.Hour), func(c *Config) { c.ShutdownTimeout = 30 * time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	e.http = &httptest.Server{URL: "http://" + ln.Addr().String(), Listener: ln}
	tok := e.credential("flooder", "read")
	k := dialKeepAlive(t, e)
	path := "/v1/chunks/default/" + xet.Hash{9}.String()
	k.get(path, tok)
	if r := k.get(path, tok); r.Status != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", r.Status)
	}
	// The answer is flushed before the pause is counted: wait for it.
	for deadline := time.Now().Add(time.Minute); e.srv.paused.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the refused connection was never counted as paused")
		}
		time.Sleep(time.Millisecond)
	}
	if got := gauge(t, e, "openxet_paused_connections"); got != 1 {
		t.Errorf("openxet_paused_connections: %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve with a paused connection: %v, want a clean shutdown", err)
	}
	if got := gauge(t, e, "openxet_paused_connections"); got != 0 {
		t.Errorf("openxet_paused_connections after the shutdown: %v, want 0", got)
	}
}

// gauge reads a gauge from the server's registry.
func gauge(t *testing.T, e *testEnv, name string) float64 {
	t.Helper()
	fams, err := e.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestRefusalPauseApplies lists which answers pause their connection: a
// request-rate refusal on an HTTP/1.1 connection that stays open, for
// RefusalPause, at most its Retry-After and at most the time the limit's
// bucket takes to refill; nothing else.
func TestRefusalPauseApplies(t *testing.T) {
	e := newTestEnv(t, func(c *Config) {
		c.RefusalPause = 5 * time.Second
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	})
	now := time.Now()
	// refused is the refusal of a key of rate r once its bucket is empty.
	refused := func(limit string, r limits.Rate) *apiError {
		tbl := limits.NewTable(8)
		d := tbl.Allow("k", r, now)
		for d.Allowed {
			d = tbl.Allow("k", r, now)
		}
		return rateLimited(&limits.RateError{Limit: limit, Decision: d})
	}
	slow := limits.Rate{PerSecond: 0.001, Burst: 1}    // Retry-After 1000 s, refill 1000 s
	fast := limits.Rate{PerSecond: 1000, Burst: 2000}  // the defaults: Retry-After 1 s, refill 2 s
	smallBurst := limits.Rate{PerSecond: 10, Burst: 4} // Retry-After 1 s, refill 0.4 s
	inFlight := rateLimited(&limits.RateError{Limit: limits.LimitInFlight,
		Decision: limits.Decision{RetryAfter: time.Second, Limit: limits.Rate{Burst: 2}}})
	for _, tc := range []struct {
		name    string
		refusal *apiError
		req     func(*http.Request)
		resConn string
		want    time.Duration
	}{
		{"credential rate", refused(limits.LimitCredential, slow), nil, "", 5 * time.Second},
		{"tenant rate", refused(limits.LimitTenant, slow), nil, "", 5 * time.Second},
		{"auth failures", refused(limits.LimitAuthFailures, slow), nil, "", 5 * time.Second},
		{"Retry-After shorter than the pause", refused(limits.LimitCredential, fast), nil, "", time.Second},
		{"a bucket that refills sooner", refused(limits.LimitCredential, smallBurst), nil, "", 400 * time.Millisecond},
		{"in-flight cap", inFlight, nil, "", 0},
		{"not a 429", &apiError{Status: 403, Code: "quota_exceeded"}, nil, "", 0},
		{"answered", nil, nil, "", 0},
		{"the answer closes the connection", refused(limits.LimitCredential, slow), nil, "close", 0},
		{"the client closes the connection", refused(limits.LimitCredential, slow), func(r *http.Request) { r.Close = true }, "", 0},
		{"HTTP/2", refused(limits.LimitCredential, slow), func(r *http.Request) { r.ProtoMajor, r.ProtoMinor = 2, 0 }, "", 0},
		{"through a proxy (X-Forwarded-For)", refused(limits.LimitCredential, slow), func(r *http.Request) { r.Header.Set("X-Forwarded-For", "198.51.100.7") }, "", 0},
		{"through a proxy (Forwarded)", refused(limits.LimitCredential, slow), func(r *http.Request) { r.Header.Set("Forwarded", "for=198.51.100.7") }, "", 0},
		{"from a trusted proxy", refused(limits.LimitCredential, slow), func(r *http.Request) { r.RemoteAddr = "[::ffff:10.1.2.3]:4000" }, "", 0},
		{"from an address that is not a trusted proxy", refused(limits.LimitCredential, slow), func(r *http.Request) { r.RemoteAddr = "10.9.0.1:4000" }, "", 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/v1/chunks/default/x", nil)
			if tc.req != nil {
				tc.req(req)
			}
			c := e.srv.echo.NewContext(req, httptest.NewRecorder())
			if tc.refusal != nil {
				setRefusal(c, tc.refusal)
			}
			if tc.resConn != "" {
				c.Response().Header().Set("Connection", "keep-alive, "+strings.ToUpper(tc.resConn))
			}
			if got := e.srv.refusalPause(c); got != tc.want {
				t.Errorf("pause %v, want %v", got, tc.want)
			}
		})
	}
	e.srv.cfg.RefusalPause = 0
	c := e.srv.echo.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	setRefusal(c, refused(limits.LimitCredential, slow))
	if got := e.srv.refusalPause(c); got != 0 {
		t.Errorf("with RefusalPause 0: pause %v, want none", got)
	}
}
