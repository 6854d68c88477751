package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"openxet/budget"
	"openxet/limits"
	"openxet/load/report"
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
	hs := httptest.NewUnstartedServer(h)
	hs.Listener = smallSendBuffers{hs.Listener}
	hs.Start()
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

// smallSendBuffers gives every connection it accepts a send buffer of
// 64KiB. Loopback lets the kernel grow it to megabytes, enough to take a
// held read of the abuser's whole 2MiB xorb at once: the server would then
// finish the read (and count it no longer in progress) while the client
// has yet to read it. Over a real network, and with this, a slow read
// stays in progress on the server until the client has read all but the
// buffers' worth.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetWriteBuffer(64 << 10); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// tinyConfig is a run of a second or two with a handful of tenants. What a
// test asserts must not depend on how much the run gets done in that time:
// a test that needs something to have happened holds the phase open until
// it has (Config.holdPhase). The drain timeout only catches a hung server.
func tinyConfig(ts testServer, sc Scenario) Config {
	return Config{
		Scenario: sc, Servers: []string{ts.url}, AdminToken: ts.admin,
		Duration: 1500 * time.Millisecond, Tenants: 4, CredentialsPerTenant: 2,
		ThinkMin: 50 * time.Millisecond, ThinkMax: 150 * time.Millisecond,
		XorbMinBytes: 8 << 10, XorbMaxBytes: 160 << 10,
		ScrapeInterval: 250 * time.Millisecond, RSSOverheadBytes: -1, // RSS is this test process's, race detector included
		DrainTimeout: 5 * time.Minute, Seed: 42,
		Abuser: AbuserConfig{
			FloodRate: 1000, FloodWorkers: 8, Readers: 16, BigXorbBytes: 2 << 20, ReadBytesPerSecond: 16 << 10,
			QuotaHeadroomBytes: 64 << 10, QuotaXorbBytes: 32 << 10, QuotaWorkers: 2, QuotaRate: 20,
			SprayRate: 200, SprayWorkers: 2,
		},
	}
}

// allOver reports whether every node was offered more than its envelope
// allows.
func allOver(envs []EnvelopeReport) bool {
	for _, e := range envs {
		if e.Offered <= e.Allowed {
			return false
		}
	}
	return true
}

func honestRefusals(r *Report) int {
	n := 0
	for _, p := range r.Phases {
		n += report.RefusedCount(p.Honest)
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

// honestSince returns the routes of honest requests answered since from,
// and how many honest operations that started since from have ended.
func honestSince(rec *recorder, from time.Duration) (routes map[string]int, ops int) {
	reqs, opsDone, _, _ := rec.snapshot()
	routes = map[string]int{}
	for _, r := range reqs {
		if r.class == classHonest && r.start >= from && r.status != 0 {
			routes[r.route]++
		}
	}
	for _, o := range opsDone {
		if o.start >= from {
			ops++
		}
	}
	return routes, ops
}

// untilEveryRoute holds a phase open until each honest route has been
// answered in it and an operation that started in it has ended.
func untilEveryRoute(p phaseSpan, rec *recorder, _ *abuser) bool {
	routes, ops := honestSince(rec, p.start)
	return len(routes) == len(honestRoutes) && ops > 0
}

func TestManyTenantsInProcess(t *testing.T) {
	ts := startServer(t, nil)
	cfg := tinyConfig(ts, ManyTenants)
	cfg.holdPhase = untilEveryRoute
	r, err := Run(context.Background(), cfg)
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
		if rr, ok := report.FindRoute(p.Honest.Routes, route); !ok || rr.Latency.Count == 0 {
			t.Errorf("route %s was never exercised", route)
		}
	}
	if p.LoadCPUSeconds <= 0 || p.LoadBusy <= 0 {
		t.Errorf("load generator CPU %v s, busy %v: want its own CPU time in the phase", p.LoadCPUSeconds, p.LoadBusy)
	}
	// Every answered honest request told the server when it was sent, and
	// got back the wait before the server read it.
	if h := p.Honest; h.QueueLatency.Count != h.ServerLatency.Count || h.AfterLatency.Count != h.ServerLatency.Count || h.ServerLatency.Count == 0 {
		t.Errorf("honest requests with a server time %d, a queue time %d, an after time %d: want all the same", h.ServerLatency.Count, h.QueueLatency.Count, h.AfterLatency.Count)
	}
	if len(p.Tenants) != 4 || p.JainOps <= 0 || p.JainOps > 1 {
		t.Errorf("tenants %d, Jain %v", len(p.Tenants), p.JainOps)
	}
	if !r.Memory.Measured || r.Memory.BudgetBytes != 512<<20 || r.Memory.PeakRSSBytes == 0 {
		t.Errorf("memory %+v, want it measured against the 512MiB budget", r.Memory)
	}
	if r.GeneratorSharesCPUs != sharedYes {
		t.Errorf("generator shares the server's CPUs: %q, want yes (the server is in this process)", r.GeneratorSharesCPUs)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
}

// TestAbuseInProcess: the abuser is refused each way, and no honest
// request is. Each refusal follows from what the attack offered, never from
// how fast the machine let it send: the abuser's credentials get a limit
// of 1/s with burst 4 and its address 3 auth failures a minute, its quota
// leaves 1 byte of headroom (less than any upload), and the abuse phase is
// held open until the flood and the sprayer have each sent more than their
// limit allows over the time they took, a quota upload got past the rate
// limits and a slow read was held. The honest tenants stay far below their
// limits whatever the speed: their think times bound their rate.
//
// The attacks run in the load process, or in a child process of their own
// (Config.AbuserCommand: this test binary, see TestMain), whose counters
// and records must come back to the report as if they had run here.
func TestAbuseInProcess(t *testing.T) {
	t.Run("in the load process", func(t *testing.T) { testAbuse(t, nil) })
	t.Run("in a child process", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Skip(err)
		}
		testAbuse(t, func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), envAbuserChild+"=1")
			cmd.Stderr = os.Stderr
			return cmd
		})
	})
}

// testAbuse runs the Abuse scenario with the attacks in the load process
// (command nil) or in the child process command starts, and checks the
// report and that the run cleaned up after itself.
func testAbuse(t *testing.T, command func(context.Context) *exec.Cmd) {
	ts, cfg := abuseConfig(t, command)
	// The abuser finishes only once the honest tenants stop, as a process
	// at the lowest CPU priority may: the run must stop them first rather
	// than wait for it with them running (it hung so once, for 14 minutes).
	abuserWaited := false
	cfg.abuserEnd = func(honestStop <-chan struct{}) {
		select {
		case <-honestStop:
		case <-time.After(time.Minute):
			abuserWaited = true // and ends, lest the run never stop them
		}
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if abuserWaited {
		t.Error("the run waited for the abuser to stop before it stopped the honest tenants")
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
	if r.Abuser.Spray == nil {
		t.Fatalf("the sprayer did not run: %v", r.Notes)
	}
	checkAbuseRefused(t, r, command != nil)
	checkCleanedUp(t, ts, r.Abuser.Tenant)
}

// abuseConfig starts the server of testAbuse and returns it with the
// configuration of its run: the abuser's limits low, and the abuse phase
// held until every attack went over its limit.
func abuseConfig(t *testing.T, command func(context.Context) *exec.Cmd) (testServer, Config) {
	t.Helper()
	const authFailuresPerMinute = 3
	// Turns for any tenant with more than one request in progress: two held
	// reads make the abuser busy.
	ts := startServer(t, nil, func(c *server.Config) { c.AuthFailuresPerMinute, c.TurnsAboveInFlight = authFailuresPerMinute, 1 })
	cfg := tinyConfig(ts, Abuse)
	a := &cfg.Abuser
	a.CredentialRequestsPerSecond, a.CredentialBurst = 1, 4
	a.AuthFailuresPerMinute = authFailuresPerMinute
	a.SprayWorkers = 1 // one sprayer makes the auth-failure envelope exact
	a.QuotaHeadroomBytes = 1
	cfg.AbuserCommand = command
	cfg.holdPhase = func(p phaseSpan, _ *recorder, ab *abuser) bool {
		if p.name != "abuse" {
			return true
		}
		return allOver(ab.floodEnvelopes()) && (ab.spray == nil || allOver(ab.sprayEnvelopes())) &&
			ab.quotaReached.Load() > 0 && ab.heldPeak.Load() > 1
	}
	return ts, cfg
}

// checkAbuseRefused checks that r's abuser was refused each way it
// attacked, that the server's turns are reported, and that the layout names
// the abuser's own process when it ran in one (ownProcess).
func checkAbuseRefused(t *testing.T, r *Report, ownProcess bool) {
	t.Helper()
	ar := r.Abuser
	attacks := map[string]AttackReport{}
	for _, at := range ar.Attacks {
		attacks[at.Attack] = at
	}
	// Every answer not refused by a limit was admitted by it, so a limit
	// that held its envelope refused at least offered - allowed.
	for _, c := range []struct {
		attack, refusal string
		env             EnvelopeReport
	}{
		{routeFlood, "429 rate_limited/credential", ar.Flood},
		{routeSpray, "429 rate_limited/auth_failures", *ar.Spray},
	} {
		if c.env.Offered <= c.env.Allowed {
			t.Fatalf("%s: offered %d, not more than the %d its limit allows; the phase should have been held until it was", c.attack, c.env.Offered, c.env.Allowed)
		}
		if got, want := attacks[c.attack].Refusals[c.refusal], c.env.Offered-c.env.Allowed; int64(got) < want {
			logReport(t, r)
			t.Errorf("%s: %d refused with %q, want at least %d (offered %d, allowed %d)", c.attack, got, c.refusal, want, c.env.Offered, c.env.Allowed)
		}
	}
	// Each quota upload past the rate limits costs more than the headroom.
	q := attacks[routeQuota]
	if past := q.Requests - q.Statuses["429"] - q.Statuses["0"]; past == 0 || q.Refusals["403 quota_exceeded"] != past {
		t.Errorf("quota uploads: %d past the rate limits, refusals %v; want every one refused 403 quota_exceeded", past, q.Refusals)
	}
	if ar.QuotaStored != 0 || ar.UsageBytes > ar.QuotaBytes {
		t.Errorf("abuser stored %d quota uploads, usage %d, quota %d", ar.QuotaStored, ar.UsageBytes, ar.QuotaBytes)
	}
	if ar.HeldPeak < 2 {
		t.Errorf("%d slow reads held open at most, want 2 or more", ar.HeldPeak)
	}
	// The server's turns are in the report: the abuser's requests beside
	// a held read took them in the abuse phase.
	if base, abuse := r.Phases[0].ServerTurns, r.Phases[1].ServerTurns; base == nil || abuse == nil || *abuse == 0 {
		t.Errorf("server turns: baseline %v, abuse %v; want both reported, some in the abuse phase (held peak %d, %+v)", derefOr(base), derefOr(abuse), ar.HeldPeak, ar.Nodes)
	}
	for _, at := range []string{routeFlood, routeHold, routeQuota, routeSpray} {
		if attacks[at].Requests == 0 {
			t.Errorf("no request of the %s attack in the report", at)
		}
	}
	if strings.HasPrefix(r.Layout.Abuser, "own process: pid ") != ownProcess {
		t.Errorf("layout says the abuser ran %q; want its own process: %v", r.Layout.Abuser, ownProcess)
	}
}

// checkCleanedUp checks that the run cleaned up after itself
// (Config.KeepTenants false): every credential it made is revoked and the
// limits record of abuserTenant, the only one it set, is gone.
func checkCleanedUp(t *testing.T, ts testServer, abuserTenant string) {
	t.Helper()
	adm := &admin{base: ts.url, token: ts.admin, hc: http.DefaultClient}
	if lim, err := adm.limits(context.Background(), abuserTenant); err != nil || lim.QuotaBytes != -1 {
		t.Errorf("after the run the abuser's quota is %d (%v); want the default (-1): its limits record removed", lim.QuotaBytes, err)
	}
	var creds struct {
		Credentials []struct {
			ID      string
			Tenant  string
			Revoked time.Time
		}
	}
	if err := adm.call(context.Background(), "GET", "/credentials", nil, &creds); err != nil {
		t.Fatal(err)
	}
	for _, c := range creds.Credentials {
		if strings.HasPrefix(c.Tenant, "load-") && c.Revoked.IsZero() {
			t.Errorf("credential %s of %s was left active", c.ID, c.Tenant)
		}
	}
}

// TestCleanUp: after a run, cleanUp revokes the credentials it made and,
// unless the run keeps its tenants, removes their limits records; a tenant
// the server never heard of (its credential creation failed) counts as
// removed. The limits records of other tenants stay.
func TestCleanUp(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	adm := &admin{base: ts.url, token: ts.admin, hc: http.DefaultClient}
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			run := fmt.Sprintf("load-keep%v", keep)
			var made []credential
			for _, tn := range []string{run + "-t0000", run + "-abuser", "bystander"} {
				c, err := adm.createCredential(ctx, tn)
				if err != nil {
					t.Fatal(err)
				}
				made = append(made, c)
				if _, err := adm.setLimits(ctx, tn, map[string]any{"quota_bytes": 12345}); err != nil {
					t.Fatal(err)
				}
			}
			bystander := made[2]
			made = made[:2]
			revoked, removed := cleanUp(ctx, adm, made, []string{run + "-t0000", run + "-abuser", run + "-t0001"}, keep)
			if revoked != 2 {
				t.Errorf("revoked %d, want 2", revoked)
			}
			wantRemoved, wantQuota := 3, int64(-1)
			if keep {
				wantRemoved, wantQuota = 0, 12345
			}
			if removed != wantRemoved {
				t.Errorf("removed %d tenants, want %d", removed, wantRemoved)
			}
			for _, tn := range []string{run + "-t0000", run + "-abuser"} {
				if lim, err := adm.limits(ctx, tn); err != nil || lim.QuotaBytes != wantQuota {
					t.Errorf("%s: quota %d (%v), want %d", tn, lim.QuotaBytes, err, wantQuota)
				}
			}
			if lim, _ := adm.limits(ctx, "bystander"); lim.QuotaBytes != 12345 {
				t.Errorf("a tenant the run did not make lost its limits: quota %d", lim.QuotaBytes)
			}
			var creds struct {
				Credentials []struct {
					ID      string
					Revoked time.Time
				}
			}
			if err := adm.call(ctx, "GET", "/credentials", nil, &creds); err != nil {
				t.Fatal(err)
			}
			revokedByID := map[string]bool{}
			for _, c := range creds.Credentials {
				revokedByID[c.ID] = !c.Revoked.IsZero()
			}
			if !revokedByID[made[0].ID] || !revokedByID[made[1].ID] || revokedByID[bystander.ID] {
				t.Errorf("revoked: the run's %v and %v, the bystander's %v; want true, true, false",
					revokedByID[made[0].ID], revokedByID[made[1].ID], revokedByID[bystander.ID])
			}
		})
	}
}

// TestRunCatchesWrongBytesAndRefusals checks that the run fails when the
// server answers wrongly: fetch answers with their first byte flipped (from
// the third on; the first byte is a chunk header's, which no window trims
// off), and one refused reconstruction. The phase is held open until the
// run has had five reconstructions and three fetches answered.
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
	cfg.holdPhase = func(_ phaseSpan, rec *recorder, _ *abuser) bool {
		routes, _ := honestSince(rec, 0)
		return routes[routeReconstruction] >= 5 && routes[routeFetch] >= 3
	}
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

// flipWriter holds a response back and sends it by flush with the first
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
		f.buf[0] ^= 0xff
	}
	if f.hdr != 0 {
		f.ResponseWriter.WriteHeader(f.hdr)
	}
	f.ResponseWriter.Write(f.buf)
}

// TestFetchURLsMustStayOnLoopback: a server whose public URL names another
// host hands out fetch URLs for it; without AllowRemote the run refuses to
// follow them (and says so) rather than send load there. The phase is held
// open until a reconstruction was answered.
func TestFetchURLsMustStayOnLoopback(t *testing.T) {
	ts := startServer(t, nil, func(c *server.Config) { c.PublicURL = "http://203.0.113.9:1" })
	cfg := tinyConfig(ts, ManyTenants)
	cfg.Tenants, cfg.Duration = 1, 500*time.Millisecond
	cfg.holdPhase = func(p phaseSpan, rec *recorder, _ *abuser) bool {
		routes, _ := honestSince(rec, p.start)
		return routes[routeReconstruction] > 0
	}
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
