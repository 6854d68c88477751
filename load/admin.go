package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime/metrics"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	adminapi "openxet/admin"
)

// admin talks to the server's admin API and metrics with the admin token.
// Its requests are not recorded: they are not load.
type admin struct {
	base, metrics, token string
	hc                   *http.Client
}

// tenantLimits is the part of GET /api/openxet/v1/admin/tenants/{t}/limits
// the run reads.
type tenantLimits struct {
	QuotaBytes                  int64   `json:"quota_bytes"`
	UsageBytes                  int64   `json:"usage_bytes"`
	TenantRequestsPerSecond     float64 `json:"tenant_requests_per_second"`
	TenantBurst                 int     `json:"tenant_burst"`
	CredentialRequestsPerSecond float64 `json:"credential_requests_per_second"`
	CredentialBurst             int     `json:"credential_burst"`
	MaxInFlightPerCredential    int     `json:"max_in_flight_per_credential"`
}

// credential is one the run made.
type credential struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

func (a *admin) call(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := adminapi.Client{Base: a.base, Token: a.token, HTTP: a.hc}
	return c.Do(ctx, method, path, in, out)
}

func (a *admin) createCredential(ctx context.Context, tenant string) (credential, error) {
	var c credential
	err := a.call(ctx, "POST", "/credentials", map[string]any{"tenant": tenant, "scopes": []string{"write"}}, &c)
	if err == nil && c.Token == "" {
		err = fmt.Errorf("POST /credentials: the answer has no token")
	}
	return c, err
}

func (a *admin) revoke(ctx context.Context, id string) error {
	return a.call(ctx, "DELETE", "/credentials/"+url.PathEscape(id), nil, nil)
}

// removeTenant takes away what a run left of one of its tenants once its
// credentials are revoked: its limits record (DELETE …/limits, which the
// abuser has and the honest tenants do not). A tenant the server does not
// know has nothing to remove. The tenant itself and its stored bytes stay:
// the run does not call the admin API's tenant deletion
// (DELETE /api/openxet/v1/admin/tenants/{tenant}, `openxet tenants delete`),
// which an operator runs when the run's tenants are no longer wanted.
func (a *admin) removeTenant(ctx context.Context, tenant string) error {
	err := a.call(ctx, "DELETE", "/tenants/"+url.PathEscape(tenant)+"/limits", nil, nil)
	var ae *adminapi.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil
	}
	return err
}

func (a *admin) limits(ctx context.Context, tenant string) (tenantLimits, error) {
	var l tenantLimits
	err := a.call(ctx, "GET", "/tenants/"+url.PathEscape(tenant)+"/limits", nil, &l)
	return l, err
}

// setLimits replaces the tenant's overrides with doc (the admin API's
// limits document) and returns its effective limits.
func (a *admin) setLimits(ctx context.Context, tenant string, doc map[string]any) (tenantLimits, error) {
	var l tenantLimits
	err := a.call(ctx, "PUT", "/tenants/"+url.PathEscape(tenant)+"/limits", doc, &l)
	return l, err
}

// Metric names the run reads from /metrics.
const (
	metricRSS      = "process_resident_memory_bytes"
	metricReserved = "openxet_memory_reserved_bytes"
	metricBudget   = "openxet_memory_budget_bytes"
	metricCPUs     = "openxet_process_cpus"
	// metricCPUSeconds is the server process's CPU time, user and system
	// (from /proc, in 10 ms ticks).
	metricCPUSeconds = "process_cpu_seconds_total"
	// metricSchedLatency is how long the server's goroutines waited,
	// runnable, for a CPU (runtime/metrics /sched/latencies:seconds).
	metricSchedLatency = "go_sched_latencies_seconds"
	// metricTurns counts the requests of busy tenants that waited for
	// a turn (server.turns_above_in_flight).
	metricTurns = "openxet_turns_total"
)

// serverClock is what the run reads from the server at each phase's start
// and end, in one scrape: its scheduling latency histogram as a
// runtime/metrics histogram (bucket i counts the waits in [Buckets[i],
// Buckets[i+1]) seconds; nil when the server does not export it) with the
// sum of the waits in seconds, the CPU time it has used (cpuOK false
// when it does not export that) and the turns it has given (turnsOK
// likewise).
type serverClock struct {
	sched    *metrics.Float64Histogram
	schedSum float64
	cpu      float64
	cpuOK    bool
	turns    float64
	turnsOK  bool
}

func (a *admin) clock(ctx context.Context) (c serverClock, err error) {
	err = a.readMetrics(ctx, func(r io.Reader) error {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(r)
		if err != nil {
			return fmt.Errorf("parse metrics: %w", err)
		}
		if ms := fams[metricCPUSeconds].GetMetric(); len(ms) == 1 && ms[0].GetCounter() != nil {
			c.cpu, c.cpuOK = ms[0].GetCounter().GetValue(), true
		}
		if ms := fams[metricTurns].GetMetric(); len(ms) == 1 && ms[0].GetCounter() != nil {
			c.turns, c.turnsOK = ms[0].GetCounter().GetValue(), true
		}
		ms := fams[metricSchedLatency].GetMetric()
		if len(ms) != 1 || ms[0].GetHistogram() == nil {
			return nil
		}
		ph := ms[0].GetHistogram()
		h := &metrics.Float64Histogram{Buckets: []float64{0}}
		var prev uint64
		for _, b := range ph.GetBucket() {
			if math.IsInf(b.GetUpperBound(), 1) {
				break
			}
			h.Buckets = append(h.Buckets, b.GetUpperBound())
			h.Counts = append(h.Counts, b.GetCumulativeCount()-prev)
			prev = b.GetCumulativeCount()
		}
		h.Buckets = append(h.Buckets, math.Inf(1))
		h.Counts = append(h.Counts, ph.GetSampleCount()-prev)
		c.sched, c.schedSum = h, ph.GetSampleSum()
		return nil
	})
	return c, err
}

// scrape reads the server's metrics and returns the value of each gauge or
// counter family (series summed).
func (a *admin) scrape(ctx context.Context) (map[string]float64, error) {
	var out map[string]float64
	err := a.readMetrics(ctx, func(r io.Reader) (err error) {
		out, err = parseMetrics(r)
		return err
	})
	return out, err
}

// serverCPUs reads the CPU list the server reports it may run on (the cpus
// label of openxet_process_cpus); known is false when it reports none.
func (a *admin) serverCPUs(ctx context.Context) (cpus string, known bool, err error) {
	err = a.readMetrics(ctx, func(r io.Reader) error {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(r)
		if err != nil {
			return fmt.Errorf("parse metrics: %w", err)
		}
		for _, m := range fams[metricCPUs].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cpus" {
					cpus, known = l.GetValue(), true
				}
			}
		}
		return nil
	})
	return cpus, known, err
}

// readMetrics GETs the server's metrics with the admin token and hands the
// body to parse.
func (a *admin) readMetrics(ctx context.Context, parse func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", a.metrics, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	res, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		return fmt.Errorf("GET %s: %s", a.metrics, res.Status)
	}
	return parse(io.LimitReader(res.Body, 16<<20))
}

// parseMetrics reads the Prometheus text format into name → value, summing
// the series of a family (histograms and summaries give their sample count).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := make(map[string]float64, len(fams))
	for name, f := range fams {
		var v float64
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Untyped != nil:
				v += m.GetUntyped().GetValue()
			case m.Histogram != nil:
				v += float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				v += float64(m.GetSummary().GetSampleCount())
			}
		}
		out[name] = v
	}
	return out, nil
}
