package load

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"html"
	"io"
	"maps"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"openxet/load/report"
)

// sampleReport is a small abuse report with every part filled in.
func sampleReport() *Report {
	ms := time.Millisecond
	reqs := []reqRecord{
		{start: 1 * time.Second, dur: 2 * ms, class: classHonest, route: routeXorb, status: 200, tenant: 0, bytes: 1000, timing: "total;dur=1, write;dur=0.5"},
		{start: 1500 * ms, dur: 4 * ms, class: classHonest, route: routeFetch, status: 206, tenant: 1, bytes: 5000, timing: "total;dur=2, queue;dur=1"},
		{start: 2 * time.Second, dur: 1 * ms, class: classHonest, route: routeDedup, status: 404, tenant: 1},
		{start: 3 * time.Second, dur: 9 * ms, class: classHonest, route: routeReconstruction, status: 200, tenant: 0, bytes: 300, timing: "total;dur=3,index;dur=2, queue;dur=3"},
		{start: 3100 * ms, dur: 20 * ms, class: classHonest, route: routeFetch, status: 206, tenant: 1, bytes: 9000, timing: "total;dur=4, queue;dur=6"},
		{start: 3200 * ms, dur: 1 * ms, class: classAbuser, route: routeFlood, status: 429, tenant: -1, code: "rate_limited/credential"},
		{start: 3300 * ms, dur: 1 * ms, class: classAbuser, route: routeQuota, status: 403, tenant: -1, code: "quota_exceeded"},
		{start: 3400 * ms, dur: 10 * time.Second, class: classAbuser, route: routeHold, status: 503, tenant: -1, code: "memory_busy"},
	}
	ops := []opRecord{
		{start: 1 * time.Second, dur: 3 * ms, tenant: 0, kind: "upload", bytes: 1000, ok: true},
		{start: 1500 * ms, dur: 5 * ms, tenant: 1, kind: "download", bytes: 5000, ok: true},
		{start: 3 * time.Second, dur: 30 * ms, tenant: 0, kind: "download", bytes: 9300, ok: true},
		{start: 3100 * ms, dur: 3 * ms, tenant: 1, kind: "dedup", ok: true},
	}
	phases := []phaseSpan{{"baseline", time.Second, 3 * time.Second}, {"abuse", 3 * time.Second, 5 * time.Second}}
	names := []string{"load-x-t0000", "load-x-t0001"}
	r := &Report{
		Scenario: "abuse", Server: "http://127.0.0.1:8080", RunID: "abc123", Started: testTime, Seed: 1,
		Settings: Settings{Tenants: 2, CredentialsPerTenant: 2, PhaseSeconds: 2, ThinkMinMs: 400, ThinkMaxMs: 1000, XorbMinBytes: 64 << 10, XorbMaxBytes: 1 << 20,
			RSSOverheadBytes: 256 << 20, FloodRate: 5000, Readers: 320, BigXorbBytes: 32 << 20, ReadBytesPerSecond: 64 << 10, QuotaRate: 20, SprayRate: 200},
		Memory: MemoryReport{Measured: true, BudgetBytes: 512 << 20, OverheadBytes: 256 << 20, LimitBytes: 768 << 20, PeakRSSBytes: 300 << 20, PeakReservedBytes: 80 << 20,
			Samples: []MemSample{{AtSeconds: 0, RSSBytes: 30 << 20, ReservedBytes: 0, BudgetBytes: 512 << 20}, {AtSeconds: 2, RSSBytes: 100 << 20, ReservedBytes: 10 << 20, BudgetBytes: 512 << 20}, {AtSeconds: 4, RSSBytes: 300 << 20, ReservedBytes: 80 << 20, BudgetBytes: 512 << 20}}},
		Abuser: &AbuserReport{Tenant: "load-x-abuser", Refusals: map[string]int{"429 rate_limited/credential": 1, "403 quota_exceeded": 1, "503 memory_busy": 1},
			Attacks: []AttackReport{{Attack: routeFlood, Requests: 1, Statuses: map[string]int{"429": 1}, Refusals: map[string]int{"429 rate_limited/credential": 1}}},
			Flood:   EnvelopeReport{Limit: "credential", Seconds: 2, Admitted: 10, Allowed: 4003}},
		Failures: map[string]int{},
		Notes:    []string{"a note with <angle> & ampersand"},
	}
	for _, p := range phases {
		pr := PhaseReport{Name: p.name, StartSeconds: p.start.Seconds(), DurationSeconds: (p.end - p.start).Seconds()}
		pr.Honest = classReport(classHonest, p, reqs, ops, honestRoutes)
		if p.name == "abuse" {
			cr := classReport(classAbuser, p, reqs, nil, abuserRoutes)
			pr.Abuser = &cr
		}
		pr.Tenants = tenantThroughput(names, p, ops)
		pr.JainOps, pr.JainBytes = jainOf(pr.Tenants)
		if p.name == "abuse" {
			pr.ServerLag, pr.ServerLagMeanMs = &LatencySummary{Count: 1200, P50ms: 0.08, P95ms: 0.9, P99ms: 10.5, Maxms: 117}, 0.42
			pr.ServerCPUSeconds, pr.ServerBusy = 1.8, 0.45
			pr.LoadCPUSeconds, pr.LoadBusy = 0.9, 0.225
			turns := int64(312)
			pr.ServerTurns = &turns
		}
		r.Phases = append(r.Phases, pr)
	}
	r.Comparison = compare(r.Phases[0], r.Phases[1])
	r.Timeline = timeline(reqs, time.Second, 5*time.Second)
	r.Finish()
	return r
}

func TestClassReport(t *testing.T) {
	r := sampleReport()
	base, ab := r.Phases[0], r.Phases[1]
	if base.Honest.Requests != 3 || ab.Honest.Requests != 2 || ab.Abuser.Requests != 3 {
		t.Fatalf("requests: baseline %d, abuse %d honest %d abuser; want 3, 2, 3", base.Honest.Requests, ab.Honest.Requests, ab.Abuser.Requests)
	}
	// The 404 of a dedup miss is an answer, not a refusal.
	if len(base.Honest.Refusals) != 0 || base.Honest.Statuses["404"] != 1 {
		t.Errorf("baseline refusals %v statuses %v", base.Honest.Refusals, base.Honest.Statuses)
	}
	if got := report.RefusedCount(*ab.Abuser); got != 3 {
		t.Errorf("abuser 403/429/503 count %d, want 3", got)
	}
	// Tenant 0 did 1 op in 2s, tenant 1 did 1: equal.
	if base.JainOps != 1 || base.Tenants[0].OpsPerSecond != 0.5 {
		t.Errorf("baseline Jain %v tenants %+v", base.JainOps, base.Tenants)
	}
	if base.Honest.OpsPerSecond != 1 || base.Honest.BytesPerSecond != 3000 {
		t.Errorf("baseline ops/s %v bytes/s %v, want 1 and 3000", base.Honest.OpsPerSecond, base.Honest.BytesPerSecond)
	}
	if c := r.Comparison; c.AbuseP99ms != 20 || c.BaselineP99ms != 4 || c.P99Ratio != 5 {
		t.Errorf("comparison p99 %v vs %v ratio %v, want 20 vs 4, 5", c.AbuseP99ms, c.BaselineP99ms, c.P99Ratio)
	}
	// The server's own times, from the answers that carried them.
	if c := r.Comparison; c.AbuseServerP99ms != 4 || c.BaselineServerP99ms != 2 || c.ServerP99Ratio != 2 {
		t.Errorf("server p99 %v vs %v ratio %v, want 4 vs 2, 2", c.AbuseServerP99ms, c.BaselineServerP99ms, c.ServerP99Ratio)
	}
	// The wait before the server read a request, and the rest of each
	// latency beyond it and the server's time (4-1-2, 9-3-3, 20-6-4 ms).
	if c := r.Comparison; c.AbuseQueueP99ms != 6 || c.BaselineQueueP99ms != 1 || c.QueueP99Ratio != 6 {
		t.Errorf("queue p99 %v vs %v ratio %v, want 6 vs 1, 6", c.AbuseQueueP99ms, c.BaselineQueueP99ms, c.QueueP99Ratio)
	}
	if c := r.Comparison; c.AbuseAfterP99ms != 10 || c.BaselineAfterP99ms != 1 || c.AfterP99Ratio != 10 {
		t.Errorf("after p99 %v vs %v ratio %v, want 10 vs 1, 10", c.AbuseAfterP99ms, c.BaselineAfterP99ms, c.AfterP99Ratio)
	}
	if q, a := base.Honest.QueueLatency.Count, base.Honest.AfterLatency.Count; q != 1 || a != 1 {
		t.Errorf("baseline requests with a queue time %d, with an after time %d; want 1 and 1 (the fetch)", q, a)
	}
	if got := base.Honest.ServerLatency.Count; got != 2 {
		t.Errorf("baseline requests with a server time: %d, want 2 (the dedup answer had none)", got)
	}
	if st := ab.Honest.ServerStages; len(st) != 1 || st["index"].P99ms != 2 {
		t.Errorf("abuse server stages %+v, want index 2 ms", st)
	}
	if rr, _ := report.FindRoute(ab.Honest.Routes, routeFetch); rr.ServerLatency.P99ms != 4 {
		t.Errorf("abuse fetch server p99 %v, want 4", rr.ServerLatency.P99ms)
	}
	if len(r.Timeline) != 2 || r.Timeline[0].Class != classHonest {
		t.Errorf("timeline %+v", r.Timeline)
	}
}

func TestWriteText(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"scenario abuse against http://127.0.0.1:8080",
		"baseline  honest", "abuse  abuser",
		"reconstruction", "Jain's index 1.0000",
		"p99 20.0 ms vs 4.0 ms (×5.00)",
		"the server's own time (Server-Timing): p99 4.0 ms vs 2.0 ms (×2.00)",
		"the wait before the server read the request (queue): p99 6.0 ms vs 1.0 ms (×6.00)",
		"after the answer's header (its rest, the way back, the client): p99 10.0 ms vs 1.0 ms (×10.00)",
		"abuse: honest requests' server stages, p99 ms: index 2.0",
		"abuse: the server's goroutines waited for a CPU 1200 times, mean 0.42 ms, p99 under 10.5 ms",
		"abuse: the server used 1.8 CPU seconds, 45 % of one CPU",
		"abuse: the load generator used 0.9 CPU seconds, 22 % of one CPU",
		"abuse: 312 requests of busy tenants waited for a turn on the server (server.turns_above_in_flight)",
		"429 rate_limited/credential ×1",
		"peak RSS 300MiB, budget 512MiB, limit 768MiB (budget + 256MiB overhead)",
		"result: OK",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	r.Failures = map[string]int{failMismatch: 2}
	r.FailureMessages = []string{"downloaded bytes differ: byte 3"}
	r.Finish()
	b.Reset()
	r.WriteText(&b)
	if !strings.Contains(b.String(), "result: FAIL (2 correctness failures)") || !strings.Contains(b.String(), "byte 3") {
		t.Errorf("failed report does not say so:\n%s", b.String())
	}
}

// TestWriteHTMLIsSelfContained checks the page loads nothing from elsewhere
// and that every plot is well-formed SVG.
func TestWriteHTMLIsSelfContained(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, banned := range []string{"<script", "<link", "src=", "@import", "url("} {
		if strings.Contains(page, banned) {
			t.Errorf("the page contains %q", banned)
		}
	}
	// The only URLs are the SVG namespace and the server's own address.
	for _, u := range regexp.MustCompile(`https?://[^"<\s]+`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" && u != "http://127.0.0.1:8080" {
			t.Errorf("the page refers to %s", u)
		}
	}
	if !strings.Contains(page, "a note with &lt;angle&gt; &amp; ampersand") {
		t.Error("notes are not escaped")
	}
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1)
	if len(svgs) != 3 {
		t.Fatalf("%d plots, want 3 (latency, tenants, memory)", len(svgs))
	}
	for i, s := range svgs {
		d := xml.NewDecoder(strings.NewReader(s))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("plot %d is not well-formed: %v\n%s", i, err, s)
			}
		}
	}
	for _, want := range []string{"honest p99", "abuser p99", "budget", "limit (768MiB)", "RSS", "load-x-t0001 abuse"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	r := sampleReport()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !back.OK || back.Comparison.P99Ratio != 5 || back.Abuser.Refusals["503 memory_busy"] != 1 || len(back.Memory.Samples) != 3 {
		t.Errorf("JSON lost something: %s", raw)
	}
}

func TestRefusalCode(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   string
	}{
		{429, `{"error":"rate_limited","limit":"credential","message":"m"}`, "rate_limited/credential"},
		{403, `{"error":"quota_exceeded","quota":1}`, "quota_exceeded"},
		{503, `{"error":"memory_busy"}`, "memory_busy"},
		{502, `bad gateway`, "http_502"},
		{500, `{}`, "http_500"},
	}
	for _, c := range cases {
		if got := refusalCode(c.status, []byte(c.body)); got != c.want {
			t.Errorf("refusalCode(%d, %s) = %q, want %q", c.status, c.body, got, c.want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2345678e+08
# TYPE openxet_memory_budget_bytes gauge
openxet_memory_budget_bytes 5.36870912e+08
# TYPE openxet_rate_limit_refusals_total counter
openxet_rate_limit_refusals_total{limit="credential"} 7
openxet_rate_limit_refusals_total{limit="tenant"} 3
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m[metricRSS] != 123456780 || m[metricBudget] != 512<<20 || m["openxet_rate_limit_refusals_total"] != 10 {
		t.Errorf("parsed %v", m)
	}
	if _, err := parseMetrics(strings.NewReader("not metrics {")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestCheckTarget(t *testing.T) {
	ctx := context.Background()
	for _, ok := range []string{"http://127.0.0.1:8080", "http://127.0.0.2", "http://[::1]:9000", "https://localhost:443"} {
		if err := CheckTarget(ctx, ok); err != nil {
			t.Errorf("CheckTarget(%s): %v", ok, err)
		}
	}
	for _, bad := range []string{"http://203.0.113.7:8080", "http://10.0.0.1", "http://[2001:db8::1]:80", "http://0.0.0.0:8080"} {
		if err := CheckTarget(ctx, bad); !errors.Is(err, ErrRemote) {
			t.Errorf("CheckTarget(%s) = %v, want ErrRemote", bad, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Scenario: Abuse, Servers: []string{"http://127.0.0.1:8080"}, AdminToken: "t"}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		says   string
	}{
		{"scenario", func(c *Config) { c.Scenario = "chaos" }, "scenario"},
		{"server", func(c *Config) { c.Servers = []string{"ftp://x"} }, "server"},
		{"no server", func(c *Config) { c.Servers, c.MetricsURLs = nil, nil }, "server: no URL"},
		{"duplicate server", func(c *Config) {
			c.Servers = []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080"}
			c.MetricsURLs = []string{"http://127.0.0.1:8080/metrics", "http://127.0.0.1:9090/metrics"}
		}, "listed twice"},
		{"metrics count", func(c *Config) { c.Servers = []string{"http://127.0.0.1:8080", "http://127.0.0.1:8081"} }, "metrics: 1 URLs for 2 servers"},
		{"token", func(c *Config) { c.AdminToken = "" }, "admin token"},
		{"think", func(c *Config) { c.ThinkMax = c.ThinkMin - 1 }, "think time"},
		{"xorb", func(c *Config) { c.XorbMaxBytes = 65 << 20 }, "xorb sizes"},
		{"spray addr", func(c *Config) { c.Abuser.SprayAddr = "nowhere" }, "spray address"},
		{"abuser credential rate", func(c *Config) { c.Abuser.CredentialRequestsPerSecond = -1 }, "abuser credential limit"},
		{"abuser credential burst", func(c *Config) { c.Abuser.CredentialRequestsPerSecond = 5 }, "abuser credential limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.mutate(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Validate = %v, want an error about %s", err, c.says)
			}
		})
	}
}

// TestImports: load is a client of the server's HTTP API; it knows nothing
// of the server's packages, HTTP framework, database or flags (docs/design.md §1).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"openxet/server", "openxet/store", "openxet/limits", "openxet/budget", "openxet/cli", "github.com/labstack/echo", "database/sql", "gocloud.dev", "github.com/urfave/cli"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("load depends on %s", dep)
			}
		}
	}
}

// TestHTMLShowsJainBytesAndSharedCPUs: the HTML report shows the
// byte-fairness Jain index beside the ops one, and says whether the load
// generator shared the server's host CPUs (the text report too).
func TestHTMLShowsJainBytesAndSharedCPUs(t *testing.T) {
	r := sampleReport()
	r.Phases[0].JainBytes = 0.8765
	for _, shared := range []string{"yes", "no", "unknown"} {
		r.GeneratorSharesCPUs = shared
		var h, txt bytes.Buffer
		if err := r.WriteHTML(&h); err != nil {
			t.Fatal(err)
		}
		r.WriteText(&txt)
		for _, want := range []string{"Jain (bytes)", "0.8765"} {
			if !strings.Contains(h.String(), want) {
				t.Errorf("the page lacks %q", want)
			}
		}
		line := "generator shares the server's host CPUs: " + shared
		if !strings.Contains(h.String(), html.EscapeString(line)) || !strings.Contains(txt.String(), line) {
			t.Errorf("the reports do not say %q", line)
		}
	}
	raw, _ := json.Marshal(r)
	if !strings.Contains(string(raw), `"generator_shares_server_cpus":"unknown"`) {
		t.Errorf("JSON lacks the field: %s", raw)
	}
}

func TestParseServerTiming(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		in   string
		want map[string]time.Duration
	}{
		{"", nil},
		{"total;dur=3.25", map[string]time.Duration{"total": ms(3.25)}},
		{"total;dur=3, work_wait;dur=0.5 , index;desc=\"x\";dur=1", map[string]time.Duration{"total": ms(3), "work_wait": ms(0.5), "index": ms(1)}},
		{"cache;desc=hit, total;DUR=\"2\"", map[string]time.Duration{"total": ms(2)}},
		{"total;dur=-1, x;dur=abc, ;dur=1, y;dur=Inf", nil},
	} {
		got, ok := parseServerTiming(tc.in)
		if ok != (tc.want != nil) || !maps.Equal(got, tc.want) {
			t.Errorf("parseServerTiming(%q) = %v, %v; want %v", tc.in, got, ok, tc.want)
		}
	}
}
