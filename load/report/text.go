package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report as readable tables, section by section.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, section := range []func(*strings.Builder){
		r.textHeader, r.textPhases, r.textRoutes, r.textPhaseLines, r.textComparison, r.textAbuser, r.textPublic, r.textAccounting, r.textNodes, r.textMemory, r.textResult,
	} {
		section(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// textHeader writes the header: the run, its settings, the layout.
func (r *Report) textHeader(b *strings.Builder) {
	s := r.Settings
	if len(r.Nodes) > 1 {
		urls := make([]string, len(r.Nodes))
		for i, n := range r.Nodes {
			urls[i] = n.URL
		}
		fmt.Fprintf(b, "openxet load: scenario %s against %d nodes: %s (run %s, seed %d; admin calls to the first)\n", r.Scenario, len(r.Nodes), strings.Join(urls, ", "), r.RunID, r.Seed)
	} else {
		fmt.Fprintf(b, "openxet load: scenario %s against %s (run %s, seed %d)\n", r.Scenario, r.Server, r.RunID, r.Seed)
	}
	fmt.Fprintf(b, "%d tenants × %d credentials, one operation per credential every %s–%s, xorbs %s–%s, %d phase(s) of %s\n",
		s.Tenants, s.CredentialsPerTenant, fmtMs(s.ThinkMinMs), fmtMs(s.ThinkMaxMs), FormatBytes(s.XorbMinBytes), FormatBytes(s.XorbMaxBytes),
		len(r.Phases), time.Duration(s.PhaseSeconds*float64(time.Second)).Round(100*time.Millisecond))
	fmt.Fprintf(b, "layout: %s\n", r.Layout)
	if r.Abuser != nil {
		fmt.Fprintf(b, "abuser %s: flood %.0f req/s, %d held reads of a %s xorb at %s/s each, quota uploads %.0f/s, bad tokens %.0f/s\n",
			r.Abuser.Tenant, s.FloodRate, s.Readers, FormatBytes(s.BigXorbBytes), FormatBytes(s.ReadBytesPerSecond), s.QuotaRate, s.SprayRate)
	}
	if line := r.sharedCPUsText(); line != "" {
		b.WriteString(line + "\n")
	}
	b.WriteString("\n")
}

// textPhases writes the table of phases and classes.
func (r *Report) textPhases(b *strings.Builder) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tclass\trequests\tops/s\tMiB/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tserver p99 ms\t403/429/503\tJain\t")
	for _, p := range r.Phases {
		row := func(class string, c ClassReport, jain string) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\t%s\t\n", p.Name, class, c.Requests, opsCell(c), c.BytesPerSecond/(1<<20),
				c.Latency.P50ms, c.Latency.P95ms, c.Latency.P99ms, c.Latency.Maxms, serverCell(c.ServerLatency), RefusedCount(c), jain)
		}
		row(ClassHonest, p.Honest, fmt.Sprintf("%.4f", p.JainOps))
		if p.Abuser != nil {
			row(ClassAbuser, *p.Abuser, "")
		}
	}
	tw.Flush()
}

// textRoutes writes the honest latency by route, phase by phase.
func (r *Report) textRoutes(b *strings.Builder) {
	b.WriteString("\nhonest latency by route (ms, p50 / p95 / p99, and the server's own p99)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "route\t"
	for _, p := range r.Phases {
		head += p.Name + "\tserver\trequests\t"
	}
	fmt.Fprintln(tw, head)
	for _, route := range HonestRoutes {
		line := route + "\t"
		for _, p := range r.Phases {
			rr, ok := FindRoute(p.Honest.Routes, route)
			if !ok {
				line += "-\t-\t0\t"
				continue
			}
			line += fmt.Sprintf("%.1f / %.1f / %.1f\t%s\t%d\t", rr.Latency.P50ms, rr.Latency.P95ms, rr.Latency.P99ms, serverCell(rr.ServerLatency), rr.Latency.Count)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// textPhaseLines writes a few lines per phase: fairness, CPU waits and use, turns, server stages.
func (r *Report) textPhaseLines(b *strings.Builder) {
	for _, p := range r.Phases {
		lo, hi := minMaxOps(p.Tenants)
		fmt.Fprintf(b, "\n%s: %d tenants, ops/s per tenant min %.2f max %.2f, Jain's index %.4f (ops) %.4f (bytes)", p.Name, len(p.Tenants), lo, hi, p.JainOps, p.JainBytes)
		fmt.Fprintf(b, "\n%s: the load generator's goroutines waited for a CPU p99 %.1f ms, max %.1f ms (several such waits are in every latency above)", p.Name, p.LoadLag.P99ms, p.LoadLag.Maxms)
		if p.LoadCPUSeconds > 0 {
			fmt.Fprintf(b, "\n%s: the load generator used %.1f CPU seconds, %.0f %% of one CPU", p.Name, p.LoadCPUSeconds, 100*p.LoadBusy)
		}
		if p.HostSteal != nil {
			fmt.Fprintf(b, "\n%s: the hypervisor gave %.0f %% of the host's CPU time to other guests (steal)", p.Name, 100**p.HostSteal)
		}
		if l := p.ServerLag; l != nil {
			fmt.Fprintf(b, "\n%s: the server's goroutines waited for a CPU %d times, mean %.2f ms, p99 under %.1f ms", p.Name, l.Count, p.ServerLagMeanMs, l.P99ms)
		}
		if p.ServerCPUSeconds > 0 {
			fmt.Fprintf(b, "\n%s: the server used %.1f CPU seconds, %.0f %% of one CPU", p.Name, p.ServerCPUSeconds, 100*p.ServerBusy)
		}
		if p.ServerTurns != nil {
			fmt.Fprintf(b, "\n%s: %d requests of busy tenants waited for a turn on the server (server.turns_above_in_flight)", p.Name, *p.ServerTurns)
		}
		if st := stagesText(p.Honest.ServerStages); st != "" {
			fmt.Fprintf(b, "\n%s: honest requests' server stages, p99 ms: %s", p.Name, st)
		}
	}
	b.WriteString("\n")
}

// textComparison writes the honest figures beside the abuser against alone.
func (r *Report) textComparison(b *strings.Builder) {
	if c := r.Comparison; c != nil {
		fmt.Fprintf(b, "\nhonest beside the abuser vs alone: p99 %.1f ms vs %.1f ms (×%.2f), throughput %.1f vs %.1f ops/s (×%.3f), %.2f vs %.2f MiB/s (×%.3f)\n",
			c.AbuseP99ms, c.BaselineP99ms, c.P99Ratio, c.AbuseOpsPerS, c.BaselineOpsPerS, c.ThroughputRatio, c.AbuseBytesPS/(1<<20), c.BaselineBytesPS/(1<<20), c.BytesRatio)
		if c.BaselineServerP99ms > 0 {
			fmt.Fprintf(b, "  the server's own time (Server-Timing): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseServerP99ms, c.BaselineServerP99ms, c.ServerP99Ratio)
		}
		if c.BaselineQueueP99ms > 0 {
			fmt.Fprintf(b, "  the wait before the server read the request (queue): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseQueueP99ms, c.BaselineQueueP99ms, c.QueueP99Ratio)
			fmt.Fprintf(b, "  after the answer's header (its rest, the way back, the client): p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseAfterP99ms, c.BaselineAfterP99ms, c.AfterP99Ratio)
		}
		for _, rc := range c.Routes {
			fmt.Fprintf(b, "  %-15s p99 %8.1f ms vs %8.1f ms (×%.2f); server %s vs %s ms\n", rc.Route, rc.AbuseP99ms, rc.BaselineP99ms, rc.Ratio,
				fmtServerMs(rc.AbuseServerP99ms), fmtServerMs(rc.BaselineServerP99ms))
		}
		fmt.Fprintf(b, "  second half of each phase only: p99 %.1f ms vs %.1f ms (×%.2f)\n", c.AbuseSecondHalfP99ms, c.BaselineSecondHalfP99ms, c.SecondHalfP99Ratio)
	}
}

// textAbuser writes what the abuser did and got, node by node with several nodes.
// textPublic writes the public scenario's readers beside the honest p99.
func (r *Report) textPublic(b *strings.Builder) {
	p := r.Public
	if p == nil {
		return
	}
	fmt.Fprintf(b, "\npublic file: %d readers, each from its own address, downloading one %s file\n", p.Readers, FormatBytes(p.FileBytes))
	fmt.Fprintf(b, "  honest p99 alone %.1f ms\n", p.BaselineHonestP99ms)
	for _, ph := range p.Phases {
		fmt.Fprintf(b, "  %-6s readers %.1f MB/s (%d files, %s), honest p99 %.1f ms, server CPU %.1f s (%.2f s per GiB served beyond the baseline's), refusals %s, errors %d\n",
			ph.Name, ph.BytesPerSecond/1e6, ph.Downloads, FormatBytes(ph.Bytes), ph.HonestP99ms, ph.ServerCPUSeconds, ph.ServerCPUSecondsPerGiB, fmtCounts(ph.Refusals), ph.Errors)
	}
	fmt.Fprintf(b, "  honest p99 with anonymous readers / alone: %.2f×; anonymous MB/s / with a token: %.2f×\n", p.HonestP99Ratio, p.AnonymousVsTokenRatio)
}

func (r *Report) textAbuser(b *strings.Builder) {
	if a := r.Abuser; a != nil {
		fmt.Fprintf(b, "\nabuser refusals (all attacks): %s\n", fmtCounts(a.Refusals))
		for _, at := range a.Attacks {
			fmt.Fprintf(b, "  %-13s %7d requests; statuses %s\n", at.Attack, at.Requests, fmtCounts(at.Statuses))
			if len(at.Refusals) > 0 {
				fmt.Fprintf(b, "  %-13s refusals %s\n", "", fmtCounts(at.Refusals))
			}
		}
		all := ""
		if len(a.Nodes) > 1 {
			all = fmt.Sprintf(" over %d nodes (%d × one node's)", len(a.Nodes), len(a.Nodes))
		}
		fmt.Fprintf(b, "  flood admitted %d of %d in %.1fs, the credential limit allows %d%s\n", a.Flood.Admitted, a.Flood.Offered, a.Flood.Seconds, a.Flood.Allowed, all)
		if a.Spray != nil {
			fmt.Fprintf(b, "  bad tokens checked %d of %d in %.1fs, the auth-failure limit allows %d%s\n", a.Spray.Admitted, a.Spray.Offered, a.Spray.Seconds, a.Spray.Allowed, all)
		}
		if len(a.Nodes) > 1 {
			tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
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
		fmt.Fprintf(b, "  held reads open at once: %d (read %s); quota %s, usage %s, quota uploads stored %d",
			a.HeldPeak, FormatBytes(a.HeldBytes), FormatBytes(a.QuotaBytes), FormatBytes(a.UsageBytes), a.QuotaStored)
		if len(a.Nodes) > 1 {
			fmt.Fprintf(b, " (global; at most %d in flight at once, so up to %s over it is allowed)", a.QuotaInFlightPeak, FormatBytes(a.QuotaOvershootAllowedBytes))
		}
		b.WriteString("\n")
	}
}

// textAccounting writes the honest tenants' usage read back.
func (r *Report) textAccounting(b *strings.Builder) {
	if ac := r.Accounting; ac != nil {
		fmt.Fprintf(b, "\nhonest usage: %d of %d tenants read back, %s stored (+%s unsure), %s counted, %d mismatches\n",
			ac.Checked, ac.Tenants, FormatBytes(ac.StoredBytes), FormatBytes(ac.UnsureBytes), FormatBytes(ac.UsageBytes), ac.Mismatches)
	}
}

// textNodes writes the per-node tables of a run over several nodes.
func (r *Report) textNodes(b *strings.Builder) {
	if len(r.Nodes) > 1 {
		b.WriteString("\nper node (rate limits, in-flight caps and memory budgets are per node; quotas are global)\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
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
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "node\tCPUs\tpeak RSS\tbudget\tlimit\tpeak reserved\t")
		for _, n := range append(slices.Clone(r.Nodes), NodeReport{URL: "all nodes", CPUs: r.Layout.ServerCPUs, Memory: r.Memory}) {
			m := n.Memory
			if !m.Measured {
				fmt.Fprintf(tw, "%s\t%s\tnot measured\t\t\t\t\n", n.URL, n.CPUs)
				continue
			}
			limit := "no check"
			if m.OverheadBytes >= 0 {
				limit = FormatBytes(m.LimitBytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", n.URL, n.CPUs, FormatBytes(m.PeakRSSBytes), FormatBytes(m.BudgetBytes), limit, FormatBytes(m.PeakReservedBytes))
		}
		tw.Flush()
	}
}

// textMemory writes the memory line and the notes.
func (r *Report) textMemory(b *strings.Builder) {
	m := r.Memory
	what := "server memory"
	if len(r.Nodes) > 1 {
		what = fmt.Sprintf("memory of the %d nodes together", len(r.Nodes))
	}
	if m.Measured {
		fmt.Fprintf(b, "\n%s: peak RSS %s, budget %s, %s; peak reserved %s (%.0f%% of budget)\n",
			what, FormatBytes(m.PeakRSSBytes), FormatBytes(m.BudgetBytes), m.limitText(), FormatBytes(m.PeakReservedBytes),
			100*float64(m.PeakReservedBytes)/max(float64(m.BudgetBytes), 1))
	} else {
		fmt.Fprintf(b, "\n%s: not measured\n", what)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "note: %s\n", n)
	}
	if r.Interrupted {
		b.WriteString("note: the run was interrupted; figures cover what ran\n")
	}
}

// textResult writes the result and the failures.
func (r *Report) textResult(b *strings.Builder) {
	if r.OK {
		b.WriteString("\nresult: OK (no honest request refused, every downloaded byte matched)\n")
	} else {
		fmt.Fprintf(b, "\nresult: FAIL (%d correctness failures)\n", r.Failed())
		for _, k := range slices.Sorted(maps.Keys(r.Failures)) {
			fmt.Fprintf(b, "  %6d  %s\n", r.Failures[k], k)
		}
		for _, msg := range r.FailureMessages {
			fmt.Fprintf(b, "  - %s\n", msg)
		}
	}
}

func opsCell(c ClassReport) string {
	if c.Ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", c.OpsPerSecond)
}

// RefusedCount counts c's answers of 403, 429 and 503: the refusals of
// quotas, rate limits and the memory budget.
func RefusedCount(c ClassReport) int {
	n := 0
	for k, v := range c.Refusals {
		if strings.HasPrefix(k, "403 ") || strings.HasPrefix(k, "429 ") || strings.HasPrefix(k, "503 ") {
			n += v
		}
	}
	return n
}

// FindRoute is the report of the route named name among rs; false when
// rs has none.
func FindRoute(rs []RouteReport, name string) (RouteReport, bool) {
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

// sharedCPUsText says whether the generator shared the server's CPUs, or
// "" when the report does not know (it predates the field).
func (r *Report) sharedCPUsText() string {
	why := map[string]string{
		SharedYes:     "the server is on this host; latency and throughput include the generator's own CPU use",
		SharedNo:      "the server is on another host",
		SharedUnknown: "the server's address could not be matched to this host or another",
	}[r.GeneratorSharesCPUs]
	if why == "" {
		return ""
	}
	return fmt.Sprintf("load generator shares the server's host CPUs: %s (%s)", r.GeneratorSharesCPUs, why)
}

// limitText says what the RSS was checked against.
func (m MemoryReport) limitText() string {
	if m.OverheadBytes < 0 {
		return "no RSS check"
	}
	return fmt.Sprintf("limit %s (budget + %s overhead)", FormatBytes(m.LimitBytes), FormatBytes(m.OverheadBytes))
}

// FormatBytes writes a byte count in the largest binary unit it reaches,
// exactly when it is a whole number of that unit: "512MiB", "1.5KiB", "17B".
func FormatBytes(n int64) string {
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
