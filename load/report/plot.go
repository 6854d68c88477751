package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	plotW, plotH                     = 1000, 320
	padL, padR, padT, padB           = 70, 150, 20, 40
	colorHonest, colorAbuser         = "#1f77b4", "#d62728"
	colorRSS, colorReserved, colorOK = "#9467bd", "#2ca02c", "#555"
)

var phaseColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"}

// plot is a line chart with optional log y axis, shaded phases and
// horizontal reference lines.
type plot struct {
	xLabel, yLabel string
	logY           bool
	x0, x1, y0, y1 float64
	lines          []plotLine
	rules          []plotRule
	bands          []plotBand
	yFormat        func(float64) string
}

type plotLine struct {
	name, color string
	dashed      bool
	xs, ys      []float64
}

type plotRule struct {
	name, color string
	y           float64
}

type plotBand struct {
	label  string
	x0, x1 float64
}

func (p *plot) sx(x float64) float64 {
	if p.x1 == p.x0 {
		return padL
	}
	return padL + (x-p.x0)/(p.x1-p.x0)*(plotW-padL-padR)
}

func (p *plot) sy(y float64) float64 {
	lo, hi, v := p.y0, p.y1, y
	if p.logY {
		lo, hi, v = math.Log10(lo), math.Log10(hi), math.Log10(max(y, p.y0))
	}
	if hi == lo {
		return plotH - padB
	}
	return plotH - padB - (v-lo)/(hi-lo)*(plotH-padT-padB)
}

// yTicks returns tick values: powers of ten (and 2, 5 between) on a log
// axis, 1-2-5 steps on a linear one.
func (p *plot) yTicks() []float64 {
	var out []float64
	if p.logY {
		for e := math.Floor(math.Log10(p.y0)); e <= math.Ceil(math.Log10(p.y1)); e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v >= p.y0*0.999 && v <= p.y1*1.001 {
					out = append(out, v)
				}
			}
		}
		return out
	}
	return niceTicks(p.y0, p.y1, 6)
}

// niceTicks returns about n round values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func (p *plot) svg(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="%s">`+"\n", plotW, plotH, html.EscapeString(title))
	for i, bd := range p.bands {
		x0, x1 := p.sx(bd.x0), p.sx(bd.x1)
		fill := "#f4f4f4"
		if i%2 == 1 {
			fill = "#fbeeee"
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, padT, max(x1-x0, 0), plotH-padT-padB, fill)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", x0+4, padT+12, html.EscapeString(bd.label))
	}
	yf := p.yFormat
	if yf == nil {
		yf = func(v float64) string { return trimFloat(v) }
	}
	for _, t := range p.yTicks() {
		y := p.sy(t)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e3e3e3"/>`, padL, plotW-padR, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, yf(t))
	}
	for _, t := range niceTicks(p.x0, p.x1, 10) {
		x := p.sx(t)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`, x, x, plotH-padB, plotH-padB+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, plotH-padB+16, trimFloat(t))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#999"/>`+"\n", padL, plotW-padR, plotH-padB, plotH-padB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (plotW-padR+padL)/2, plotH-6, html.EscapeString(p.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (plotH-padB+padT)/2, html.EscapeString(p.yLabel))
	legend := 0
	item := func(name, color string, dashed bool) {
		y := padT + 14 + 16*legend
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			plotW-padR+10, plotW-padR+30, y-4, y-4, color, dash, plotW-padR+34, y, html.EscapeString(name))
		legend++
	}
	for _, rl := range p.rules {
		y := p.sy(rl.y)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="2 3" stroke-width="1.5"/>`+"\n", padL, plotW-padR, y, y, rl.color)
		item(rl.name, rl.color, true)
	}
	for _, l := range p.lines {
		var pts []string
		for i := range l.xs {
			if p.logY && l.ys[i] <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.sx(l.xs[i]), p.sy(l.ys[i])))
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", l.color, dash, strings.Join(pts, " "))
		item(l.name, l.color, l.dashed)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

func phaseBands(r *Report) []plotBand {
	var out []plotBand
	for _, p := range r.Phases {
		out = append(out, plotBand{label: p.Name, x0: p.StartSeconds, x1: p.StartSeconds + p.DurationSeconds})
	}
	return out
}

// latencyChart plots p50 and p99 over time for each class, log scale.
func latencyChart(r *Report) string {
	p := &plot{xLabel: "seconds since start", yLabel: "latency (ms, log scale)", logY: true, bands: phaseBands(r)}
	lo, hi := math.Inf(1), 0.0
	p.x0, p.x1 = math.Inf(1), math.Inf(-1)
	for _, s := range r.Timeline {
		color := colorHonest
		if s.Class == ClassAbuser {
			color = colorAbuser
		}
		var xs, y50, y99 []float64
		for _, bk := range s.Buckets {
			p.x0, p.x1 = min(p.x0, bk.AtSeconds), max(p.x1, bk.AtSeconds)
			if bk.Count == 0 {
				continue
			}
			xs = append(xs, bk.AtSeconds)
			y50 = append(y50, bk.P50ms)
			y99 = append(y99, bk.P99ms)
			if bk.P50ms > 0 {
				lo = min(lo, bk.P50ms)
			}
			hi = max(hi, bk.P99ms)
		}
		p.lines = append(p.lines, plotLine{name: s.Class + " p99", color: color, xs: xs, ys: y99}, plotLine{name: s.Class + " p50", color: color, dashed: true, xs: xs, ys: y50})
	}
	if len(p.lines) == 0 || hi == 0 {
		return "<p class=\"muted\">No requests were timed.</p>\n"
	}
	for _, bd := range p.bands {
		p.x0, p.x1 = min(p.x0, bd.x0), max(p.x1, bd.x1)
	}
	p.y0 = math.Pow(10, math.Floor(math.Log10(max(lo, 0.01))))
	p.y1 = math.Pow(10, math.Ceil(math.Log10(hi)))
	if p.y1 <= p.y0 {
		p.y1 = p.y0 * 10
	}
	return p.svg("latency over time per class")
}

// memoryChart plots RSS and reserved bytes over time, with the budget
// lines that fit its scale and a sentence for those that do not.
func memoryChart(r *Report) string {
	p, off := memoryPlot(r)
	if p == nil {
		return ""
	}
	out := p.svg("server memory against the budget")
	if off != "" {
		out += "<p class=\"muted\">" + html.EscapeString(off) + "</p>\n"
	}
	return out
}

// memoryPlot is the memory chart: RSS and reserved bytes over time, in
// MiB, on an axis up to 1.2 × the larger of their peaks, so that both can
// be read however large the budget. The budget and the limit (budget +
// overhead) are drawn when within twice that peak (the axis then reaches
// them); off names in a sentence those left off the scale ("" when none).
// p is nil without samples.
func memoryPlot(r *Report) (p *plot, off string) {
	m := r.Memory
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	var xs, rss, res []float64
	for _, s := range m.Samples {
		xs = append(xs, s.AtSeconds)
		rss = append(rss, mib(s.RSSBytes))
		res = append(res, mib(s.ReservedBytes))
	}
	if len(xs) == 0 {
		return nil, ""
	}
	p = &plot{xLabel: "seconds since start", yLabel: "MiB", bands: phaseBands(r)}
	p.x0, p.x1 = xs[0], xs[len(xs)-1]
	peak := max(mib(m.PeakRSSBytes), mib(m.PeakReservedBytes))
	p.y0, p.y1 = 0, max(peak*1.2, 1)
	var left []string
	rule := func(name, what, color string, n int64) {
		if y := mib(n); y <= 2*peak {
			p.rules = append(p.rules, plotRule{name: name, color: color, y: y})
			p.y1 = max(p.y1, y*1.05)
		} else {
			left = append(left, fmt.Sprintf("the %s (%s)", what, FormatBytes(n)))
		}
	}
	rule("budget", "budget", colorOK, m.BudgetBytes)
	if m.LimitBytes > m.BudgetBytes {
		rule("budget + overhead", "limit", colorAbuser, m.LimitBytes)
	}
	p.lines = []plotLine{{name: "RSS", color: colorRSS, xs: xs, ys: rss}, {name: "reserved", color: colorReserved, xs: xs, ys: res}}
	switch len(left) {
	case 1:
		off = fmt.Sprintf("Not drawn: %s is more than twice the peak (%s), off the plot's scale.", left[0], FormatBytes(max(m.PeakRSSBytes, m.PeakReservedBytes)))
	case 2:
		off = fmt.Sprintf("Not drawn: %s and %s are more than twice the peak (%s), off the plot's scale.", left[0], left[1], FormatBytes(max(m.PeakRSSBytes, m.PeakReservedBytes)))
	}
	return p, off
}

// tenantChart draws one bar per tenant and phase: completed operations
// per second.
func tenantChart(r *Report) string {
	if len(r.Phases) == 0 || len(r.Phases[0].Tenants) == 0 {
		return "<p class=\"muted\">No tenants.</p>\n"
	}
	n := len(r.Phases[0].Tenants)
	hi := 0.0
	for _, p := range r.Phases {
		for _, t := range p.Tenants {
			hi = max(hi, t.OpsPerSecond)
		}
	}
	if hi == 0 {
		hi = 1
	}
	ticks := niceTicks(0, hi*1.1, 5)
	top := ticks[len(ticks)-1]
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="throughput per tenant">`+"\n", plotW, plotH)
	sy := func(v float64) float64 { return plotH - padB - v/top*(plotH-padT-padB) }
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e3e3e3"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			padL, plotW-padR, sy(t), sy(t), padL-6, sy(t)+4, trimFloat(t))
	}
	slot := float64(plotW-padL-padR) / float64(n)
	bw := slot / float64(len(r.Phases)) * 0.9
	for pi, p := range r.Phases {
		color := phaseColors[pi%len(phaseColors)]
		for i, t := range p.Tenants {
			x := padL + float64(i)*slot + float64(pi)*bw
			y := sy(t.OpsPerSecond)
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s %s: %.2f ops/s</title></rect>`+"\n",
				x, y, max(bw, 0.5), plotH-padB-y, color, html.EscapeString(t.Tenant), html.EscapeString(p.Name), t.OpsPerSecond)
		}
		y := padT + 14 + 32*pi
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="20" height="8" fill="%s"/><text x="%d" y="%d">%s</text><text x="%d" y="%d">Jain %.4f</text>`+"\n",
			plotW-padR+10, y-8, color, plotW-padR+34, y, html.EscapeString(p.Name), plotW-padR+34, y+13, p.JainOps)
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#999"/>`+"\n", padL, plotW-padR, plotH-padB, plotH-padB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">tenants (%d, in creation order)</text>`+"\n", (plotW-padR+padL)/2, plotH-12, n)
	fmt.Fprintf(&b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">completed operations per second</text>`+"\n", (plotH-padB+padT)/2)
	b.WriteString("</svg>\n")
	return b.String()
}
