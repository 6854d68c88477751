package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"openxet/xet"
)

// series parses a /metrics body into "name{label=\"v\",…}" -> value.
func series(t *testing.T, body string) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			key := name
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"=\""+l.GetValue()+"\"")
				}
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// scrapeMetrics reads the admin's /metrics, which must answer 200.
func scrapeMetrics(t *testing.T, e *testEnv) map[string]float64 {
	t.Helper()
	r := e.do("GET", "/metrics", e.admin, nil)
	if r.Status != 200 {
		t.Fatalf("metrics: %d %s", r.Status, r.Body)
	}
	return series(t, string(r.Body))
}

// wantSeries checks that each wanted series is present with its value.
func wantSeries(t *testing.T, step string, got map[string]float64, want map[string]int) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != float64(v) {
			t.Errorf("%s: %s = %v (present %v), want %d", step, k, g, ok, v)
		}
	}
}

// postSeededXorb uploads the xorb of two chunks of seed and returns its size.
func postSeededXorb(t *testing.T, e *testEnv, token string, seed uint64) int {
	t.Helper()
	body, info := xet.BuildXorb(randomChunks(seed, 2, 20_000), false)
	if r := e.postXorb(token, body, info.Hash); r.Status != 200 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	return len(body)
}

// TestMetricsStoredBytes: /metrics shows the stored xorb bytes and the
// charged total; per-tenant usage and quota only when asked for, only for
// that many tenants (nearest their quota first), quota only where there is
// one; figures are read again once the refresh interval has passed.
func TestMetricsStoredBytes(t *testing.T) {
	t.Run("opt-in, bounded", func(t *testing.T) {
		e := newTestEnv(t, func(c *Config) { c.MetricsTenants = 2; c.Limits.QuotaBytes = 10 << 20 })
		clk := e.setClock()
		alice, bob, carol := e.credential("alice", "write"), e.credential("bob", "write"), e.credential("carol", "write")
		a := postSeededXorb(t, e, alice, 1)
		b := postSeededXorb(t, e, bob, 2)
		postSeededXorb(t, e, bob, 1) // alice's xorb, charged to bob too
		c := postSeededXorb(t, e, carol, 3)
		e.putLimits("bob", map[string]any{"quota_bytes": 2 * (a + b)}) // bob at 50 %
		e.putLimits("carol", map[string]any{"quota_bytes": -1})        // carol unlimited

		got := scrapeMetrics(t, e)
		wantSeries(t, "first scrape", got, map[string]int{
			"openxet_stored_xorb_bytes":                  a + b + c,
			"openxet_tenants_usage_bytes":                a + b + a + c,
			`openxet_tenant_usage_bytes{tenant="bob"}`:   a + b,
			`openxet_tenant_quota_bytes{tenant="bob"}`:   2 * (a + b),
			`openxet_tenant_usage_bytes{tenant="alice"}`: a,
			`openxet_tenant_quota_bytes{tenant="alice"}`: 10 << 20,
			"openxet_store_metrics_errors_total":         0,
		})
		// Two tenants asked for: carol (unlimited, so last) and admin are not shown.
		for k := range got {
			if strings.Contains(k, `tenant="carol"`) || strings.Contains(k, `tenant="admin"`) {
				t.Errorf("metrics show %s beyond server.metrics_tenants", k)
			}
		}

		// A new upload shows once the refresh interval has passed, not before.
		d := postSeededXorb(t, e, alice, 4)
		clk.Add(storeMetricsRefresh - time.Second)
		wantSeries(t, "before the refresh", scrapeMetrics(t, e), map[string]int{"openxet_stored_xorb_bytes": a + b + c})
		clk.Add(time.Second)
		wantSeries(t, "after the refresh", scrapeMetrics(t, e), map[string]int{
			"openxet_stored_xorb_bytes":                  a + b + c + d,
			`openxet_tenant_usage_bytes{tenant="alice"}`: a + d,
		})
	})

	t.Run("readiness", func(t *testing.T) {
		e := newTestEnv(t)
		clk := e.setClock()
		a := postSeededXorb(t, e, e.credential("alice", "write"), 1)
		wantSeries(t, "ready", scrapeMetrics(t, e), map[string]int{"openxet_ready": 1, "openxet_stored_xorb_bytes": a})
		// With the index closed, the unauthenticated metrics handler (of
		// server.metrics_listen) says not ready and leaves the figures out.
		e.st.Close()
		unauthenticated := func() map[string]float64 {
			rec := httptest.NewRecorder()
			e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			return series(t, rec.Body.String())
		}
		wantSeries(t, "index closed, figures still fresh", unauthenticated(), map[string]int{
			"openxet_ready": 0, "openxet_store_metrics_errors_total": 0, "openxet_stored_xorb_bytes": a})
		clk.Add(storeMetricsRefresh)
		got := unauthenticated()
		wantSeries(t, "index closed, figures due", got, map[string]int{"openxet_ready": 0, "openxet_store_metrics_errors_total": 1})
		if _, ok := got["openxet_stored_xorb_bytes"]; ok {
			t.Errorf("stored bytes shown though the index could not be read")
		}
	})

	t.Run("off by default", func(t *testing.T) {
		e := newTestEnv(t)
		alice := e.credential("alice", "write")
		a := postSeededXorb(t, e, alice, 1)
		got := scrapeMetrics(t, e)
		wantSeries(t, "default", got, map[string]int{"openxet_stored_xorb_bytes": a, "openxet_tenants_usage_bytes": a})
		for k := range got {
			if strings.HasPrefix(k, "openxet_tenant_") {
				t.Errorf("%s without server.metrics_tenants", k)
			}
		}
	})
}
