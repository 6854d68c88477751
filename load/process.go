package load

import (
	"bufio"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"openxet/xet"
)

// The abuser in a process of its own.
//
// On a machine with few CPUs the abuser's client (thousands of requests a
// second) competes with the honest tenants' clients for the load
// generator's CPU, and the honest latencies then measure the generator
// rather than the server. With Config.AbuserCommand the run starts the
// abuser as a child process, which the caller runs at the lowest CPU
// priority: the honest clients get the CPU when they want it, and the
// abuser what is left.
//
// The parent does the abuser's setup (credentials, data, quota) and sends
// the child an abuserPlan, one JSON line on its stdin. The child makes its
// quota xorbs, answers with a ready message and waits; a "start" line
// starts the attacks, the end of its stdin stops them. On its stdout the
// child sends gob-encoded abuserMsgs: the ready message, the attack
// counters every statusEvery while it runs (the parent's copy of the
// abuser reads the same counters, for the report and for tests that hold
// a phase open), and last the counters and every request it recorded.

// statusEvery is how often the child sends its counters.
const statusEvery = 100 * time.Millisecond

// abuserStopWait bounds the wait for the child to stop, report and exit.
const abuserStopWait = time.Minute

// abuserPlan is what the child needs to attack as the parent's abuser
// would.
type abuserPlan struct {
	Config         AbuserConfig
	Servers        []string // the nodes, in the parent's order
	Name           string
	RequestTimeout time.Duration
	// T0 is the start of the run (unix nanoseconds): the child's records
	// are times since it, as the parent's are.
	T0                 int64
	Seed               uint64
	Flood, Hold, Quota credential
	SmallFile          xet.Hash
	Holds              []wireHold
	// Spray says whether the parent found SprayAddr usable.
	Spray bool
}

// wireHold is a holdURL on the wire.
type wireHold struct {
	URL      string
	From, To uint64
	Node     int
}

// abuserCounts are the abuser's attack counters (see abuser), per node
// where the abuser keeps them per node.
type abuserCounts struct {
	Flood, Spray                      []wireEnv
	HoldOpenPeak                      []int64
	HeldPeak, HeldBytes, QuotaReached int64
	QuotaStored, QuotaInFlightMax     int64
}

// wireEnv is an envCounters on the wire.
type wireEnv struct{ Answered, Admitted, First, Last int64 }

// wireRecord is one of the abuser's requests on the wire.
type wireRecord struct {
	Start, Dur, Bytes int64
	Node, Status      int16
	Route, Code       string
}

// abuserMsg is one message from the child.
type abuserMsg struct {
	// Ready, in the first message, says how the child runs (process id,
	// CPU priority, CPUs), for the report.
	Ready   string
	Counts  abuserCounts
	Records []wireRecord // in the last message
	Done    bool         // the last message
	Err     string       // the child failed; the last message
}

func (ab *abuser) counts() abuserCounts {
	env := func(es []envCounters) []wireEnv {
		out := make([]wireEnv, len(es))
		for i := range es {
			out[i] = wireEnv{es[i].answered.Load(), es[i].admitted.Load(), es[i].first.Load(), es[i].last.Load()}
		}
		return out
	}
	c := abuserCounts{
		Flood: env(ab.floodBy), Spray: env(ab.sprayBy), HoldOpenPeak: make([]int64, len(ab.holdOpenPeak)),
		HeldPeak: ab.heldPeak.Load(), HeldBytes: ab.heldBytes.Load(), QuotaReached: ab.quotaReached.Load(),
		QuotaStored: ab.quotaStored.Load(), QuotaInFlightMax: ab.quotaInFlightMax.Load(),
	}
	for i := range ab.holdOpenPeak {
		c.HoldOpenPeak[i] = ab.holdOpenPeak[i].Load()
	}
	return c
}

func (ab *abuser) setCounts(c abuserCounts) {
	set := func(es []envCounters, ws []wireEnv) {
		for i := range min(len(es), len(ws)) {
			es[i].answered.Store(ws[i].Answered)
			es[i].admitted.Store(ws[i].Admitted)
			es[i].first.Store(ws[i].First)
			es[i].last.Store(ws[i].Last)
		}
	}
	set(ab.floodBy, c.Flood)
	set(ab.sprayBy, c.Spray)
	for i := range min(len(ab.holdOpenPeak), len(c.HoldOpenPeak)) {
		ab.holdOpenPeak[i].Store(c.HoldOpenPeak[i])
	}
	ab.heldPeak.Store(c.HeldPeak)
	ab.heldBytes.Store(c.HeldBytes)
	ab.quotaReached.Store(c.QuotaReached)
	ab.quotaStored.Store(c.QuotaStored)
	ab.quotaInFlightMax.Store(c.QuotaInFlightMax)
}

// plan is what a child needs to run ab's attacks.
func (ab *abuser) plan(cfg Config, t0 time.Time, seed uint64) abuserPlan {
	p := abuserPlan{
		Config: ab.cfg, Servers: ab.nodes, Name: ab.name, RequestTimeout: cfg.RequestTimeout, T0: t0.UnixNano(), Seed: seed,
		Flood: ab.flood, Hold: ab.hold, Quota: ab.quota, SmallFile: ab.smallFile.hash, Spray: ab.spray != nil,
	}
	for _, h := range ab.holds {
		p.Holds = append(p.Holds, wireHold{URL: h.url, From: h.from, To: h.to, Node: h.node})
	}
	return p
}

// abuserFromPlan is the child's abuser.
func abuserFromPlan(p abuserPlan) *abuser {
	a := p.Config
	rec := newRecorder(time.Unix(0, p.T0))
	n := len(p.Servers)
	ab := &abuser{
		cfg: a, nodes: p.Servers, name: p.Name, rec: rec,
		c:     &client{hc: &http.Client{Transport: newTransport(a.Readers+a.FloodWorkers+a.QuotaWorkers+8, nil)}, rec: rec, timeout: p.RequestTimeout},
		flood: p.Flood, hold: p.Hold, quota: p.Quota, smallFile: &fileSpec{hash: p.SmallFile},
		floodBy: make([]envCounters, n), sprayBy: make([]envCounters, n),
		holdOpen: make([]atomic.Int64, n), holdOpenPeak: make([]atomic.Int64, n),
	}
	for _, h := range p.Holds {
		ab.holds = append(ab.holds, holdURL{url: h.URL, from: h.From, to: h.To, node: h.Node})
	}
	if p.Spray {
		ab.spray = &client{hc: &http.Client{Transport: newTransport(a.SprayWorkers+2, net.ParseIP(a.SprayAddr))}, rec: rec, timeout: p.RequestTimeout}
	}
	ab.makeQuotaXorbs(p.Seed)
	return ab
}

// ServeAbuser is the abuser's child process (Config.AbuserCommand): it
// reads its plan from in, sends a ready message saying how it runs (ready,
// from the caller: process id, CPU priority, CPUs) to out, attacks from the
// "start" line on until in ends or ctx is done, then sends what it recorded
// and returns. Nothing else may write to out.
func ServeAbuser(ctx context.Context, in io.Reader, out io.Writer, ready string) error {
	enc := gob.NewEncoder(out)
	rd := bufio.NewReader(in)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("abuser: read the plan: %w", err)
	}
	var p abuserPlan
	if err := json.Unmarshal(line, &p); err != nil {
		return fmt.Errorf("abuser: read the plan: %w", err)
	}
	ab := abuserFromPlan(p)
	defer ab.c.hc.CloseIdleConnections()
	if err := enc.Encode(abuserMsg{Ready: ready}); err != nil {
		return fmt.Errorf("abuser: %w", err)
	}
	if cmd, err := rd.ReadString('\n'); err != nil || cmd != "start\n" {
		return nil // the parent ended the run before the abuse phase
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, rd) // until the parent closes our stdin
		cancel()
	}()
	attacks := make(chan struct{})
	go func() { defer close(attacks); ab.run(ctx) }()
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-attacks:
			running = false
		case <-tick.C:
			if err := enc.Encode(abuserMsg{Counts: ab.counts()}); err != nil {
				cancel()
				<-attacks
				return fmt.Errorf("abuser: %w", err)
			}
		}
	}
	reqs, _, _, _ := ab.rec.snapshot()
	last := abuserMsg{Counts: ab.counts(), Done: true, Records: make([]wireRecord, 0, len(reqs))}
	for _, r := range reqs {
		last.Records = append(last.Records, wireRecord{Start: int64(r.start), Dur: int64(r.dur), Bytes: r.bytes, Node: r.node, Status: r.status, Route: r.route, Code: r.code})
	}
	if err := enc.Encode(last); err != nil {
		return fmt.Errorf("abuser: %w", err)
	}
	return nil
}

// abuserProcess is the parent's handle on a child running the abuser.
type abuserProcess struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	ready   string
	started bool          // run sent "start"
	done    chan struct{} // closed when the child's messages end
	err     error         // why they ended early; read after done
	once    sync.Once
}

// startAbuserProcess starts cmd, sends it ab's plan and waits for it to be
// ready. From then on the child's counters land in ab's and its records,
// at the end, in ab.rec.
func startAbuserProcess(ctx context.Context, cmd *exec.Cmd, ab *abuser, p abuserPlan) (*abuserProcess, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the abuser's process: %w", err)
	}
	ap := &abuserProcess{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	plan, err := json.Marshal(p)
	if err == nil {
		_, err = stdin.Write(append(plan, '\n'))
	}
	dec := gob.NewDecoder(stdout)
	var first abuserMsg
	if err == nil {
		err = dec.Decode(&first)
	}
	if err != nil {
		ap.kill()
		return nil, fmt.Errorf("the abuser's process: %w", err)
	}
	ap.ready = first.Ready
	go func() {
		defer close(ap.done)
		for {
			var m abuserMsg
			if err := dec.Decode(&m); err != nil {
				if ctx.Err() == nil {
					ap.err = fmt.Errorf("the abuser's process stopped reporting: %w", err)
				}
				return
			}
			ab.setCounts(m.Counts)
			if m.Err != "" {
				ap.err = errors.New(m.Err)
			}
			for _, r := range m.Records {
				ab.rec.request(reqRecord{start: time.Duration(r.Start), dur: time.Duration(r.Dur), bytes: r.Bytes, tenant: -1,
					node: r.Node, status: r.Status, class: classAbuser, route: r.Route, code: r.Code})
			}
			ab.rec.poke()
			if m.Done || m.Err != "" {
				return
			}
		}
	}()
	return ap, nil
}

// run starts the child's attacks and stops them when ctx is done; it
// returns once the child has sent its records (or failed to).
func (ap *abuserProcess) run(ctx context.Context) error {
	ap.started = true
	if _, err := io.WriteString(ap.stdin, "start\n"); err != nil {
		return ap.stop(fmt.Errorf("start the abuser's attacks: %w", err))
	}
	select {
	case <-ctx.Done():
	case <-ap.done: // ended early
	}
	return ap.stop(nil)
}

// stop closes the child's stdin (ending its attacks, or its wait to start),
// waits for its last message and for it to exit, and returns the first
// error seen.
func (ap *abuserProcess) stop(err error) error {
	ap.once.Do(func() {
		ap.stdin.Close()
		t := time.NewTimer(abuserStopWait)
		defer t.Stop()
		select {
		case <-ap.done:
		case <-t.C:
			ap.err = errors.Join(ap.err, fmt.Errorf("the abuser's process did not report within %s of being stopped", abuserStopWait))
			ap.cmd.Process.Kill()
			<-ap.done
		}
		if !ap.started {
			ap.err = nil // it ended, as asked, without attacking
		}
		if werr := ap.cmd.Wait(); werr != nil {
			ap.err = errors.Join(ap.err, fmt.Errorf("the abuser's process: %w", werr))
		}
	})
	return errors.Join(err, ap.err)
}

// kill ends a child that never got going.
func (ap *abuserProcess) kill() {
	ap.stdin.Close()
	ap.cmd.Process.Kill()
	ap.cmd.Wait()
}
