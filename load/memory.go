package load

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memSampler scrapes every node's memory gauges, all nodes at each tick.
type memSampler struct {
	nodes []*admin
	t0    time.Time

	mu      sync.Mutex
	samples [][]MemSample // per node
	total   []MemSample   // the sum over the nodes, at ticks where each answered
	errs    []error       // per node, the last error
}

func (m *memSampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample scrapes every node at once and records what each answered.
func (m *memSampler) sample(ctx context.Context) {
	at := time.Since(m.t0)
	got := make([]*MemSample, len(m.nodes))
	errs := make([]error, len(m.nodes))
	var wg sync.WaitGroup
	for i, na := range m.nodes {
		wg.Go(func() {
			v, err := na.scrape(ctx)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					errs[i] = err
				}
				return
			case !has(v, metricBudget):
				errs[i] = fmt.Errorf("%s lacks %s", na.metrics, metricBudget)
				return
			case !has(v, metricRSS):
				errs[i] = fmt.Errorf("%s lacks %s", na.metrics, metricRSS)
			}
			got[i] = &MemSample{AtSeconds: at.Seconds(), RSSBytes: int64(v[metricRSS]), ReservedBytes: int64(v[metricReserved]), BudgetBytes: int64(v[metricBudget])}
		})
	}
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.samples == nil {
		m.samples = make([][]MemSample, len(m.nodes))
		m.errs = make([]error, len(m.nodes))
	}
	sum, all := MemSample{AtSeconds: at.Seconds()}, true
	for i, s := range got {
		if errs[i] != nil {
			m.errs[i] = errs[i]
		}
		if s == nil {
			all = false
			continue
		}
		m.samples[i] = append(m.samples[i], *s)
		sum.RSSBytes += s.RSSBytes
		sum.ReservedBytes += s.ReservedBytes
		sum.BudgetBytes += s.BudgetBytes
	}
	if all {
		m.total = append(m.total, sum)
	}
}

func has(v map[string]float64, name string) bool { _, ok := v[name]; return ok }

// why says why node i's memory was not measured.
func (m *memSampler) why(i int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < len(m.errs) && m.errs[i] != nil {
		return m.errs[i].Error()
	}
	return "no samples"
}

// report summarizes each node's samples and fails the run for every node
// whose peak RSS is over its own budget + overhead (overhead < 0: no
// check): the memory budget is per node. total is the deployment's: the
// sums over the nodes at the ticks where every node answered, against the
// sum of their budgets and overheads (with one node, that node's).
func (m *memSampler) report(overhead int64, rec *recorder) (perNode []MemoryReport, total MemoryReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	perNode = make([]MemoryReport, len(m.nodes))
	for i := range m.nodes {
		var s []MemSample
		if i < len(m.samples) {
			s = m.samples[i]
		}
		perNode[i] = summarize(s, overhead)
		mr := perNode[i]
		if mr.Measured && overhead >= 0 && mr.PeakRSSBytes > mr.LimitBytes {
			where := ""
			if len(m.nodes) > 1 {
				where = m.nodes[i].base + ": "
			}
			rec.fail(failMemory, "%speak RSS %s is over the budget %s plus %s overhead", where, fmtBytes(mr.PeakRSSBytes), fmtBytes(mr.BudgetBytes), fmtBytes(overhead))
		}
	}
	if len(m.nodes) == 1 {
		return perNode, perNode[0]
	}
	total = summarize(m.total, overhead*int64(len(m.nodes)))
	for _, p := range perNode {
		total.Measured = total.Measured && p.Measured
	}
	return perNode, total
}

// summarize is the MemoryReport of samples, without the check.
func summarize(samples []MemSample, overhead int64) MemoryReport {
	mr := MemoryReport{Samples: samples, OverheadBytes: overhead}
	rss := false
	for _, s := range samples {
		mr.BudgetBytes = max(mr.BudgetBytes, s.BudgetBytes)
		mr.PeakRSSBytes = max(mr.PeakRSSBytes, s.RSSBytes)
		mr.PeakReservedBytes = max(mr.PeakReservedBytes, s.ReservedBytes)
		rss = rss || s.RSSBytes > 0
	}
	mr.Measured = rss && mr.BudgetBytes > 0
	if mr.Measured {
		mr.LimitBytes = mr.BudgetBytes + max(overhead, 0)
	}
	return mr
}
