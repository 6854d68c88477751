package load

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"openxet/budget"
	"openxet/limits"
	"openxet/server"
	"openxet/store"
)

// testServer is a whole openxet server on httptest with a store in a temp
// dir, and its admin token.
type testServer struct {
	url   string
	admin string
}

// testLimits are lower than the defaults so that a short, slow (race
// detector) run still floods far over the abuser's credential rate, and
// still far above what an honest test tenant sends.
func testServerConfig() server.Config {
	return server.Config{
		DedupScope: "global",
		Limits: limits.Limits{
			TenantRate:               limits.Rate{PerSecond: 400, Burst: 800},
			CredentialRate:           limits.Rate{PerSecond: 100, Burst: 200},
			MaxInFlightPerCredential: 512,
			QuotaBytes:               -1,
		},
		AuthFailuresPerMinute: 60,
		Budget:                budget.Config{TotalBytes: 512 << 20, CredentialShare: 0.25, TenantShare: 0.5, Wait: 2 * time.Second},
		MetricsOnMain:         true,
	}
}

// startServer runs a server; wrap, when not nil, wraps its handler, and
// mutate changes its configuration.
func startServer(t *testing.T, wrap func(http.Handler) http.Handler, mutate ...func(*server.Config)) testServer {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := testServerConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := server.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	_, tok, err := st.CreateCredential(context.Background(), "admin", []string{"admin", "write"})
	if err != nil {
		t.Fatal(err)
	}
	return testServer{url: hs.URL, admin: tok}
}

// tinyConfig is a run of a second or two with a handful of tenants.
func tinyConfig(ts testServer, sc Scenario) Config {
	return Config{
		Scenario: sc, Server: ts.url, AdminToken: ts.admin,
		Duration: 1500 * time.Millisecond, Tenants: 4, CredentialsPerTenant: 2,
		ThinkMin: 50 * time.Millisecond, ThinkMax: 150 * time.Millisecond,
		XorbMinBytes: 8 << 10, XorbMaxBytes: 160 << 10,
		ScrapeInterval: 250 * time.Millisecond, RSSOverheadBytes: -1, // RSS is this test process's, race detector included
		DrainTimeout: 30 * time.Second, Seed: 42,
		Abuser: AbuserConfig{
			FloodRate: 1000, FloodWorkers: 8, Readers: 16, BigXorbBytes: 2 << 20, ReadBytesPerSecond: 16 << 10,
			QuotaHeadroomBytes: 64 << 10, QuotaXorbBytes: 32 << 10, QuotaWorkers: 2, QuotaRate: 20,
			SprayRate: 200, SprayWorkers: 2,
		},
	}
}

func honestRefusals(r *Report) int {
	n := 0
	for _, p := range r.Phases {
		n += refusedCount(p.Honest)
	}
	return n
}

func opsOf(r *Report) int {
	n := 0
	for _, p := range r.Phases {
		n += p.Honest.Ops
	}
	return n
}

func logReport(t *testing.T, r *Report) {
	t.Helper()
	var b bytes.Buffer
	r.WriteText(&b)
	t.Log("\n" + b.String())
}

func TestManyTenantsInProcess(t *testing.T) {
	ts := startServer(t, nil)
	r, err := Run(context.Background(), tinyConfig(ts, ManyTenants))
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || honestRefusals(r) != 0 {
		logReport(t, r)
		t.Fatalf("OK %v, honest refusals %d, failures %v", r.OK, honestRefusals(r), r.Failures)
	}
	if len(r.Phases) != 1 || opsOf(r) == 0 {
		t.Fatalf("phases %d, ops %d: nothing ran", len(r.Phases), opsOf(r))
	}
	p := r.Phases[0]
	for _, route := range honestRoutes {
		if rr, ok := findRoute(p.Honest.Routes, route); !ok || rr.Latency.Count == 0 {
			t.Errorf("route %s was never exercised", route)
		}
	}
	if len(p.Tenants) != 4 || p.JainOps <= 0 || p.JainOps > 1 {
		t.Errorf("tenants %d, Jain %v", len(p.Tenants), p.JainOps)
	}
	if !r.Memory.Measured || r.Memory.BudgetBytes != 512<<20 || r.Memory.PeakRSSBytes == 0 {
		t.Errorf("memory %+v, want it measured against the 512MiB budget", r.Memory)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
}

func TestAbuseInProcess(t *testing.T) {
	ts := startServer(t, nil)
	r, err := Run(context.Background(), tinyConfig(ts, Abuse))
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		logReport(t, r)
	}
	if !r.OK || honestRefusals(r) != 0 {
		logReport(t, r)
		t.Fatalf("OK %v, honest refusals %d, failures %v", r.OK, honestRefusals(r), r.Failures)
	}
	if len(r.Phases) != 2 || r.Comparison == nil || r.Abuser == nil {
		t.Fatalf("phases %d, comparison %v, abuser %v", len(r.Phases), r.Comparison != nil, r.Abuser != nil)
	}
	a := r.Abuser
	// The server's protections must have refused the abuser each way.
	for _, want := range []string{"429 rate_limited/credential", "403 quota_exceeded", "429 rate_limited/auth_failures"} {
		if a.Refusals[want] == 0 {
			logReport(t, r)
			t.Errorf("abuser refusals %v lack %q", a.Refusals, want)
		}
	}
	if a.HeldPeak == 0 {
		t.Errorf("no slow read was ever held open")
	}
	if a.UsageBytes > a.QuotaBytes {
		t.Errorf("abuser usage %d over quota %d", a.UsageBytes, a.QuotaBytes)
	}
	if a.Flood.Admitted > a.Flood.Allowed || a.Spray == nil || a.Spray.Admitted > a.Spray.Allowed {
		t.Errorf("envelopes: flood %+v spray %+v", a.Flood, a.Spray)
	}
}

// TestRunCatchesWrongBytesAndRefusals checks that the run fails when the
// server answers wrongly: fetch answers with one byte flipped (from the
// third on; a flip in bytes the window trims off goes unseen, as it does by
// the client), and one refused reconstruction.
func TestRunCatchesWrongBytesAndRefusals(t *testing.T) {
	var fetches, recons atomic.Int64
	ts := startServer(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			switch {
			case strings.HasPrefix(req.URL.Path, "/v1/fetch/") && fetches.Add(1) >= 3:
				fw := &flipWriter{ResponseWriter: w}
				next.ServeHTTP(fw, req)
				fw.flush()
			case strings.HasPrefix(req.URL.Path, "/v1/reconstructions/") && recons.Add(1) == 5:
				w.Header().Set("Retry-After", "1")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":"rate_limited","limit":"tenant","message":"injected"}`)
			default:
				next.ServeHTTP(w, req)
			}
		})
	})
	cfg := tinyConfig(ts, ManyTenants)
	cfg.Tenants, cfg.Duration = 2, time.Second
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK {
		logReport(t, r)
		t.Fatal("the run passed although the server sent a wrong byte and refused a request")
	}
	if r.Failures[failMismatch] == 0 || r.Failures[failRefused] != 1 {
		t.Fatalf("failures %v, want some %q and one %q", r.Failures, failMismatch, failRefused)
	}
	if got := r.Phases[0].Honest.Refusals["429 rate_limited/tenant"]; got != 1 {
		t.Errorf("honest refusals %v, want the injected 429 counted", r.Phases[0].Honest.Refusals)
	}
}

// flipWriter holds a response back and sends it by flush with the middle
// byte of its body flipped.
type flipWriter struct {
	http.ResponseWriter
	buf []byte
	hdr int
}

func (f *flipWriter) WriteHeader(code int) { f.hdr = code }
func (f *flipWriter) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	return len(p), nil
}

func (f *flipWriter) flush() {
	if len(f.buf) > 0 {
		f.buf[len(f.buf)/2] ^= 0xff
	}
	if f.hdr != 0 {
		f.ResponseWriter.WriteHeader(f.hdr)
	}
	f.ResponseWriter.Write(f.buf)
}

// TestFetchURLsMustStayOnLoopback: a server whose public URL names another
// host hands out fetch URLs for it; without AllowRemote the run refuses to
// follow them (and says so) rather than send load there.
func TestFetchURLsMustStayOnLoopback(t *testing.T) {
	ts := startServer(t, nil, func(c *server.Config) { c.PublicURL = "http://203.0.113.9:1" })
	cfg := tinyConfig(ts, ManyTenants)
	cfg.Tenants, cfg.Duration = 1, 500*time.Millisecond
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Failures[failRemote] == 0 {
		t.Fatalf("failures %v, want %q", r.Failures, failRemote)
	}
	if n := r.Phases[0].Honest.Statuses["0"]; n != 0 {
		t.Errorf("%d requests went out and failed; none should have been sent", n)
	}
	cfg.Scenario = Abuse
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "another host") {
		t.Errorf("abuse setup: %v, want a refusal of the remote fetch URL", err)
	}
}
