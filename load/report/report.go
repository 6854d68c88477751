package report

import (
	"fmt"
	"time"
)

// The classes of requests (Series.Class, the rows of the phase tables).
const (
	ClassHonest = "honest"
	ClassAbuser = "abuser"
)

// HonestRoutes are the honest tenants' routes, in the order the route
// tables list them (a route without requests still has its row).
var HonestRoutes = []string{"xorb", "shard", "reconstruction", "fetch", "dedup"}

// The values of Report.GeneratorSharesCPUs.
const (
	SharedYes     = "yes"
	SharedNo      = "no"
	SharedUnknown = "unknown"
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
	// Public is the public scenario's readers (nil in the others).
	Public *PublicReport `json:"public,omitempty"`
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
	// generator's own CPU use), "no", or "unknown".
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
	// HostSteal is the share of the host's CPU time (all its CPUs) that
	// the hypervisor gave to other guests during the phase (Linux's
	// /proc/stat steal); nil where it cannot be read. On a shared VM a
	// phase with a high steal measured the host more than the server.
	HostSteal *float64 `json:"host_steal,omitempty"`
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

// LatencySummary is the latency distribution of a set of requests, in
// milliseconds.
type LatencySummary struct {
	Count int     `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"max_ms"`
}

// TimeBucket is the latency of the samples that started in one slice of time
// [AtSeconds, AtSeconds+width).
type TimeBucket struct {
	AtSeconds float64 `json:"at_s"`
	Count     int     `json:"count"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
}

// Layout is which CPUs the server and the load generator ran on, as the
// report states it: a run whose load generator shares the server's CPUs
// measures the load's own CPU use along with the server's.
type Layout struct {
	// ServerCPUs is what the server reported (metric openxet_process_cpus),
	// "" when it did not.
	ServerCPUs string `json:"server_cpus"`
	// LoadCPUs is where the load generator ran, "" when unknown.
	LoadCPUs string `json:"load_cpus"`
	// Pinned reports that both are known and share no CPU.
	Pinned bool `json:"pinned"`
	// Abuser says where the abuse scenario's abuser ran: in the load
	// process, or in its own (with its CPU priority and CPUs); "" in other
	// scenarios.
	Abuser string `json:"abuser,omitempty"`
}

// String is the layout in one line for the text report.
func (l Layout) String() string {
	at := func(cpus string) string {
		if cpus == "" {
			return "unknown CPUs"
		}
		return "CPUs " + cpus
	}
	s := fmt.Sprintf("server on %s, load on %s", at(l.ServerCPUs), at(l.LoadCPUs))
	if l.Pinned {
		s += " (pinned apart)"
	} else {
		s += " (not pinned apart: the load generator's and the abuser's own CPU use is part of what the server's tenants feel)"
	}
	if l.Abuser != "" {
		s += "; abuser " + l.Abuser
	}
	return s
}

// Finish sets OK from the failures.
func (r *Report) Finish() { r.OK = r.Failed() == 0 }

// Failed is the number of correctness failures.
func (r *Report) Failed() int {
	n := 0
	for _, v := range r.Failures {
		n += v
	}
	return n
}

// PublicReport is what the public scenario's readers got: Readers
// clients, each from its own address, downloading one public file of
// FileBytes bytes again and again, without a token (phase public) and then
// with one tenant's token (phase token), beside the honest tenants.
type PublicReport struct {
	Readers   int           `json:"readers"`
	FileBytes int64         `json:"file_bytes"`
	Phases    []PublicPhase `json:"phases"`
	// The honest p99 alone (baseline) and its ratio in phase public.
	BaselineHonestP99ms float64 `json:"baseline_honest_p99_ms"`
	HonestP99Ratio      float64 `json:"honest_p99_ratio"`
	// AnonymousVsTokenRatio is the readers' bytes per second without a
	// token over the same with one (0 when either is unknown).
	AnonymousVsTokenRatio float64 `json:"anonymous_vs_token_ratio"`
}

// PublicPhase is the readers' figures in one phase.
type PublicPhase struct {
	Name           string         `json:"name"`
	Downloads      int64          `json:"downloads"` // whole files
	Bytes          int64          `json:"bytes"`
	BytesPerSecond float64        `json:"bytes_per_second"`
	Refusals       map[string]int `json:"refusals"` // by "status X-Error-Code"
	Errors         int            `json:"errors"`
	HonestP99ms    float64        `json:"honest_p99_ms"`
	// ServerCPUSeconds is the server's CPU in the phase; per GiB, what it
	// spent beyond the baseline's rate for each GiB the readers got.
	ServerCPUSeconds       float64 `json:"server_cpu_seconds"`
	ServerCPUSecondsPerGiB float64 `json:"server_cpu_seconds_per_gib"`
}
