package load

import (
	"strconv"
	"time"
)

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

// isRefusalStatus reports whether an answer refused the request: 4xx and
// 5xx except 404, which answers a question (no such chunk, file).
func isRefusalStatus(s int) bool { return s >= 400 && s != 404 }
