package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Run runs cfg.Scenario against the nodes of cfg.Servers and returns its
// report.
//
// It returns an error only when the run cannot be made: a bad Config, a
// server that is not loopback (without AllowRemote), or a server that
// refuses the setup (admin token, credential creation). Correctness failures
// of the server under load are in the report (Report.OK, Report.Failures).
//
// Every loop is bounded: the phases end after Config.Duration each, the
// honest operations still running get Config.DrainTimeout, and the
// credentials the run made are revoked before it returns (and, unless
// Config.KeepTenants, its tenants' limits records removed: cleanUp). If ctx ends early,
// the run stops where it is and reports what ran (Report.Interrupted).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns := nodes(cfg.Servers)
	tg := &targets{allowRemote: cfg.AllowRemote}
	for _, u := range append(slices.Clone(cfg.Servers), cfg.MetricsURLs...) {
		if err := tg.check(ctx, u); err != nil {
			return nil, fmt.Errorf("refusing to load %s: %w (pass --allow-remote to load a server that is not on this machine)", u, err)
		}
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "load: "+format+"\n", args...)
		}
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t0 := time.Now()
	rec := newRecorder(t0)
	r := &Report{
		Scenario: string(cfg.Scenario), Server: strings.Join(cfg.Servers, ","), RunID: randomHex(3), Started: t0.UTC(), Seed: seed,
		GeneratorSharesCPUs: sharesHosts(ctx, cfg.Servers),
		Settings: Settings{
			Tenants: cfg.Tenants, CredentialsPerTenant: cfg.CredentialsPerTenant, PhaseSeconds: cfg.Duration.Seconds(),
			ThinkMinMs: ms(cfg.ThinkMin), ThinkMaxMs: ms(cfg.ThinkMax), XorbMinBytes: cfg.XorbMinBytes, XorbMaxBytes: cfg.XorbMaxBytes,
			RSSOverheadBytes: cfg.RSSOverheadBytes,
		},
	}
	if cfg.Scenario == Abuse {
		a := cfg.Abuser
		r.Settings.FloodRate, r.Settings.Readers, r.Settings.BigXorbBytes = a.FloodRate, a.Readers, a.BigXorbBytes
		r.Settings.ReadBytesPerSecond, r.Settings.QuotaRate, r.Settings.SprayRate = a.ReadBytesPerSecond, a.QuotaRate, a.SprayRate
	}

	// nodeAdm[i] reads node i's metrics and its view of a tenant's limits;
	// admin calls that change something go to the first node (adm), and
	// the shared index carries them to the others.
	ahc := &http.Client{Transport: newTransport(16, nil)}
	defer ahc.CloseIdleConnections()
	nodeAdm := make([]*admin, len(ns))
	for i := range ns {
		nodeAdm[i] = &admin{base: ns[i], metrics: cfg.MetricsURLs[i], token: cfg.AdminToken, hc: ahc}
		r.Nodes = append(r.Nodes, NodeReport{URL: ns[i], MetricsURL: cfg.MetricsURLs[i]})
	}
	adm := nodeAdm[0]
	if len(ns) > 1 {
		progress("%d nodes: %s; admin calls go to the first", len(ns), strings.Join(ns, ", "))
	}
	// Check the admin token before anything else, on every node.
	for _, na := range nodeAdm {
		if err := na.call(ctx, "GET", "/credentials?tenant=load-check", nil, nil); err != nil {
			return nil, fmt.Errorf("cannot use the admin API of %s with this token: %w", na.base, err)
		}
	}
	reported := make([]string, len(ns))
	known := make([]bool, len(ns))
	for i, na := range nodeAdm {
		var err error
		if reported[i], known[i], err = na.serverCPUs(ctx); err != nil {
			return nil, fmt.Errorf("read the metrics of %s: %w", na.base, err)
		}
		r.Nodes[i].CPUs = reported[i]
	}
	serverCPUs, err := checkNodeCPUs(ns, reported, known, cfg.ServerCPUs)
	if err != nil {
		return nil, err
	}
	r.Layout = newLayout(serverCPUs, cfg.LoadCPUs)
	progress("layout: %s", r.Layout)

	mem := &memSampler{nodes: nodeAdm, t0: t0}
	memCtx, stopMem := context.WithCancel(ctx)
	memDone := make(chan struct{})
	go func() { defer close(memDone); mem.run(memCtx, cfg.ScrapeInterval) }()
	defer func() { stopMem(); <-memDone }()

	tr := newTransport(cfg.Tenants*cfg.CredentialsPerTenant+64, nil)
	defer tr.CloseIdleConnections()
	c := &client{hc: &http.Client{Transport: tr}, rec: rec, timeout: cfg.RequestTimeout}
	h := &honest{cfg: cfg, nodes: ns, c: c, rec: rec, seed: seed, targets: tg}

	// Credentials, revoked on the way out whatever happens, and the
	// tenants, cleaned up unless the run keeps them.
	var made []credential
	var madeMu sync.Mutex
	var runTenants []string // every tenant the run makes
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		revoked, removed := cleanUp(rctx, adm, made, runTenants, cfg.KeepTenants)
		progress("revoked %d of %d credentials", revoked, len(made))
		if cfg.KeepTenants {
			progress("kept the %d tenants of run %s (load-%s-…) and their limits", len(runTenants), r.RunID, r.RunID)
		} else {
			progress("removed the limits records of %d of %d tenants (the tenants stay known, with their stored bytes: openxet tenants delete removes them)", removed, len(runTenants))
		}
	}()
	progress("run %s: creating %d tenants × %d credentials", r.RunID, cfg.Tenants, cfg.CredentialsPerTenant)
	for i := range cfg.Tenants {
		h.tenants = append(h.tenants, &tenant{idx: int32(i), name: fmt.Sprintf("load-%s-t%04d", r.RunID, i)})
		runTenants = append(runTenants, h.tenants[i].name)
	}
	err = parallel(ctx, 8, len(h.tenants), func(i int) error {
		t := h.tenants[i]
		for range cfg.CredentialsPerTenant {
			cr, err := adm.createCredential(ctx, t.name)
			if err != nil {
				return err
			}
			madeMu.Lock()
			made = append(made, cr)
			madeMu.Unlock()
			t.creds = append(t.creds, cr)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create credentials: %w", err)
	}

	// Every tenant uploads one file first, so that it has something to read.
	progress("warm-up: one upload per tenant")
	err = parallel(ctx, 16, len(h.tenants), func(i int) error {
		t := h.tenants[i]
		h.upload(ctx, t, 0, newRand(seed, uint64(i)), newCursor(i, len(ns)))
		if t.randomFile(newRand(seed, 0)) == nil {
			return fmt.Errorf("tenant %s could not upload its first file", t.name)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		r.Notes = append(r.Notes, "warm-up: "+err.Error())
	}

	var ab *abuser
	if cfg.Scenario == Abuse && ctx.Err() == nil {
		ab, err = newAbuser(ctx, cfg, ns, rec, r.RunID, func(c credential) {
			madeMu.Lock()
			made = append(made, c)
			madeMu.Unlock()
		})
		if err != nil {
			return nil, err
		}
		runTenants = append(runTenants, ab.name)
		progress("abuser %s: uploading a %s xorb to hold reads of, setting its quota", ab.name, fmtBytes(cfg.Abuser.BigXorbBytes))
		if err := ab.setup(ctx, adm, nodeAdm, seed, tg); err != nil {
			return nil, fmt.Errorf("abuser setup: %w", err)
		}
		defer ab.c.hc.CloseIdleConnections()
		if ab.cfg.CredentialRequestsPerSecond > 0 {
			progress("abuser %s: waiting until every node enforces its credential limit (%g/s, burst %d)", ab.name, ab.cfg.CredentialRequestsPerSecond, ab.cfg.CredentialBurst)
			ab.awaitOverride(ctx, rec)
		}
		if cfg.AbuserCommand != nil {
			ab.proc, err = startAbuserProcess(ctx, cfg.AbuserCommand(ctx), ab, ab.plan(cfg, t0, seed))
			if err != nil {
				return nil, err
			}
			defer ab.proc.stop(nil)
			r.Layout.Abuser = "own process: " + ab.proc.ready
		} else {
			r.Layout.Abuser = "in the load process"
		}
		progress("abuser: %s", r.Layout.Abuser)
	}

	// The honest workers run through every phase; the first phase starts
	// once their first operations are spread out.
	stop := make(chan struct{})
	opsCtx, cancelOps := context.WithCancel(ctx)
	defer cancelOps()
	honestDone := make(chan struct{})
	go func() { defer close(honestDone); h.run(opsCtx, stop) }()
	sleepCtx(ctx, cfg.ThinkMax)

	var phases []phaseSpan
	var clocks []phaseClocks // per phase
	// runPhase runs one phase; begin, when set, starts what the phase adds
	// once the counters it is measured by were read, so that all it does
	// falls in the phase (the abuser's first held reads take their turns
	// at once).
	runPhase := func(name string, begin func()) {
		srvBefore, _ := adm.clock(ctx)
		before := schedSnapshot()
		cpuBefore, cpuOK := selfCPU()
		p := phaseSpan{name: name, start: rec.since(time.Now())}
		if begin != nil {
			begin()
		}
		progress("phase %s: %s", name, cfg.Duration)
		sleepCtx(ctx, cfg.Duration)
		if cfg.holdPhase != nil {
			for ctx.Err() == nil && !cfg.holdPhase(p, rec, ab) {
				select {
				case <-ctx.Done():
				case <-rec.wake:
				}
			}
		}
		p.end = rec.since(time.Now())
		lag := schedBetween(before, schedSnapshot())
		cpuAfter, cpuAfterOK := selfCPU()
		srvAfter, _ := adm.clock(ctx)
		clocks = append(clocks, phaseClocks{
			loadLag:     lag,
			serverLag:   newServerLag(srvBefore.sched, srvAfter.sched, srvAfter.schedSum-srvBefore.schedSum),
			loadCPU:     counterDelta(cpuBefore, cpuAfter, cpuOK && cpuAfterOK),
			serverCPU:   counterDelta(srvBefore.cpu, srvAfter.cpu, srvBefore.cpuOK && srvAfter.cpuOK),
			serverTurns: counterDelta(srvBefore.turns, srvAfter.turns, srvBefore.turnsOK && srvAfter.turnsOK),
		})
		phases = append(phases, p)
	}
	// abDone is closed once the abuser has stopped; nil when it never ran.
	var abDone chan struct{}
	if cfg.Scenario == ManyTenants {
		runPhase("many_tenants", nil)
	} else {
		runPhase("baseline", nil)
		if ctx.Err() == nil {
			abCtx, stopAb := context.WithCancel(ctx)
			abDone = make(chan struct{})
			runPhase("abuse", func() {
				go func() {
					defer close(abDone)
					if ab.proc == nil {
						ab.run(abCtx)
					} else if err := ab.proc.run(abCtx); err != nil {
						rec.fail(failCheck, "%v", err)
					}
					if cfg.abuserEnd != nil {
						cfg.abuserEnd(stop)
					}
				}()
			})
			stopAb()
		}
	}

	// Drain: no new operations; the running ones get DrainTimeout. The
	// abuser stops meanwhile: its process runs at the lowest CPU priority
	// and may need the CPU the honest tenants would keep busy, even to
	// exit once killed, so they stop first.
	close(stop)
	progress("draining operations in progress")
	drain := time.NewTimer(cfg.DrainTimeout)
	select {
	case <-honestDone:
	case <-drain.C:
		if n := h.inOps.Load(); n > 0 && ctx.Err() == nil {
			rec.fail(failUnfinished, "%d honest operations still running %s after the last phase ended", n, cfg.DrainTimeout)
		}
		cancelOps()
		<-honestDone
	case <-ctx.Done():
		cancelOps()
		<-honestDone
	}
	drain.Stop()
	if abDone != nil {
		select {
		case <-abDone:
		default:
			progress("waiting for the abuser to stop")
			<-abDone
		}
	}
	r.Interrupted = ctx.Err() != nil

	// Checks that need the server after the load.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stopMem()
	<-memDone
	mem.sample(fctx)
	if !r.Interrupted {
		r.Accounting = checkAccounting(fctx, nodeAdm, h.tenants, rec)
	}
	if ab != nil {
		r.Abuser = ab.report(fctx, adm, rec)
		r.Notes = append(r.Notes, ab.notes...)
	}
	perNode, total := mem.report(cfg.RSSOverheadBytes, rec)
	r.Memory = total
	for i, m := range perNode {
		r.Nodes[i].Memory = m
		if !m.Measured {
			r.Notes = append(r.Notes, fmt.Sprintf("memory of %s not measured: %s", ns[i], mem.why(i)))
		}
	}

	reqs, ops, failures, messages := rec.snapshot()
	names := make([]string, len(h.tenants))
	for i, t := range h.tenants {
		names[i] = t.name
	}
	for i, p := range phases {
		pr := PhaseReport{Name: p.name, StartSeconds: p.start.Seconds(), DurationSeconds: (p.end - p.start).Seconds()}
		pr.Honest = classReport(classHonest, p, reqs, ops, honestRoutes)
		if ab != nil && p.name == "abuse" {
			cr := classReport(classAbuser, p, reqs, nil, abuserRoutes)
			pr.Abuser = &cr
		}
		half := phaseSpan{name: p.name, start: p.start + (p.end-p.start)/2, end: p.end}
		pr.SecondHalfHonestP99ms = classReport(classHonest, half, reqs, nil, nil).Latency.P99ms
		c := clocks[i]
		pr.LoadLag = c.loadLag
		pr.ServerLag, pr.ServerLagMeanMs = c.serverLag.summary, c.serverLag.meanMs
		pr.ServerCPUSeconds, pr.ServerBusy = cpuShare(c.serverCPU, pr.DurationSeconds)
		pr.LoadCPUSeconds, pr.LoadBusy = cpuShare(c.loadCPU, pr.DurationSeconds)
		if c.serverTurns >= 0 {
			n := int64(c.serverTurns)
			pr.ServerTurns = &n
		}
		pr.Tenants = tenantThroughput(names, p, ops)
		pr.JainOps, pr.JainBytes = jainOf(pr.Tenants)
		r.Phases = append(r.Phases, pr)
	}
	for i := range r.Nodes {
		r.Nodes[i].Phases = nodePhases(i, phases, reqs)
	}
	if len(r.Phases) == 2 {
		r.Comparison = compare(r.Phases[0], r.Phases[1])
	}
	if len(phases) > 0 {
		r.Timeline = timeline(reqs, phases[0].start, phases[len(phases)-1].end)
	}
	r.Failures, r.FailureMessages = failures, messages
	r.finish()
	return r, nil
}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// parallel runs fn(0..n-1) on at most k goroutines and returns the first
// error; after one, no new calls start.
func parallel(ctx context.Context, k, n int, fn func(i int) error) error {
	var (
		mu   sync.Mutex
		next int
		err  error
		wg   sync.WaitGroup
	)
	for range min(k, n) {
		wg.Go(func() {
			for {
				mu.Lock()
				if err != nil || next >= n || ctx.Err() != nil {
					if err == nil && ctx.Err() != nil {
						err = ctx.Err()
					}
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if e := fn(i); e != nil {
					mu.Lock()
					if err == nil {
						err = e
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return err
}

// cleanUp ends a run on the server: it revokes the credentials the run
// made, then, unless keep, removes what is left of its tenants
// (admin.removeTenant). It returns how many credentials were revoked and
// tenants removed; failures are counted out, not returned.
func cleanUp(ctx context.Context, adm *admin, creds []credential, tenants []string, keep bool) (revoked, removed int) {
	revoked = countOK(ctx, len(creds), func(i int) error { return adm.revoke(ctx, creds[i].ID) })
	if !keep {
		removed = countOK(ctx, len(tenants), func(i int) error { return adm.removeTenant(ctx, tenants[i]) })
	}
	return revoked, removed
}

// countOK runs fn(0..n-1) on 8 goroutines and counts the calls that
// succeeded.
func countOK(ctx context.Context, n int, fn func(i int) error) int {
	var mu sync.Mutex
	ok := 0
	parallel(ctx, 8, n, func(i int) error {
		if fn(i) == nil {
			mu.Lock()
			ok++
			mu.Unlock()
		}
		return nil
	})
	return ok
}

// newAbuser makes the abuser's clients: its own (the honest tenants'
// address) and the sprayer's, from SprayAddr when that address can reach
// every node and differs from the one the honest tenants come from.
func newAbuser(ctx context.Context, cfg Config, ns nodes, rec *recorder, runID string, track func(credential)) (*abuser, error) {
	a := cfg.Abuser
	ab := &abuser{
		cfg: a, nodes: ns, rec: rec, name: "load-" + runID + "-abuser", track: track,
		c:       &client{hc: &http.Client{Transport: newTransport(a.Readers+a.FloodWorkers+a.QuotaWorkers+8, nil)}, rec: rec, timeout: cfg.RequestTimeout},
		floodBy: make([]envCounters, len(ns)), sprayBy: make([]envCounters, len(ns)),
		holdOpen: make([]atomic.Int64, len(ns)), holdOpenPeak: make([]atomic.Int64, len(ns)),
		overrideWait: overrideWait,
	}
	if a.SprayAddr == "none" {
		ab.notes = append(ab.notes, "bad-token sprayer off (--spray-addr none)")
		return ab, nil
	}
	ip := net.ParseIP(a.SprayAddr)
	for _, n := range ns {
		hostport, err := serverHostPort(n)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", hostport)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", hostport, err)
		}
		own := conn.LocalAddr().(*net.TCPAddr).IP
		conn.Close()
		if own.Equal(ip) {
			ab.notes = append(ab.notes, fmt.Sprintf("bad-token sprayer off: honest tenants already reach %s from %s", n, ip))
			return ab, nil
		}
		sd := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
		conn, err = sd.DialContext(ctx, "tcp", hostport)
		if err != nil {
			ab.notes = append(ab.notes, fmt.Sprintf("bad-token sprayer off: cannot reach %s from %s (%v)", n, ip, err))
			return ab, nil
		}
		conn.Close()
	}
	ab.spray = &client{hc: &http.Client{Transport: newTransport(a.SprayWorkers+2, ip)}, rec: rec, timeout: cfg.RequestTimeout}
	return ab, nil
}

func serverHostPort(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// report gathers the abuser's figures and checks the envelopes of the
// limits it ran into, on each node against that node's own limit (rate
// limits and in-flight caps are per node): the flooding credential's rate,
// the sprayer's auth-failure rate and the held reads' in-flight cap; and,
// over all nodes, the quota (quotas are global).
func (ab *abuser) report(ctx context.Context, adm *admin, rec *recorder) *AbuserReport {
	reqs, _, _, _ := rec.snapshot()
	ar := &AbuserReport{Tenant: ab.name, Refusals: map[string]int{}, HeldPeak: ab.heldPeak.Load(), HeldBytes: ab.heldBytes.Load(), QuotaStored: ab.quotaStored.Load()}
	byAttack := map[string]*AttackReport{}
	inFlightRefused := make([]int, len(ab.nodes))
	for _, r := range reqs {
		if r.class != classAbuser {
			continue
		}
		at := byAttack[r.route]
		if at == nil {
			at = &AttackReport{Attack: r.route, Statuses: map[string]int{}, Refusals: map[string]int{}}
			byAttack[r.route] = at
		}
		at.Requests++
		st := fmt.Sprint(r.status)
		at.Statuses[st]++
		if isRefusalStatus(int(r.status)) {
			k := st + " " + r.code
			at.Refusals[k]++
			ar.Refusals[k]++
		}
		if r.route == routeHold && r.code == codeInFlight && r.node >= 0 && int(r.node) < len(ab.nodes) {
			inFlightRefused[r.node]++
		}
	}
	for _, name := range abuserRoutes {
		if at := byAttack[name]; at != nil {
			ar.Attacks = append(ar.Attacks, *at)
		}
	}
	ab.checkNodes(ar, inFlightRefused, rec)
	ab.checkQuota(ctx, adm, ar, rec)
	if ab.cfg.QuotaWorkers > 0 && ar.QuotaStored == 0 && ab.cfg.QuotaHeadroomBytes >= ab.cfg.QuotaXorbBytes {
		ab.notes = append(ab.notes, "no quota upload was stored although the headroom had room for one")
	}
	return ar
}

// checkNodes fills in ar's envelopes, node by node and summed, and checks
// each node against its own limits: the flood against its credential
// limit for the abuser, the sprayer against its auth-failure limit, the
// held reads against its in-flight cap (inFlightRefused[i] is how many
// node i refused for it).
func (ab *abuser) checkNodes(ar *AbuserReport, inFlightRefused []int, rec *recorder) {
	floods, sprays := ab.floodEnvelopes(), ab.sprayEnvelopes()
	ar.Flood = sumEnvelopes("credential", floods)
	readers := make([]int, len(ab.nodes))
	for i := range ab.cfg.Readers {
		if n := ab.holds[i%len(ab.holds)].node; n >= 0 {
			readers[n]++
		}
	}
	var floodIdle, sprayIdle []string
	for i, n := range ab.nodes {
		nr := AbuserNodeReport{Node: n, Flood: floods[i], HoldReaders: readers[i], HoldOpenPeak: ab.holdOpenPeak[i].Load(),
			InFlightLimit: ab.nodeLimits[i].MaxInFlightPerCredential, InFlightRefusals: inFlightRefused[i]}
		if s := ab.overrideSeconds; i < len(s) && s[i] >= 0 {
			nr.OverrideSeconds = &s[i]
		}
		if ab.nodeLimits[i].CredentialRequestsPerSecond > 0 {
			if e := floods[i]; e.Admitted > e.Allowed {
				rec.fail(failEnvelope, "%s admitted %d requests of the flooding credential in %.1fs; its limit of %g/s with burst %d allows %d there",
					n, e.Admitted, e.Seconds, ab.nodeLimits[i].CredentialRequestsPerSecond, ab.nodeLimits[i].CredentialBurst, e.Allowed)
			} else if e.Offered <= e.Allowed {
				floodIdle = append(floodIdle, fmt.Sprintf("%s (%d sent in %.1fs, %d allowed)", n, e.Offered, e.Seconds, e.Allowed))
			}
		}
		if ab.spray != nil {
			e := sprays[i]
			nr.Spray = &e
			if na := ab.cfg.AuthFailuresPerMinute; na > 0 {
				if e.Admitted > e.Allowed {
					rec.fail(failEnvelope, "%s checked %d bad tokens from %s in %.1fs; %d failures per minute allows %d there", n, e.Admitted, ab.cfg.SprayAddr, e.Seconds, na, e.Allowed)
				} else if e.Offered <= e.Allowed {
					sprayIdle = append(sprayIdle, fmt.Sprintf("%s (%d sent in %.1fs, %d allowed)", n, e.Offered, e.Seconds, e.Allowed))
				}
			}
		}
		// A hold read is open on the node at most from before it is sent
		// until after it is closed, and each reader may have one more the
		// node has not let go yet (a read whose last byte arrived before
		// the node's handler returned): 2 × readers bounds what the node
		// can count. Within its cap, no refusal is right.
		if nr.InFlightLimit > 0 && 2*nr.HoldReaders <= nr.InFlightLimit && nr.InFlightRefusals > 0 {
			rec.fail(failInFlight, "%s refused %d held reads for its in-flight cap of %d, but only %d readers ever read from it (at most %d open at once)",
				n, nr.InFlightRefusals, nr.InFlightLimit, nr.HoldReaders, nr.HoldOpenPeak)
		}
		ar.Nodes = append(ar.Nodes, nr)
	}
	if len(floodIdle) > 0 {
		ab.notes = append(ab.notes, "the flood sent no more than the credential limit allows on "+strings.Join(floodIdle, ", ")+": that limit was not exercised there")
	}
	if ab.spray != nil {
		e := sumEnvelopes("auth_failures", sprays)
		ar.Spray = &e
		if len(sprayIdle) > 0 {
			ab.notes = append(ab.notes, "the sprayer sent no more bad tokens than the auth-failure limit allows on "+strings.Join(sprayIdle, ", ")+": that limit was not exercised there")
		}
	}
}

// checkQuota reads the abuser's usage and checks it against its quota,
// which is global: with one node exactly, with several within the xorbs
// in flight at once (docs/design.md §13).
func (ab *abuser) checkQuota(ctx context.Context, adm *admin, ar *AbuserReport, rec *recorder) {
	ar.QuotaInFlightPeak = ab.quotaInFlightMax.Load()
	if len(ab.nodes) > 1 {
		// docs/design.md §13: across nodes a quota may be passed by the xorbs
		// already in flight when the counter crossed it.
		ar.QuotaOvershootAllowedBytes = ar.QuotaInFlightPeak * ab.cfg.QuotaXorbBytes
	}
	if lim, err := adm.limits(ctx, ab.name); err != nil {
		rec.fail(failCheck, "read the abuser's usage: %v", err)
	} else {
		ar.QuotaBytes, ar.UsageBytes = lim.QuotaBytes, lim.UsageBytes
		switch over := lim.UsageBytes - lim.QuotaBytes; {
		case lim.QuotaBytes < 0 || over <= 0:
		case over > ar.QuotaOvershootAllowedBytes && len(ab.nodes) == 1:
			rec.fail(failEnvelope, "the abuser stores %d bytes, over its quota of %d", lim.UsageBytes, lim.QuotaBytes)
		case over > ar.QuotaOvershootAllowedBytes:
			rec.fail(failEnvelope, "the abuser stores %d bytes over all nodes, %d over its quota of %d; at most %d quota uploads were in flight at once, so at most %d bytes over it are allowed",
				lim.UsageBytes, over, lim.QuotaBytes, ar.QuotaInFlightPeak, ar.QuotaOvershootAllowedBytes)
		default:
			ab.notes = append(ab.notes, fmt.Sprintf("the abuser stores %d bytes over its quota of %d, within what its %d quota uploads in flight at once may add across nodes; the quota was not exact at the index transaction",
				over, lim.QuotaBytes, ar.QuotaInFlightPeak))
		}
	}
}

// codeInFlight is the refusal code of a request over its credential's
// in-flight cap.
const codeInFlight = "rate_limited/in_flight"

// envelope is the allowance of a limit of perSecond with burst over the
// window from first (unix nanos of the first request sent) to last (of the
// last answer), against what was offered and admitted in it.
func envelope(limit string, first, last, offered, admitted int64, perSecond float64, burst int) EnvelopeReport {
	e := EnvelopeReport{Limit: limit, Offered: offered, Admitted: admitted}
	if first > 0 && last > first {
		e.Seconds = time.Duration(last - first).Seconds()
	}
	// One more for the rounding of a partly refilled bucket.
	e.Allowed = int64(burst) + int64(math.Ceil(perSecond*e.Seconds)) + 1
	return e
}

// sumEnvelopes is the deployment's envelope: what all nodes were offered
// and admitted, against the sum of their allowances (N nodes admit up to N
// times one node's limit), over the window from the first request to the
// last answer on any node. With one node it is that node's envelope.
func sumEnvelopes(limit string, per []EnvelopeReport) EnvelopeReport {
	if len(per) == 1 {
		return per[0]
	}
	e := EnvelopeReport{Limit: limit}
	for _, p := range per {
		e.Offered += p.Offered
		e.Admitted += p.Admitted
		e.Allowed += p.Allowed
		e.Seconds = max(e.Seconds, p.Seconds)
	}
	return e
}

// floodEnvelopes is the flooding credential's envelope on each node so
// far, against that node's credential limit for the abuser.
func (ab *abuser) floodEnvelopes() []EnvelopeReport {
	out := make([]EnvelopeReport, len(ab.nodes))
	for i := range out {
		c := &ab.floodBy[i]
		lim := ab.nodeLimits[i]
		out[i] = envelope("credential", c.first.Load(), c.last.Load(), c.answered.Load(), c.admitted.Load(), lim.CredentialRequestsPerSecond, lim.CredentialBurst)
	}
	return out
}

// sprayEnvelopes is the sprayer's auth-failure envelope on each node so
// far.
func (ab *abuser) sprayEnvelopes() []EnvelopeReport {
	n := ab.cfg.AuthFailuresPerMinute
	out := make([]EnvelopeReport, len(ab.nodes))
	for i := range out {
		c := &ab.sprayBy[i]
		e := envelope("auth_failures", c.first.Load(), c.last.Load(), c.answered.Load(), c.admitted.Load(), float64(n)/60, n)
		// The allowance is checked before a token is verified and spent
		// after it fails: w concurrent sprayers may all pass one check,
		// at the start and at each refill.
		if w := int64(ab.cfg.SprayWorkers); w > 1 {
			e.Allowed += (w - 1) * (1 + int64(math.Ceil(float64(n)/60*e.Seconds)))
		}
		out[i] = e
	}
	return out
}

// checkAccounting checks that a tenant's stored bytes are one global
// account: each honest tenant's usage, read back through one node (tenant
// i through node i mod N, whichever nodes its uploads went through), must
// be at least the xorbs the run stored for it and at most those plus the
// ones whose fate it cannot know. It returns what it compared.
func checkAccounting(ctx context.Context, nodeAdm []*admin, tenants []*tenant, rec *recorder) *AccountingReport {
	ar := &AccountingReport{Tenants: len(tenants)}
	var mu sync.Mutex
	parallel(ctx, 8, len(tenants), func(i int) error {
		t := tenants[i]
		na := nodeAdm[i%len(nodeAdm)]
		stored, unsure := t.stored.Load(), t.unsure.Load()
		lim, err := na.limits(ctx, t.name)
		mu.Lock()
		defer mu.Unlock()
		ar.StoredBytes += stored
		ar.UnsureBytes += unsure
		if err != nil {
			rec.fail(failCheck, "read the usage of %s from %s: %v", t.name, na.base, err)
			return nil
		}
		ar.Checked++
		ar.UsageBytes += lim.UsageBytes
		if lim.UsageBytes < stored || lim.UsageBytes > stored+unsure {
			ar.Mismatches++
			rec.fail(failAccounting, "%s shows %s using %d bytes; the run stored %d for it through all nodes (and %d more it cannot be sure of)",
				na.base, t.name, lim.UsageBytes, stored, unsure)
		}
		return nil
	})
	return ar
}

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

// nodePhases counts, for node i and each phase, the requests each class
// sent it and those its rate limits admitted (any answer but 429):
// admitted rates are per node, as the limits are.
func nodePhases(i int, phases []phaseSpan, reqs []reqRecord) []NodePhase {
	out := make([]NodePhase, len(phases))
	for pi, p := range phases {
		np := NodePhase{Name: p.name}
		var ab NodeTraffic
		for _, r := range reqs {
			if int(r.node) != i || !p.has(r.start) {
				continue
			}
			t := &np.Honest
			if r.class == classAbuser {
				t = &ab
			}
			t.Requests++
			switch r.status {
			case 0:
			case http.StatusTooManyRequests:
				t.RateLimited++
			default:
				t.Admitted++
			}
		}
		secs := (p.end - p.start).Seconds()
		for _, t := range []*NodeTraffic{&np.Honest, &ab} {
			if secs > 0 {
				t.AdmittedPerSecond = float64(t.Admitted) / secs
			}
		}
		if ab.Requests > 0 {
			np.Abuser = &ab
		}
		out[pi] = np
	}
	return out
}

// phaseClocks is what a phase measured beside its requests: how long the
// load process's goroutines and the server's waited for a CPU, and the CPU
// seconds each process used (-1 when unknown).
type phaseClocks struct {
	loadLag            LatencySummary
	serverLag          serverLag
	loadCPU, serverCPU float64
	serverTurns        float64 // -1: unknown
}

// counterDelta is a counter's increase between two readings (a process's
// CPU seconds, the server's turns), -1 unless both were read (ok).
func counterDelta(before, after float64, ok bool) float64 {
	if !ok {
		return -1
	}
	return after - before
}

// cpuShare is a phase's CPU seconds and their share of one CPU over the
// phase's length; both 0 when the seconds are unknown.
func cpuShare(seconds, phaseSeconds float64) (float64, float64) {
	if seconds < 0 || phaseSeconds <= 0 {
		return 0, 0
	}
	return seconds, seconds / phaseSeconds
}
