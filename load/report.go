package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run: what was measured and whether the server
// behaved correctly. It encodes as the --json output.
type Report struct {
	Scenario string `json:"scenario"`
	// Server is the nodes' base URLs, comma-separated, as --server takes
	// them; Nodes has each one's figures.
	Server   string    `json:"server"`
	RunID    string    `json:"run_id"`
	Started  time.Time `json:"started"`
	Seed     uint64    `json:"seed"`
	Settings Settings  `json:"settings"`
	// Layout is which CPUs the server and the load generator ran on.
	Layout Layout `json:"layout"`

	Phases     []PhaseReport `json:"phases"`
	Comparison *Comparison   `json:"comparison,omitempty"`
	Abuser     *AbuserReport `json:"abuser,omitempty"`
	// Memory is the deployment's: with several nodes, the sums over them
	// (each node's own, checked against its own budget, is in Nodes).
	Memory MemoryReport `json:"memory"`
	// Nodes is what each node the run loaded saw, in --server order; admin
	// calls went to the first.
	Nodes []NodeReport `json:"nodes"`
	// Accounting compares the honest tenants' usage with what they stored
	// (nil when the run was interrupted).
	Accounting *AccountingReport `json:"accounting,omitempty"`
	// Timeline is the latency over time of each class of requests.
	Timeline []Series `json:"timeline"`
	// GeneratorSharesCPUs says whether the load generator ran on the
	// server's host and so shared its CPUs: "yes" (the figures include the
	// generator's own CPU use), "no", or "unknown" (sharesHost).
	GeneratorSharesCPUs string `json:"generator_shares_server_cpus,omitempty"`

	// Failures counts correctness failures by kind; any makes OK false.
	Failures        map[string]int `json:"failures"`
	FailureMessages []string       `json:"failure_messages,omitempty"`
	Notes           []string       `json:"notes,omitempty"`
	Interrupted     bool           `json:"interrupted,omitempty"`
	OK              bool           `json:"ok"`
}

// NodeReport is one node of the deployment the run loaded.
type NodeReport struct {
	URL        string `json:"url"`
	MetricsURL string `json:"metrics_url"`
	// CPUs is what the node reports it runs on, "" when it does not.
	CPUs   string       `json:"cpus,omitempty"`
	Memory MemoryReport `json:"memory"`
	Phases []NodePhase  `json:"phases"`
}

// NodePhase is what one node got in one phase.
type NodePhase struct {
	Name   string       `json:"name"`
	Honest NodeTraffic  `json:"honest"`
	Abuser *NodeTraffic `json:"abuser,omitempty"`
}

// NodeTraffic counts one class's requests to one node.
type NodeTraffic struct {
	Requests int `json:"requests"`
	// Admitted counts answers past the node's rate limits and in-flight
	// cap (any status but 429; transport errors are neither).
	Admitted          int     `json:"admitted"`
	AdmittedPerSecond float64 `json:"admitted_per_second"`
	RateLimited       int     `json:"rate_limited"`
}

// AccountingReport is the check that a tenant's stored bytes are one
// account over all nodes: each honest tenant's usage, read back through one
// node, against the xorbs the run stored for it through every node.
type AccountingReport struct {
	Tenants int `json:"tenants"`
	Checked int `json:"checked"`
	// StoredBytes is what the run knows it stored; UnsureBytes what it
	// may or may not have (answers lost, files not registered).
	StoredBytes int64 `json:"stored_bytes"`
	UnsureBytes int64 `json:"unsure_bytes"`
	UsageBytes  int64 `json:"usage_bytes"`
	Mismatches  int   `json:"mismatches"`
}

// Settings is the shape of the load that ran.
type Settings struct {
	Tenants              int     `json:"tenants"`
	CredentialsPerTenant int     `json:"credentials_per_tenant"`
	PhaseSeconds         float64 `json:"phase_seconds"`
	ThinkMinMs           float64 `json:"think_min_ms"`
	ThinkMaxMs           float64 `json:"think_max_ms"`
	XorbMinBytes         int64   `json:"xorb_min_bytes"`
	XorbMaxBytes         int64   `json:"xorb_max_bytes"`
	RSSOverheadBytes     int64   `json:"rss_overhead_bytes"`

	FloodRate          float64 `json:"flood_rate,omitempty"`
	Readers            int     `json:"readers,omitempty"`
	BigXorbBytes       int64   `json:"big_xorb_bytes,omitempty"`
	ReadBytesPerSecond int64   `json:"read_bytes_per_second,omitempty"`
	QuotaRate          float64 `json:"quota_rate,omitempty"`
	SprayRate          float64 `json:"spray_rate,omitempty"`
}

// PhaseReport is one measured phase.
type PhaseReport struct {
	Name            string             `json:"name"`
	StartSeconds    float64            `json:"start_s"`
	DurationSeconds float64            `json:"duration_s"`
	Honest          ClassReport        `json:"honest"`
	Abuser          *ClassReport       `json:"abuser,omitempty"`
	Tenants         []TenantThroughput `json:"tenants"`
	// JainOps and JainBytes are Jain's fairness index over the honest
	// tenants' operations per second and bytes per second.
	JainOps   float64 `json:"jain_ops"`
	JainBytes float64 `json:"jain_bytes"`
	// SecondHalfHonestP99ms is the honest p99 over the second half of the
	// phase, past any transient of its start.
	SecondHalfHonestP99ms float64 `json:"second_half_honest_p99_ms"`
	// LoadLag is how long the load generator's goroutines waited,
	// runnable, for a CPU in the phase (runtime/metrics
	// /sched/latencies:seconds, to the histogram's bucket). Every latency
	// the run measured includes such waits, several per request; a p99
	// near the honest p99 means the figures measure the load generator
	// more than the server.
	LoadLag LatencySummary `json:"load_lag"`
	// ServerLag is the same for the server's goroutines, from its
	// go_sched_latencies_seconds histogram (coarse buckets: each
	// percentile is a bucket's upper bound), and ServerLagMeanMs the mean
	// wait; nil when the server does not export it. On a server pinned to
	// one CPU, a request waits its turn like this at every step.
	ServerLag       *LatencySummary `json:"server_lag,omitempty"`
	ServerLagMeanMs float64         `json:"server_lag_mean_ms,omitempty"`
	// ServerCPUSeconds is the CPU time the server process (the first node)
	// spent in the phase, user and system, from its
	// process_cpu_seconds_total; ServerBusy is that over the phase's
	// length: the share of one CPU it kept busy. Both 0 when the server
	// does not export it. On a server pinned to one CPU, every request
	// queues behind that share.
	ServerCPUSeconds float64 `json:"server_cpu_s,omitempty"`
	ServerBusy       float64 `json:"server_busy,omitempty"`
	// LoadCPUSeconds and LoadBusy are the same for the load process itself
	// (the abuser's own process not included): a generator that keeps its
	// CPUs busy makes its answers wait for it, as LoadLag shows.
	LoadCPUSeconds float64 `json:"load_cpu_s,omitempty"`
	LoadBusy       float64 `json:"load_busy,omitempty"`
	// ServerTurns is how many requests of busy tenants (more than the
	// server's turns_above_in_flight in progress) waited for a turn on the
	// server (the first node) in the phase, from its openxet_turns_total;
	// nil when the server does not export it.
	ServerTurns *int64 `json:"server_turns,omitempty"`
}

// ClassReport is what one class of requests (honest or abuser) got in a
// phase.
type ClassReport struct {
	Requests int `json:"requests"`
	// Ops and FailedOps count honest operations (upload, download, dedup).
	Ops            int            `json:"ops,omitempty"`
	FailedOps      int            `json:"failed_ops,omitempty"`
	OpsPerSecond   float64        `json:"ops_per_second,omitempty"`
	BytesPerSecond float64        `json:"bytes_per_second"`
	Latency        LatencySummary `json:"latency"`
	// ServerLatency is the server's own time for the same requests, as
	// their answers' Server-Timing header said it: from a request's arrival
	// to its answer's header. Latency minus it is time spent outside the
	// server's handler: the network, the server's and the client's
	// schedulers, the client itself. Count 0: the server sent no timing.
	ServerLatency LatencySummary `json:"server_latency"`
	// QueueLatency is how long the same requests waited between their
	// send and their arrival in the server (Server-Timing's queue, from the
	// X-Request-Start header the load sends): the client writing the
	// request, the network, and the wait until the server read it. It
	// needs the two clocks to agree, as on one host. AfterLatency is, per
	// request, what Latency has beyond that wait and ServerLatency: the
	// rest of the answer (a fetch's body), its way back, and the client
	// getting to it. Count 0: the server sent no queue time.
	QueueLatency LatencySummary `json:"queue_latency"`
	AfterLatency LatencySummary `json:"after_latency"`
	// ServerStages is the server's time in each stage of the requests
	// that went through it (Server-Timing metrics other than the total:
	// auth, work_wait, memory_wait, body, validate, index, write, open).
	ServerStages map[string]LatencySummary `json:"server_stages,omitempty"`
	Routes       []RouteReport             `json:"routes"`
	// Statuses counts answers by HTTP status ("0" = transport error).
	Statuses map[string]int `json:"statuses"`
	// Refusals counts answers of 400 and up, but 404, by "status code".
	Refusals map[string]int `json:"refusals"`
}

// RouteReport is the latency and answers of one route.
type RouteReport struct {
	Route         string         `json:"route"`
	Latency       LatencySummary `json:"latency"`
	ServerLatency LatencySummary `json:"server_latency"`
	Statuses      map[string]int `json:"statuses"`
	Refusals      map[string]int `json:"refusals,omitempty"`
}

// TenantThroughput is one honest tenant's completed work in a phase.
type TenantThroughput struct {
	Tenant         string  `json:"tenant"`
	Ops            int     `json:"ops"`
	OpsPerSecond   float64 `json:"ops_per_second"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

// Comparison sets the honest tenants' figures beside the abuser against
// their figures alone (abuse / baseline).
type Comparison struct {
	BaselineP99ms float64 `json:"baseline_p99_ms"`
	AbuseP99ms    float64 `json:"abuse_p99_ms"`
	P99Ratio      float64 `json:"p99_ratio"`
	// The same p99 as the server measured it (ClassReport.ServerLatency);
	// 0 when it sent no timing.
	BaselineServerP99ms float64 `json:"baseline_server_p99_ms"`
	AbuseServerP99ms    float64 `json:"abuse_server_p99_ms"`
	ServerP99Ratio      float64 `json:"server_p99_ratio"`
	// The p99 of the wait before the server read a request, and of what
	// came after its answer's header (ClassReport.QueueLatency and
	// AfterLatency); 0 when the server sent no queue time.
	BaselineQueueP99ms float64           `json:"baseline_queue_p99_ms"`
	AbuseQueueP99ms    float64           `json:"abuse_queue_p99_ms"`
	QueueP99Ratio      float64           `json:"queue_p99_ratio"`
	BaselineAfterP99ms float64           `json:"baseline_after_p99_ms"`
	AbuseAfterP99ms    float64           `json:"abuse_after_p99_ms"`
	AfterP99Ratio      float64           `json:"after_p99_ratio"`
	BaselineOpsPerS    float64           `json:"baseline_ops_per_second"`
	AbuseOpsPerS       float64           `json:"abuse_ops_per_second"`
	ThroughputRatio    float64           `json:"throughput_ratio"`
	BaselineBytesPS    float64           `json:"baseline_bytes_per_second"`
	AbuseBytesPS       float64           `json:"abuse_bytes_per_second"`
	BytesRatio         float64           `json:"bytes_ratio"`
	Routes             []RouteComparison `json:"routes"`
	// The same p99 over the second half of each phase only.
	BaselineSecondHalfP99ms float64 `json:"baseline_second_half_p99_ms"`
	AbuseSecondHalfP99ms    float64 `json:"abuse_second_half_p99_ms"`
	SecondHalfP99Ratio      float64 `json:"second_half_p99_ratio"`
	BaselineJainOps         float64 `json:"baseline_jain_ops"`
	AbuseJainOps            float64 `json:"abuse_jain_ops"`
	BaselineRequests        int     `json:"baseline_requests"`
	AbuseRequests           int     `json:"abuse_requests"`
}

// RouteComparison is one route's honest p99 in both phases.
type RouteComparison struct {
	Route               string  `json:"route"`
	BaselineP99ms       float64 `json:"baseline_p99_ms"`
	AbuseP99ms          float64 `json:"abuse_p99_ms"`
	Ratio               float64 `json:"ratio"`
	BaselineServerP99ms float64 `json:"baseline_server_p99_ms"`
	AbuseServerP99ms    float64 `json:"abuse_server_p99_ms"`
}

// AbuserReport is what the abuser did and got.
type AbuserReport struct {
	Tenant string `json:"tenant"`
	// Refusals counts the abuser's refusals by "status code", all attacks.
	Refusals map[string]int `json:"refusals"`
	Attacks  []AttackReport `json:"attacks"`
	// Flood and Spray are over all nodes: each node's allowance summed
	// (N nodes admit up to N times one node's limit). The check is per
	// node, in Nodes.
	Flood EnvelopeReport     `json:"flood"`
	Spray *EnvelopeReport    `json:"spray,omitempty"`
	Nodes []AbuserNodeReport `json:"nodes"`
	// Hold reads: how many were open at once at most, and bytes consumed.
	HeldPeak   int64 `json:"held_peak"`
	HeldBytes  int64 `json:"held_bytes"`
	QuotaBytes int64 `json:"quota_bytes"`
	UsageBytes int64 `json:"usage_bytes"`
	// QuotaStored counts quota uploads the server accepted as new.
	QuotaStored int64 `json:"quota_stored"`
	// QuotaInFlightPeak is the most quota uploads in flight at once over
	// all nodes; with several nodes the usage may pass the quota by that
	// many xorbs (QuotaOvershootAllowedBytes, docs/design.md §13), with one
	// by nothing.
	QuotaInFlightPeak          int64 `json:"quota_in_flight_peak"`
	QuotaOvershootAllowedBytes int64 `json:"quota_overshoot_allowed_bytes"`
}

// AbuserNodeReport is what one node let through of the abuser's attacks,
// each checked against that node's own limit.
type AbuserNodeReport struct {
	Node  string          `json:"node"`
	Flood EnvelopeReport  `json:"flood"`
	Spray *EnvelopeReport `json:"spray,omitempty"`
	// HoldReaders is how many held-read workers read from this node;
	// HoldOpenPeak the most of their reads open at once, counted from
	// before sending to after closing (at least what the node counted);
	// InFlightLimit the node's max_in_flight_per_credential for the
	// abuser; InFlightRefusals the held reads it refused for it.
	HoldReaders      int   `json:"hold_readers"`
	HoldOpenPeak     int64 `json:"hold_open_peak"`
	InFlightLimit    int   `json:"in_flight_limit"`
	InFlightRefusals int   `json:"in_flight_refusals"`
	// OverrideSeconds is how long after the abuser's credential limit was
	// set the node was first seen enforcing it (absent: not probed).
	OverrideSeconds *float64 `json:"override_seconds,omitempty"`
}

// AttackReport is one attack's answers.
type AttackReport struct {
	Attack   string         `json:"attack"`
	Requests int            `json:"requests"`
	Statuses map[string]int `json:"statuses"`
	Refusals map[string]int `json:"refusals"`
}

// EnvelopeReport checks a rate limit's envelope: requests that got past it
// in a window of Seconds must be at most Allowed = burst + rate·Seconds.
// Offered counts every answered request of the attack, admitted or not:
// when it is over Allowed, the limit must have refused some; when it is
// not, the limit was never put to the test.
type EnvelopeReport struct {
	Limit    string  `json:"limit"`
	Seconds  float64 `json:"seconds"`
	Offered  int64   `json:"offered"`
	Admitted int64   `json:"admitted"`
	Allowed  int64   `json:"allowed"`
}

// MemoryReport is the server's memory over the run.
type MemoryReport struct {
	Measured          bool        `json:"measured"`
	BudgetBytes       int64       `json:"budget_bytes"`
	OverheadBytes     int64       `json:"overhead_bytes"`
	LimitBytes        int64       `json:"limit_bytes"`
	PeakRSSBytes      int64       `json:"peak_rss_bytes"`
	PeakReservedBytes int64       `json:"peak_reserved_bytes"`
	Samples           []MemSample `json:"samples"`
}

// MemSample is one scrape of the server's metrics.
type MemSample struct {
	AtSeconds     float64 `json:"at_s"`
	RSSBytes      int64   `json:"rss_bytes"`
	ReservedBytes int64   `json:"reserved_bytes"`
	BudgetBytes   int64   `json:"budget_bytes"`
}

// Series is the latency over time of one class.
type Series struct {
	Class   string       `json:"class"`
	Buckets []TimeBucket `json:"buckets"`
}

// phaseSpan is a measured phase: [start, end) since the run began.
type phaseSpan struct {
	name       string
	start, end time.Duration
}

func (p phaseSpan) has(t time.Duration) bool { return t >= p.start && t < p.end }

// classReport summarizes the requests (and, for honest, operations) of
// one class in one phase.
func classReport(class string, p phaseSpan, reqs []reqRecord, ops []opRecord, routes []string) ClassReport {
	secs := (p.end - p.start).Seconds()
	cr := ClassReport{Statuses: map[string]int{}, Refusals: map[string]int{}}
	var all, srvAll, queueAll, afterAll []time.Duration
	byRoute, srvByRoute, stages := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	rr := map[string]*RouteReport{}
	var bytes int64
	for _, r := range reqs {
		if r.class != class || !p.has(r.start) {
			continue
		}
		cr.Requests++
		st := strconv.Itoa(int(r.status))
		cr.Statuses[st]++
		x := rr[r.route]
		if x == nil {
			x = &RouteReport{Route: r.route, Statuses: map[string]int{}, Refusals: map[string]int{}}
			rr[r.route] = x
		}
		x.Statuses[st]++
		if isRefusalStatus(int(r.status)) {
			k := st + " " + r.code
			cr.Refusals[k]++
			x.Refusals[k]++
		}
		if r.status != 0 {
			all = append(all, r.dur)
			byRoute[r.route] = append(byRoute[r.route], r.dur)
		}
		if st, ok := parseServerTiming(r.timing); ok && r.status != 0 {
			for name, d := range st {
				switch name {
				case serverTotal:
					srvAll = append(srvAll, d)
					srvByRoute[r.route] = append(srvByRoute[r.route], d)
				case serverQueue:
					queueAll = append(queueAll, d)
				default:
					stages[name] = append(stages[name], d)
				}
			}
			total, hasTotal := st[serverTotal]
			if queue, hasQueue := st[serverQueue]; hasTotal && hasQueue {
				afterAll = append(afterAll, max(r.dur-queue-total, 0))
			}
		}
		if class != classHonest {
			bytes += r.bytes
		}
	}
	for _, o := range ops {
		if !p.has(o.start) {
			continue
		}
		cr.Ops++
		if !o.ok {
			cr.FailedOps++
		}
		bytes += o.bytes
	}
	cr.Latency = Summarize(all)
	cr.ServerLatency = Summarize(srvAll)
	cr.QueueLatency = Summarize(queueAll)
	cr.AfterLatency = Summarize(afterAll)
	for name, ds := range stages {
		if cr.ServerStages == nil {
			cr.ServerStages = map[string]LatencySummary{}
		}
		cr.ServerStages[name] = Summarize(ds)
	}
	if secs > 0 {
		cr.OpsPerSecond = float64(cr.Ops-cr.FailedOps) / secs
		cr.BytesPerSecond = float64(bytes) / secs
	}
	for _, name := range routes {
		if x := rr[name]; x != nil {
			x.Latency = Summarize(byRoute[name])
			x.ServerLatency = Summarize(srvByRoute[name])
			if len(x.Refusals) == 0 {
				x.Refusals = nil
			}
			cr.Routes = append(cr.Routes, *x)
		}
	}
	return cr
}

// tenantThroughput is each honest tenant's completed operations in a phase.
func tenantThroughput(names []string, p phaseSpan, ops []opRecord) []TenantThroughput {
	secs := (p.end - p.start).Seconds()
	out := make([]TenantThroughput, len(names))
	bytes := make([]int64, len(names))
	for i, n := range names {
		out[i].Tenant = n
	}
	for _, o := range ops {
		if !p.has(o.start) || !o.ok || o.tenant < 0 || int(o.tenant) >= len(names) {
			continue
		}
		out[o.tenant].Ops++
		bytes[o.tenant] += o.bytes
	}
	if secs > 0 {
		for i := range out {
			out[i].OpsPerSecond = float64(out[i].Ops) / secs
			out[i].BytesPerSecond = float64(bytes[i]) / secs
		}
	}
	return out
}

func jainOf(ts []TenantThroughput) (ops, bytes float64) {
	o := make([]float64, len(ts))
	b := make([]float64, len(ts))
	for i, t := range ts {
		o[i], b[i] = t.OpsPerSecond, t.BytesPerSecond
	}
	return Jain(o), Jain(b)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// compare builds the abuse-versus-baseline comparison of honest figures.
func compare(base, ab PhaseReport) *Comparison {
	c := &Comparison{
		BaselineP99ms: base.Honest.Latency.P99ms, AbuseP99ms: ab.Honest.Latency.P99ms,
		BaselineServerP99ms: base.Honest.ServerLatency.P99ms, AbuseServerP99ms: ab.Honest.ServerLatency.P99ms,
		BaselineQueueP99ms: base.Honest.QueueLatency.P99ms, AbuseQueueP99ms: ab.Honest.QueueLatency.P99ms,
		BaselineAfterP99ms: base.Honest.AfterLatency.P99ms, AbuseAfterP99ms: ab.Honest.AfterLatency.P99ms,
		BaselineOpsPerS: base.Honest.OpsPerSecond, AbuseOpsPerS: ab.Honest.OpsPerSecond,
		BaselineBytesPS: base.Honest.BytesPerSecond, AbuseBytesPS: ab.Honest.BytesPerSecond,
		BaselineJainOps: base.JainOps, AbuseJainOps: ab.JainOps,
		BaselineRequests: base.Honest.Requests, AbuseRequests: ab.Honest.Requests,
		BaselineSecondHalfP99ms: base.SecondHalfHonestP99ms, AbuseSecondHalfP99ms: ab.SecondHalfHonestP99ms,
	}
	c.SecondHalfP99Ratio = ratio(c.AbuseSecondHalfP99ms, c.BaselineSecondHalfP99ms)
	c.P99Ratio = ratio(c.AbuseP99ms, c.BaselineP99ms)
	c.ServerP99Ratio = ratio(c.AbuseServerP99ms, c.BaselineServerP99ms)
	c.QueueP99Ratio = ratio(c.AbuseQueueP99ms, c.BaselineQueueP99ms)
	c.AfterP99Ratio = ratio(c.AbuseAfterP99ms, c.BaselineAfterP99ms)
	c.ThroughputRatio = ratio(c.AbuseOpsPerS, c.BaselineOpsPerS)
	c.BytesRatio = ratio(c.AbuseBytesPS, c.BaselineBytesPS)
	for _, r := range base.Honest.Routes {
		rc := RouteComparison{Route: r.Route, BaselineP99ms: r.Latency.P99ms, BaselineServerP99ms: r.ServerLatency.P99ms}
		for _, a := range ab.Honest.Routes {
			if a.Route == r.Route {
				rc.AbuseP99ms, rc.AbuseServerP99ms = a.Latency.P99ms, a.ServerLatency.P99ms
			}
		}
		rc.Ratio = ratio(rc.AbuseP99ms, rc.BaselineP99ms)
		c.Routes = append(c.Routes, rc)
	}
	return c
}

// timeline buckets each class's request latencies over the measured span.
func timeline(reqs []reqRecord, from, to time.Duration) []Series {
	w := bucketWidth(to - from)
	var out []Series
	for _, class := range []string{classHonest, classAbuser} {
		var s []Sample
		for _, r := range reqs {
			if r.class == class && r.status != 0 {
				s = append(s, Sample{At: r.start, Dur: r.dur})
			}
		}
		if len(s) > 0 {
			out = append(out, Series{Class: class, Buckets: Bucketize(s, from, to, w)})
		}
	}
	return out
}

// finish sets OK from the failures.
func (r *Report) finish() { r.OK = r.Failed() == 0 }

// Failed is the number of correctness failures.
func (r *Report) Failed() int {
	n := 0
	for _, v := range r.Failures {
		n += v
	}
	return n
}

// WriteText writes the report as readable tables.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	s := r.Settings
	if len(r.Nodes) > 1 {
		urls := make([]string, len(r.Nodes))
		for i, n := range r.Nodes {
			urls[i] = n.URL
		}
		fmt.Fprintf(&b, "openxet load: scenario %s against %d nodes: %s (run %s, seed %d; admin calls to the first)\n", r.Scenario, len(r.Nodes), strings.Join(urls, ", "), r.RunID, r.Seed)
	} else {
		fmt.Fprintf(&b, "openxet load: scenario %s against %s (run %s, seed %d)\n", r.Scenario, r.Server, r.RunID, r.Seed)
	}
	fmt.Fprintf(&b, "%d tenants × %d credentials, one operation per credential every %s–%s, xorbs %s–%s, %d phase(s) of %s\n",
		s.Tenants, s.CredentialsPerTenant, fmtMs(s.ThinkMinMs), fmtMs(s.ThinkMaxMs), fmtBytes(s.XorbMinBytes), fmtBytes(s.XorbMaxBytes),
		len(r.Phases), time.Duration(s.PhaseSeconds*float64(time.Second)).Round(100*time.Millisecond))
	fmt.Fprintf(&b, "layout: %s\n", r.Layout)
	if r.Abuser != nil {
		fmt.Fprintf(&b, "abuser %s: flood %.0f req/s, %d held reads of a %s xorb at %s/s each, quota uploads %.0f/s, bad tokens %.0f/s\n",
			r.Abuser.Tenant, s.FloodRate, s.Readers, fmtBytes(s.BigXorbBytes), fmtBytes(s.ReadBytesPerSecond), s.QuotaRate, s.SprayRate)
	}
	if line := r.sharedCPUsText(); line != "" {
		b.WriteString(line + "\n")
	}
	b.WriteString("\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tclass\trequests\tops/s\tMiB/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tserver p99 ms\t403/429/503\tJain\t")
	for _, p := range r.Phases {
		row := func(class string, c ClassReport, jain string) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\t%s\t\n", p.Name, class, c.Requests, opsCell(c), c.BytesPerSecond/(1<<20),
				c.Latency.P50ms, c.Latency.P95ms, c.Latency.P99ms, c.Latency.Maxms, serverCell(c.ServerLatency), refusedCount(c), jain)
		}
		row(classHonest, p.Honest, fmt.Sprintf("%.4f", p.JainOps))
		if p.Abuser != nil {
			row(classAbuser, *p.Abuser, "")
		}
	}
	tw.Flush()

	b.WriteString("\nhonest latency by route (ms, p50 / p95 / p99, and the server's own p99)\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "route\t"
	for _, p := range r.Phases {
		head += p.Name + "\tserver\trequests\t"
	}
	fmt.Fprintln(tw, head)
	for _, route := range honestRoutes {
		line := route + "\t"
		for _, p := range r.Phases {
			rr, ok := findRoute(p.Honest.Routes, route)
			if !ok {
				line += "-\t-\t0\t"
				continue
			}
			line += fmt.Sprintf("%.1f / %.1f / %.1f\t%s\t%d\t", rr.Latency.P50ms, rr.Latency.P95ms, rr.Latency.P99ms, serverCell(rr.ServerLatency), rr.Latency.Count)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()

	for _, p := range r.Phases {
		lo, hi := minMaxOps(p.Tenants)
		fmt.Fprintf(&b, "\n%s: %d tenants, ops/s per tenant min %.2f max %.2f, Jain's index %.4f (ops) %.4f (bytes)", p.Name, len(p.Tenants), lo, hi, p.JainOps, p.JainBytes)
		fmt.Fprintf(&b, "\n%s: the load generator's goroutines waited for a CPU p99 %.1f ms, max %.1f ms (several such waits are in every latency above)", p.Name, p.LoadLag.P99ms, p.LoadLag.Maxms)
		if p.LoadCPUSeconds > 0 {
			fmt.Fprintf(&b, "\n%s: the load generator used %.1f CPU seconds, %.0f %% of one CPU", p.Name, p.LoadCPUSeconds, 100*p.LoadBusy)
		}
		if l := p.ServerLag; l != nil {
			fmt.Fprintf(&b, "\n%s: the server's goroutines waited for a CPU %d times, mean %.2f ms, p99 under %.1f ms", p.Name, l.Count, p.ServerLagMeanMs, l.P99ms)
		}
		if p.ServerCPUSeconds > 0 {
			fmt.Fprintf(&b, "\n%s: the server used %.1f CPU seconds, %.0f %% of one CPU", p.Name, p.ServerCPUSeconds, 100*p.ServerBusy)
		}
		if p.ServerTurns != nil {
			fmt.Fprintf(&b, "\n%s: %d requests of busy tenants waited for a turn on the server (server.turns_above_in_flight)", p.Name, *p.ServerTurns)
		}
		if st := stagesText(p.Honest.ServerStages); st != "" {
			fmt.Fprintf(&b, "\n%s: honest requests' server stages, p99 ms: %s", p.Name, st)
		}
	}
	b.WriteString("\n")

	if c := r.Comparison; c != nil {
		fmt.Fprintf(&b, "\nhonest beside the abuser vs alone: p99 %.1f ms vs %.1f ms (×%.2f), throughput %.1f vs %.1f ops/s (×%.3f), %.2f vs %.2f MiB/s (×%.3f)\n",
			c.AbuseP99ms, c.BaselineP99ms, c.P99Ratio, c.AbuseOpsPerS, c.BaselineOpsPerS, c.ThroughputRatio, c.AbuseBytesPS/(1<<20), c.BaselineBytesPS/(1<<20), c.BytesRatio)
		if c.BaselineServerP99ms > 0 {
			fmt.Fprintf(&b, "  the server's own time (Server-Timing): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseServerP99ms, c.BaselineServerP99ms, c.ServerP99Ratio)
		}
		if c.BaselineQueueP99ms > 0 {
			fmt.Fprintf(&b, "  the wait before the server read the request (queue): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseQueueP99ms, c.BaselineQueueP99ms, c.QueueP99Ratio)
			fmt.Fprintf(&b, "  after the answer's header (its rest, the way back, the client): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseAfterP99ms, c.BaselineAfterP99ms, c.AfterP99Ratio)
		}
		for _, rc := range c.Routes {
			fmt.Fprintf(&b, "  %-15s p99 %8.1f ms vs %8.1f ms (×%.2f); server %s vs %s ms\n", rc.Route, rc.AbuseP99ms, rc.BaselineP99ms, rc.Ratio,
				fmtServerMs(rc.AbuseServerP99ms), fmtServerMs(rc.BaselineServerP99ms))
		}
		fmt.Fprintf(&b, "  second half of each phase only: p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseSecondHalfP99ms, c.BaselineSecondHalfP99ms, c.SecondHalfP99Ratio)
	}
	if a := r.Abuser; a != nil {
		fmt.Fprintf(&b, "\nabuser refusals (all attacks): %s\n", fmtCounts(a.Refusals))
		for _, at := range a.Attacks {
			fmt.Fprintf(&b, "  %-13s %7d requests; statuses %s\n", at.Attack, at.Requests, fmtCounts(at.Statuses))
			if len(at.Refusals) > 0 {
				fmt.Fprintf(&b, "  %-13s refusals %s\n", "", fmtCounts(at.Refusals))
			}
		}
		all := ""
		if len(a.Nodes) > 1 {
			all = fmt.Sprintf(" over %d nodes (%d × one node's)", len(a.Nodes), len(a.Nodes))
		}
		fmt.Fprintf(&b, "  flood admitted %d of %d in %.1fs, the credential limit allows %d%s\n", a.Flood.Admitted, a.Flood.Offered, a.Flood.Seconds, a.Flood.Allowed, all)
		if a.Spray != nil {
			fmt.Fprintf(&b, "  bad tokens checked %d of %d in %.1fs, the auth-failure limit allows %d%s\n", a.Spray.Admitted, a.Spray.Offered, a.Spray.Seconds, a.Spray.Allowed, all)
		}
		if len(a.Nodes) > 1 {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "  node\tflood admitted/offered\tallowed\tbad tokens checked/sent\tallowed\treaders\topen peak\tin-flight cap\trefused\toverride seen after\t")
			for _, n := range a.Nodes {
				spray, sprayAllowed := "-", "-"
				if n.Spray != nil {
					spray, sprayAllowed = fmt.Sprintf("%d/%d", n.Spray.Admitted, n.Spray.Offered), fmt.Sprint(n.Spray.Allowed)
				}
				seen := "-"
				if n.OverrideSeconds != nil {
					seen = fmt.Sprintf("%.2fs", *n.OverrideSeconds)
				}
				fmt.Fprintf(tw, "  %s\t%d/%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", n.Node, n.Flood.Admitted, n.Flood.Offered, n.Flood.Allowed,
					spray, sprayAllowed, n.HoldReaders, n.HoldOpenPeak, n.InFlightLimit, n.InFlightRefusals, seen)
			}
			tw.Flush()
		}
		fmt.Fprintf(&b, "  held reads open at once: %d (read %s); quota %s, usage %s, quota uploads stored %d",
			a.HeldPeak, fmtBytes(a.HeldBytes), fmtBytes(a.QuotaBytes), fmtBytes(a.UsageBytes), a.QuotaStored)
		if len(a.Nodes) > 1 {
			fmt.Fprintf(&b, " (global; at most %d in flight at once, so up to %s over it is allowed)", a.QuotaInFlightPeak, fmtBytes(a.QuotaOvershootAllowedBytes))
		}
		b.WriteString("\n")
	}
	if ac := r.Accounting; ac != nil {
		fmt.Fprintf(&b, "\nhonest usage: %d of %d tenants read back, %s stored (+%s unsure), %s counted, %d mismatches\n",
			ac.Checked, ac.Tenants, fmtBytes(ac.StoredBytes), fmtBytes(ac.UnsureBytes), fmtBytes(ac.UsageBytes), ac.Mismatches)
	}
	if len(r.Nodes) > 1 {
		b.WriteString("\nper node (rate limits, in-flight caps and memory budgets are per node; quotas are global)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "node\tphase\thonest requests\tadmitted/s\t429\tabuser requests\tadmitted/s\t429\t")
		for _, n := range r.Nodes {
			for _, p := range n.Phases {
				abr, abs, ab429 := "-", "-", "-"
				if p.Abuser != nil {
					abr, abs, ab429 = fmt.Sprint(p.Abuser.Requests), fmt.Sprintf("%.1f", p.Abuser.AdmittedPerSecond), fmt.Sprint(p.Abuser.RateLimited)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%d\t%s\t%s\t%s\t\n", n.URL, p.Name, p.Honest.Requests, p.Honest.AdmittedPerSecond, p.Honest.RateLimited, abr, abs, ab429)
			}
		}
		tw.Flush()
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "node\tCPUs\tpeak RSS\tbudget\tlimit\tpeak reserved\t")
		for _, n := range append(slices.Clone(r.Nodes), NodeReport{URL: "all nodes", CPUs: r.Layout.ServerCPUs, Memory: r.Memory}) {
			m := n.Memory
			if !m.Measured {
				fmt.Fprintf(tw, "%s\t%s\tnot measured\t\t\t\t\n", n.URL, n.CPUs)
				continue
			}
			limit := "no check"
			if m.OverheadBytes >= 0 {
				limit = fmtBytes(m.LimitBytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", n.URL, n.CPUs, fmtBytes(m.PeakRSSBytes), fmtBytes(m.BudgetBytes), limit, fmtBytes(m.PeakReservedBytes))
		}
		tw.Flush()
	}
	m := r.Memory
	what := "server memory"
	if len(r.Nodes) > 1 {
		what = fmt.Sprintf("memory of the %d nodes together", len(r.Nodes))
	}
	if m.Measured {
		fmt.Fprintf(&b, "\n%s: peak RSS %s, budget %s, %s; peak reserved %s (%.0f%% of budget)\n",
			what, fmtBytes(m.PeakRSSBytes), fmtBytes(m.BudgetBytes), m.limitText(), fmtBytes(m.PeakReservedBytes),
			100*float64(m.PeakReservedBytes)/max(float64(m.BudgetBytes), 1))
	} else {
		fmt.Fprintf(&b, "\n%s: not measured\n", what)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Interrupted {
		b.WriteString("note: the run was interrupted; figures cover what ran\n")
	}
	if r.OK {
		b.WriteString("\nresult: OK (no honest request refused, every downloaded byte matched)\n")
	} else {
		fmt.Fprintf(&b, "\nresult: FAIL (%d correctness failures)\n", r.Failed())
		for _, k := range slices.Sorted(maps.Keys(r.Failures)) {
			fmt.Fprintf(&b, "  %6d  %s\n", r.Failures[k], k)
		}
		for _, msg := range r.FailureMessages {
			fmt.Fprintf(&b, "  - %s\n", msg)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// isRefusalStatus reports whether an answer refused the request: 4xx and
// 5xx except 404, which answers a question (no such chunk, file).
func isRefusalStatus(s int) bool { return s >= 400 && s != 404 }

func opsCell(c ClassReport) string {
	if c.Ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", c.OpsPerSecond)
}

func refusedCount(c ClassReport) int {
	n := 0
	for k, v := range c.Refusals {
		if strings.HasPrefix(k, "403 ") || strings.HasPrefix(k, "429 ") || strings.HasPrefix(k, "503 ") {
			n += v
		}
	}
	return n
}

func findRoute(rs []RouteReport, name string) (RouteReport, bool) {
	for _, r := range rs {
		if r.Route == name {
			return r, true
		}
	}
	return RouteReport{}, false
}

func minMaxOps(ts []TenantThroughput) (lo, hi float64) {
	for i, t := range ts {
		if i == 0 || t.OpsPerSecond < lo {
			lo = t.OpsPerSecond
		}
		hi = max(hi, t.OpsPerSecond)
	}
	return lo, hi
}

// fmtCounts prints counts largest first: "429 rate_limited/credential 123, …".
func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// limitText says what the RSS was checked against.
// sharedCPUsText says whether the generator shared the server's CPUs, or
// "" when the report does not know (it predates the field).
func (r *Report) sharedCPUsText() string {
	why := map[string]string{
		sharedYes:     "the server is on this host; latency and throughput include the generator's own CPU use",
		sharedNo:      "the server is on another host",
		sharedUnknown: "the server's address could not be matched to this host or another",
	}[r.GeneratorSharesCPUs]
	if why == "" {
		return ""
	}
	return fmt.Sprintf("load generator shares the server's host CPUs: %s (%s)", r.GeneratorSharesCPUs, why)
}

func (m MemoryReport) limitText() string {
	if m.OverheadBytes < 0 {
		return "no RSS check"
	}
	return fmt.Sprintf("limit %s (budget + %s overhead)", fmtBytes(m.LimitBytes), fmtBytes(m.OverheadBytes))
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func fmtMs(v float64) string {
	return time.Duration(v * float64(time.Millisecond)).String()
}

// serverCell is a server-side p99 for a table, "-" when the server sent
// no timing.
func serverCell(l LatencySummary) string {
	if l.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", l.P99ms)
}

func fmtServerMs(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// stagesText lists each server stage's p99 in the order a request goes
// through them ("auth 0.1, work_wait 0.0, …"), unknown stages last.
func stagesText(st map[string]LatencySummary) string {
	order := []string{"auth", "work_wait", "memory_wait", "body", "validate", "index", "write", "open"}
	var parts []string
	for _, name := range order {
		if l, ok := st[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, l.P99ms))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st)) {
		if !slices.Contains(order, name) {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, st[name].P99ms))
		}
	}
	return strings.Join(parts, ", ")
}
