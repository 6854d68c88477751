package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
)

//go:embed page.html
var pageHTML string

// page renders WriteHTML's page from a htmlPage.
var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"bytes":   FormatBytes,
	"ms":      fmtMs,
	"mib":     func(v float64) float64 { return v / (1 << 20) },
	"counts":  fmtCounts,
	"ops":     opsCell,
	"refused": RefusedCount,
	"routeOf": func(rs []RouteReport, name string) RouteReport { rr, _ := FindRoute(rs, name); return rr },
}).Parse(pageHTML))

// htmlPage is what page renders: the report and what is computed for it.
type htmlPage struct {
	*Report
	Shared       string // sharedCPUsText, as a sentence
	FailureKinds []failureKind
	PhaseRows    []phaseRow
	Routes       []string
	LatencyChart template.HTML
	TenantChart  template.HTML
	MemoryChart  template.HTML
}

type failureKind struct {
	Kind string
	N    int
}

// phaseRow is one row of the phase table: one class in one phase.
type phaseRow struct {
	Phase, Class       string
	C                  ClassReport
	JainOps, JainBytes string
}

// WriteHTML writes the report as one self-contained HTML page: the tables
// of WriteText and three inline SVG plots (latency over time per class,
// throughput per tenant, server memory against the budget). It loads
// nothing from anywhere: no scripts, no external styles or fonts. The page
// is the html/template page.html; the plots are drawn by plot.go, which
// escapes the text it puts in them.
func (r *Report) WriteHTML(w io.Writer) error {
	p := htmlPage{Report: r, Routes: HonestRoutes,
		LatencyChart: template.HTML(latencyChart(r)), TenantChart: template.HTML(tenantChart(r))}
	if r.Memory.Measured {
		p.MemoryChart = template.HTML(memoryChart(r))
	}
	if line := r.sharedCPUsText(); line != "" {
		p.Shared = strings.ToUpper(line[:1]) + line[1:]
	}
	for _, k := range slices.Sorted(maps.Keys(r.Failures)) {
		p.FailureKinds = append(p.FailureKinds, failureKind{Kind: k, N: r.Failures[k]})
	}
	for _, ph := range r.Phases {
		p.PhaseRows = append(p.PhaseRows, phaseRow{Phase: ph.Name, Class: ClassHonest, C: ph.Honest,
			JainOps: fmt.Sprintf("%.4f", ph.JainOps), JainBytes: fmt.Sprintf("%.4f", ph.JainBytes)})
		if ph.Abuser != nil {
			p.PhaseRows = append(p.PhaseRows, phaseRow{Phase: ph.Name, Class: ClassAbuser, C: *ph.Abuser})
		}
	}
	var b strings.Builder
	if err := page.Execute(&b, p); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}
