// Command tracewait reads a Go runtime trace of `openxet serve` (from its
// server.debug_listen, /debug/pprof/trace?seconds=N) and says where the
// requests' time went: each request is a trace task of type "request" with
// its tenant logged (server/log.go, server/middleware.go), and the time of
// the goroutine serving it is split into running, runnable (waiting for a
// CPU: the scheduler's queue), blocked (by the runtime's reason: network,
// select, sync, ...) and in system calls. A request's time starts when
// its goroutine last became runnable before the handler (the request's
// bytes arrived): "before: runnable" and "before: running" are the wait
// for a CPU and the reading and parsing of the request.
//
// Requests are grouped as the abuser's (a tenant whose name ends in
// -abuser-suffix) and the honest ones. For each group it prints the count,
// the p50 and p99 of the request time, the mean split, and the mean split
// of the slowest 1 % (the tail the abuse scenario's p99 sees). It is a
// measurement for BENCHMARKS.md, not a test.
//
//	curl -o abuse.trace 'http://127.0.0.1:6060/debug/pprof/trace?seconds=5'
//	go run ./load/cmd/tracewait abuse.trace
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// request is one request task and its goroutine's time by state.
type request struct {
	tenant     string
	start, end trace.Time
	g          trace.GoID
	split      map[string]time.Duration // "running", "runnable", "syscall", "blocked: <reason>"
	// waitFrom and waitTo are the wait for a CPU before the handler
	// ("before: runnable"), zero when the trace does not show it.
	waitFrom, waitTo trace.Time
}

// run is a stretch of time a goroutine ran: for a request's goroutine,
// req; for another, label (where it had blocked before: its first openxet
// frame, else its outermost one).
type run struct {
	start, end trace.Time
	req        *request
	label      string
}

func (r *request) total() time.Duration { return time.Duration(r.end - r.start) }

// goroutine is what the reader knows of a goroutine serving a request.
type goroutine struct {
	state  trace.GoState
	reason string // why it blocked, while it is waiting
	since  trace.Time
	req    *request
	// woke and ran are when it last became runnable and then running:
	// for a connection's goroutine, the request's bytes arriving and the
	// goroutine getting a CPU to read them.
	woke, ran trace.Time
	label     string // where it last blocked (run.label)
}

func main() {
	suffix := flag.String("abuser-suffix", "-abuser", "tenant name suffix of the abuser's requests")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracewait [-abuser-suffix S] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	done, runs, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	groups := map[string][]*request{}
	for _, r := range done {
		if r.tenant == "" {
			continue // refused before authentication
		}
		g := "honest"
		if strings.HasSuffix(r.tenant, *suffix) {
			g = "abuser"
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range []string{"honest", "abuser"} {
		report(os.Stdout, g, groups[g])
	}
	class := func(r run) string {
		switch {
		case r.req == nil:
			return r.label
		case strings.HasSuffix(r.req.tenant, *suffix):
			return "abuser's requests"
		case r.req.tenant == "":
			return "requests not authenticated yet"
		}
		return "honest requests"
	}
	if hs := groups["honest"]; len(hs) > 0 {
		tail := hs[int(0.99*float64(len(hs))):] // report sorted them
		fmt.Fprintf(os.Stdout, "while the slowest 1 %% of honest requests waited for a CPU, it ran: %s\n", ranDuring(tail, runs, class))
		// The tracer's own work (its advancer dumping stack tables about
		// once a second) stalls a one-CPU server for milliseconds: the
		// honest requests that waited on it, left out, are the run as it
		// is without the trace.
		var clean []*request
		for _, r := range hs {
			if !waitedOnTracer(r, runs) {
				clean = append(clean, r)
			}
		}
		report(os.Stdout, fmt.Sprintf("honest, without the %d that waited on the tracer", len(hs)-len(clean)), clean)
		if len(clean) > 0 {
			tail = clean[int(0.99*float64(len(clean))):]
			fmt.Fprintf(os.Stdout, "while their slowest 1 %% waited for a CPU, it ran: %s\n", ranDuring(tail, runs, class))
		}
	}
}

// waitedOnTracer reports whether the runtime tracer's advancer ran while
// r waited for a CPU.
func waitedOnTracer(r *request, runs []run) bool {
	for _, x := range runs {
		if x.req == nil && strings.HasPrefix(x.label, "runtime.(*traceAdvancerState)") && x.start < r.waitTo && x.end > r.waitFrom {
			return true
		}
	}
	return false
}

// ranDuring sums, by class, the running time of every goroutine within
// the CPU waits of rs, largest first (the top 8).
func ranDuring(rs []*request, runs []run, class func(run) string) string {
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	sum := map[string]time.Duration{}
	for _, r := range rs {
		if r.waitTo <= r.waitFrom {
			continue
		}
		for _, x := range runs {
			if x.start >= r.waitTo {
				break
			}
			if x.end > r.waitFrom && x.req != r {
				sum[class(x)] += time.Duration(min(x.end, r.waitTo) - max(x.start, r.waitFrom))
			}
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(sum[b] - sum[a]) })
	parts := []string{}
	for _, k := range keys[:min(len(keys), 8)] {
		parts = append(parts, fmt.Sprintf("%s %v", k, (sum[k]/time.Duration(max(len(rs), 1))).Round(time.Microsecond)))
	}
	return strings.Join(parts, ", ") + " (mean per request)"
}

// follower is the state read keeps while it follows a trace.
type follower struct {
	gs   map[trace.GoID]*goroutine
	open map[trace.TaskID]*request
	done []*request
	runs []run
}

// read follows the trace and returns every request task that began and
// ended in it, and every stretch a goroutine ran.
func read(f io.Reader) ([]*request, []run, error) {
	rd, err := trace.NewReader(f)
	if err != nil {
		return nil, nil, err
	}
	fl := &follower{gs: map[trace.GoID]*goroutine{}, open: map[trace.TaskID]*request{}}
	for {
		ev, err := rd.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		switch ev.Kind() {
		case trace.EventTaskBegin:
			fl.taskBegin(ev)
		case trace.EventLog:
			if l := ev.Log(); l.Category == "tenant" {
				if r := fl.open[l.Task]; r != nil {
					r.tenant = l.Message
				}
			}
		case trace.EventTaskEnd:
			fl.taskEnd(ev)
		case trace.EventStateTransition:
			fl.transition(ev)
		}
	}
	return fl.done, fl.runs, nil
}

// of returns the goroutine id, known from now on.
func (fl *follower) of(id trace.GoID) *goroutine {
	g := fl.gs[id]
	if g == nil {
		g = &goroutine{state: trace.GoRunning}
		fl.gs[id] = g
	}
	return g
}

// charge adds g's time in its current state up to t to its request.
func charge(g *goroutine, t trace.Time) {
	if g.req == nil || g.since == 0 {
		return
	}
	key := g.state.String()
	switch g.state {
	case trace.GoRunning:
		key = "running"
	case trace.GoRunnable:
		key = "runnable"
	case trace.GoSyscall:
		key = "syscall"
	case trace.GoWaiting:
		key = "blocked: " + g.reason
	}
	g.req.split[key] += time.Duration(t - g.since)
}

// taskBegin starts a request, with the wait before its handler when the
// trace shows it.
func (fl *follower) taskBegin(ev trace.Event) {
	if ev.Task().Type != "request" {
		return
	}
	r := &request{start: ev.Time(), g: ev.Goroutine(), split: map[string]time.Duration{}}
	fl.open[ev.Task().ID] = r
	g := fl.of(ev.Goroutine())
	if g.woke > 0 && g.ran >= g.woke {
		// The time before the handler: waiting for a CPU once the
		// request arrived, then reading and parsing it.
		r.start, r.waitFrom, r.waitTo = g.woke, g.woke, g.ran
		r.split["before: runnable"] = time.Duration(g.ran - g.woke)
		r.split["before: running"] = time.Duration(ev.Time() - g.ran)
	}
	g.req, g.state, g.since = r, trace.GoRunning, ev.Time()
}

// taskEnd ends a request.
func (fl *follower) taskEnd(ev trace.Event) {
	r := fl.open[ev.Task().ID]
	if r == nil {
		return
	}
	delete(fl.open, ev.Task().ID)
	r.end = ev.Time()
	if g := fl.gs[r.g]; g != nil && g.req == r {
		charge(g, ev.Time())
		g.req = nil
	}
	fl.done = append(fl.done, r)
}

// transition follows a goroutine's change of state.
func (fl *follower) transition(ev trace.Event) {
	st := ev.StateTransition()
	if st.Resource.Kind != trace.ResourceGoroutine {
		return
	}
	g := fl.of(st.Resource.Goroutine())
	from, to := st.Goroutine()
	charge(g, ev.Time())
	if from == trace.GoRunning && g.ran > 0 {
		fl.runs = append(fl.runs, run{start: g.ran, end: ev.Time(), req: g.req, label: g.label})
	}
	if to == trace.GoWaiting || to == trace.GoSyscall {
		g.label = label(st.Stack)
	}
	g.state, g.since = to, ev.Time()
	switch to {
	case trace.GoWaiting:
		g.reason = st.Reason
	case trace.GoRunnable:
		g.woke = ev.Time()
	case trace.GoRunning:
		g.ran = ev.Time()
	}
}

// label names a goroutine by a stack: its first openxet frame, else its
// outermost.
func label(st trace.Stack) string {
	last := ""
	for f := range st.Frames() {
		if strings.HasPrefix(f.Func, "openxet/") {
			return f.Func
		}
		last = f.Func
	}
	if last == "" {
		return "unknown"
	}
	return last
}

// report prints a group's request times and where they went.
func report(w io.Writer, name string, rs []*request) {
	if len(rs) == 0 {
		fmt.Fprintf(w, "%s: no requests\n", name)
		return
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].total() < rs[j].total() })
	pct := func(p float64) time.Duration { return rs[min(len(rs)-1, int(p*float64(len(rs))))].total() }
	fmt.Fprintf(w, "%s: %d requests, p50 %v, p99 %v, max %v\n", name, len(rs), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), rs[len(rs)-1].total().Round(time.Microsecond))
	fmt.Fprintf(w, "  mean split:      %s\n", split(rs))
	tail := rs[int(0.99*float64(len(rs))):]
	fmt.Fprintf(w, "  slowest 1 %% (%d): %s\n", len(tail), split(tail))
}

// split is the mean time per state of rs, largest first.
func split(rs []*request) string {
	sum := map[string]time.Duration{}
	var total time.Duration
	for _, r := range rs {
		for k, d := range r.split {
			sum[k] += d
		}
		total += r.total()
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(sum[b] - sum[a]) })
	parts := []string{fmt.Sprintf("total %v", (total / time.Duration(len(rs))).Round(time.Microsecond))}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, (sum[k]/time.Duration(len(rs))).Round(time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}
