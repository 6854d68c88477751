package load

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
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
//
// The steps, in order: setUp (nodes, admin token, layout, memory sampler,
// tenants and credentials), warmUp, setUpAbuser (the abuse scenario only),
// runPhases, drain, assemble.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ru := &runner{cfg: cfg, ns: nodes(cfg.Servers)}
	defer ru.close()
	if err := ru.setUp(ctx); err != nil {
		return nil, err
	}
	ru.warmUp(ctx)
	if cfg.Scenario == Abuse && ctx.Err() == nil {
		if err := ru.setUpAbuser(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Scenario == Public && ctx.Err() == nil {
		if err := ru.setUpPublic(ctx); err != nil {
			return nil, err
		}
	}
	ru.runPhases(ctx)
	ru.drain(ctx)
	return ru.assemble(ctx), nil
}

// runner is what the steps of one Run share. Only Run's goroutine uses
// its fields, except made, which madeMu guards.
type runner struct {
	cfg  Config
	ns   nodes
	tg   *targets
	seed uint64
	t0   time.Time
	rec  *recorder
	r    *Report

	// nodeAdm[i] reads node i's metrics and its view of a tenant's limits;
	// admin calls that change something go to the first node (adm), and
	// the shared index carries them to the others.
	nodeAdm []*admin
	adm     *admin
	mem     *memSampler
	stopMem func() // stops the memory sampler and waits for it; safe to call again

	h  *honest
	ab *abuser // nil unless the abuse scenario got as far as its setup
	// pub is the public scenario's readers; nil in the others.
	pub *publicReaders

	madeMu     sync.Mutex
	made       []credential // every credential the run made, revoked by close
	runTenants []string     // every tenant the run makes

	stop       chan struct{} // closed when the honest workers are to start no new operation
	cancelOps  context.CancelFunc
	honestDone chan struct{} // closed once the honest workers returned
	phases     []phaseSpan   // the phases that ran
	clocks     []phaseClocks // per phase
	abDone     chan struct{} // closed once the abuser has stopped; nil when it never ran
	undo       []func()      // what close runs, last first
}

// onClose has close run f; close runs what it was given last first.
func (ru *runner) onClose(f func()) { ru.undo = append(ru.undo, f) }

// close undoes what the steps set up, last first: it stops the honest
// operations and the abuser, revokes the run's credentials (cleanUp),
// stops the memory sampler and closes idle connections.
func (ru *runner) close() {
	for i := len(ru.undo) - 1; i >= 0; i-- {
		ru.undo[i]()
	}
}

func (ru *runner) progress(format string, args ...any) {
	if ru.cfg.Progress != nil {
		fmt.Fprintf(ru.cfg.Progress, "load: "+format+"\n", args...)
	}
}

func (ru *runner) track(c credential) {
	ru.madeMu.Lock()
	ru.made = append(ru.made, c)
	ru.madeMu.Unlock()
}

// setUp checks the targets, starts the report, connects to every node's
// admin API, starts the memory sampler and makes the honest tenants and
// their credentials.
func (ru *runner) setUp(ctx context.Context) error {
	cfg := ru.cfg
	ru.tg = &targets{allowRemote: cfg.AllowRemote}
	for _, u := range append(slices.Clone(cfg.Servers), cfg.MetricsURLs...) {
		if err := ru.tg.check(ctx, u); err != nil {
			return fmt.Errorf("refusing to load %s: %w (pass --allow-remote to load a server that is not on this machine)", u, err)
		}
	}
	ru.seed = cfg.Seed
	if ru.seed == 0 {
		ru.seed = uint64(time.Now().UnixNano())
	}
	ru.t0 = time.Now()
	ru.rec = newRecorder(ru.t0)
	ru.r = newReport(ctx, cfg, ru.t0, ru.seed)
	if err := ru.connect(ctx); err != nil {
		return err
	}
	ru.startMemory(ctx)
	tr := newTransport(cfg.Tenants*cfg.CredentialsPerTenant+64, nil)
	ru.onClose(tr.CloseIdleConnections)
	c := &client{hc: &http.Client{Transport: tr}, rec: ru.rec, timeout: cfg.RequestTimeout}
	ru.h = &honest{cfg: cfg, nodes: ru.ns, c: c, rec: ru.rec, seed: ru.seed, targets: ru.tg}
	return ru.createTenants(ctx)
}

// newReport is the report of a run that has not run yet: what it was
// asked to do.
func newReport(ctx context.Context, cfg Config, t0 time.Time, seed uint64) *Report {
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
	return r
}

// connect makes an admin client per node, checks the admin token on
// every node before anything else, and lays out the CPUs from what the
// nodes report.
func (ru *runner) connect(ctx context.Context) error {
	cfg, ns := ru.cfg, ru.ns
	ahc := &http.Client{Transport: newTransport(16, nil)}
	ru.onClose(ahc.CloseIdleConnections)
	ru.nodeAdm = make([]*admin, len(ns))
	for i := range ns {
		ru.nodeAdm[i] = &admin{base: ns[i], metrics: cfg.MetricsURLs[i], token: cfg.AdminToken, hc: ahc}
		ru.r.Nodes = append(ru.r.Nodes, NodeReport{URL: ns[i], MetricsURL: cfg.MetricsURLs[i]})
	}
	ru.adm = ru.nodeAdm[0]
	if len(ns) > 1 {
		ru.progress("%d nodes: %s; admin calls go to the first", len(ns), strings.Join(ns, ", "))
	}
	for _, na := range ru.nodeAdm {
		if err := na.call(ctx, "GET", "/credentials?tenant=load-check", nil, nil); err != nil {
			return fmt.Errorf("cannot use the admin API of %s with this token: %w", na.base, err)
		}
	}
	reported := make([]string, len(ns))
	known := make([]bool, len(ns))
	for i, na := range ru.nodeAdm {
		var err error
		if reported[i], known[i], err = na.serverCPUs(ctx); err != nil {
			return fmt.Errorf("read the metrics of %s: %w", na.base, err)
		}
		ru.r.Nodes[i].CPUs = reported[i]
	}
	serverCPUs, err := checkNodeCPUs(ns, reported, known, cfg.ServerCPUs)
	if err != nil {
		return err
	}
	ru.r.Layout = newLayout(serverCPUs, cfg.LoadCPUs)
	ru.progress("layout: %s", ru.r.Layout)
	return nil
}

// startMemory starts scraping every node's memory gauges each
// Config.ScrapeInterval until stopMem.
func (ru *runner) startMemory(ctx context.Context) {
	ru.mem = &memSampler{nodes: ru.nodeAdm, t0: ru.t0}
	memCtx, cancel := context.WithCancel(ctx)
	memDone := make(chan struct{})
	go func() { defer close(memDone); ru.mem.run(memCtx, ru.cfg.ScrapeInterval) }()
	ru.stopMem = func() { cancel(); <-memDone }
	ru.onClose(ru.stopMem)
}

// createTenants makes the honest tenants and their credentials. The
// credentials are revoked on the way out whatever happens, and the
// tenants cleaned up unless the run keeps them.
func (ru *runner) createTenants(ctx context.Context) error {
	cfg, r, h := ru.cfg, ru.r, ru.h
	ru.onClose(func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		revoked, removed := cleanUp(rctx, ru.adm, ru.made, ru.runTenants, cfg.KeepTenants)
		ru.progress("revoked %d of %d credentials", revoked, len(ru.made))
		if cfg.KeepTenants {
			ru.progress("kept the %d tenants of run %s (load-%s-…) and their limits", len(ru.runTenants), r.RunID, r.RunID)
		} else {
			ru.progress("removed the limits records of %d of %d tenants (the tenants stay known, with their stored bytes: openxet tenants delete removes them)", removed, len(ru.runTenants))
		}
	})
	ru.progress("run %s: creating %d tenants × %d credentials", r.RunID, cfg.Tenants, cfg.CredentialsPerTenant)
	for i := range cfg.Tenants {
		h.tenants = append(h.tenants, &tenant{idx: int32(i), name: fmt.Sprintf("load-%s-t%04d", r.RunID, i)})
		ru.runTenants = append(ru.runTenants, h.tenants[i].name)
	}
	err := parallel(ctx, 8, len(h.tenants), func(i int) error {
		t := h.tenants[i]
		for range cfg.CredentialsPerTenant {
			cr, err := ru.adm.createCredential(ctx, t.name)
			if err != nil {
				return err
			}
			ru.track(cr)
			t.creds = append(t.creds, cr)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create credentials: %w", err)
	}
	return nil
}

// warmUp has every tenant upload one file first, so that it has
// something to read. A tenant that could not is a note in the report.
func (ru *runner) warmUp(ctx context.Context) {
	h := ru.h
	ru.progress("warm-up: one upload per tenant")
	err := parallel(ctx, 16, len(h.tenants), func(i int) error {
		t := h.tenants[i]
		h.upload(ctx, t, 0, newRand(ru.seed, uint64(i)), newCursor(i, len(ru.ns)))
		if t.randomFile(newRand(ru.seed, 0)) == nil {
			return fmt.Errorf("tenant %s could not upload its first file", t.name)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		ru.r.Notes = append(ru.r.Notes, "warm-up: "+err.Error())
	}
}

// setUpAbuser makes the abuser's tenant and credentials, uploads what it
// holds reads of, sets its quota and limits, and starts its process when
// Config.AbuserCommand says so. It does not start the attacks.
func (ru *runner) setUpAbuser(ctx context.Context) error {
	cfg, r := ru.cfg, ru.r
	ab, err := newAbuser(ctx, cfg, ru.ns, ru.rec, r.RunID, ru.track)
	if err != nil {
		return err
	}
	ru.ab = ab
	ru.runTenants = append(ru.runTenants, ab.name)
	ru.progress("abuser %s: uploading a %s xorb to hold reads of, setting its quota", ab.name, fmtBytes(cfg.Abuser.BigXorbBytes))
	if err := ab.setup(ctx, ru.adm, ru.nodeAdm, ru.seed, ru.tg); err != nil {
		return fmt.Errorf("abuser setup: %w", err)
	}
	ru.onClose(ab.c.hc.CloseIdleConnections)
	if ab.cfg.CredentialRequestsPerSecond > 0 {
		ru.progress("abuser %s: waiting until every node enforces its credential limit (%g/s, burst %d)", ab.name, ab.cfg.CredentialRequestsPerSecond, ab.cfg.CredentialBurst)
		ab.awaitOverride(ctx, ru.rec)
	}
	if cfg.AbuserCommand != nil {
		ab.proc, err = startAbuserProcess(ctx, cfg.AbuserCommand(ctx), ab, ab.plan(cfg, ru.t0, ru.seed))
		if err != nil {
			return err
		}
		ru.onClose(func() { ab.proc.stop(nil) })
		r.Layout.Abuser = "own process: " + ab.proc.ready
	} else {
		r.Layout.Abuser = "in the load process"
	}
	ru.progress("abuser: %s", r.Layout.Abuser)
	return nil
}

// runPhases starts the honest workers, which run through every phase,
// and runs the scenario's phases: the first starts once the workers'
// first operations are spread out. In the abuse scenario, the abuser
// attacks during the second phase only.
func (ru *runner) runPhases(ctx context.Context) {
	cfg, ab := ru.cfg, ru.ab
	ru.stop = make(chan struct{})
	opsCtx, cancelOps := context.WithCancel(ctx)
	ru.cancelOps = cancelOps
	ru.onClose(cancelOps)
	ru.honestDone = make(chan struct{})
	go func() { defer close(ru.honestDone); ru.h.run(opsCtx, ru.stop) }()
	sleepCtx(ctx, cfg.ThinkMax)

	if cfg.Scenario == ManyTenants {
		ru.runPhase(ctx, "many_tenants", nil)
		return
	}
	ru.runPhase(ctx, "baseline", nil)
	if ctx.Err() != nil {
		return
	}
	if cfg.Scenario == Public {
		for _, ph := range []struct{ name, token string }{{"public", ""}, {"token", ru.pub.reader.Token}} {
			pctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			ru.runPhase(ctx, ph.name, func() {
				go func() { defer close(done); ru.pub.run(pctx, ph.name, ph.token) }()
			})
			stop()
			<-done
			if ctx.Err() != nil {
				return
			}
		}
		return
	}
	abCtx, stopAb := context.WithCancel(ctx)
	ru.abDone = make(chan struct{})
	ru.runPhase(ctx, "abuse", func() {
		go func() {
			defer close(ru.abDone)
			if ab.proc == nil {
				ab.run(abCtx)
			} else if err := ab.proc.run(abCtx); err != nil {
				ru.rec.fail(failCheck, "%v", err)
			}
			if cfg.abuserEnd != nil {
				cfg.abuserEnd(ru.stop)
			}
		}()
	})
	stopAb()
}

// runPhase runs one phase; begin, when set, starts what the phase adds
// once the counters it is measured by were read, so that all it does
// falls in the phase (the abuser's first held reads take their turns
// at once).
func (ru *runner) runPhase(ctx context.Context, name string, begin func()) {
	cfg, rec, adm := ru.cfg, ru.rec, ru.adm
	srvBefore, _ := adm.clock(ctx)
	before := schedSnapshot()
	cpuBefore, cpuOK := selfCPU()
	steal0, total0, hostOK := hostCPU()
	p := phaseSpan{name: name, start: rec.since(time.Now())}
	if begin != nil {
		begin()
	}
	ru.progress("phase %s: %s", name, cfg.Duration)
	sleepCtx(ctx, cfg.Duration)
	if cfg.holdPhase != nil {
		for ctx.Err() == nil && !cfg.holdPhase(p, rec, ru.ab) {
			select {
			case <-ctx.Done():
			case <-rec.wake:
			}
		}
	}
	p.end = rec.since(time.Now())
	lag := schedBetween(before, schedSnapshot())
	cpuAfter, cpuAfterOK := selfCPU()
	steal1, total1, hostAfterOK := hostCPU()
	srvAfter, _ := adm.clock(ctx)
	ru.clocks = append(ru.clocks, phaseClocks{
		loadLag:     lag,
		serverLag:   newServerLag(srvBefore.sched, srvAfter.sched, srvAfter.schedSum-srvBefore.schedSum),
		loadCPU:     counterDelta(cpuBefore, cpuAfter, cpuOK && cpuAfterOK),
		serverCPU:   counterDelta(srvBefore.cpu, srvAfter.cpu, srvBefore.cpuOK && srvAfter.cpuOK),
		serverTurns: counterDelta(srvBefore.turns, srvAfter.turns, srvBefore.turnsOK && srvAfter.turnsOK),
		hostSteal:   stealShare(steal0, total0, hostOK, steal1, total1, hostAfterOK),
	})
	ru.phases = append(ru.phases, p)
}

// drain starts no new operations; the running ones get DrainTimeout. The
// abuser stops meanwhile: its process runs at the lowest CPU priority
// and may need the CPU the honest tenants would keep busy, even to
// exit once killed, so they stop first.
func (ru *runner) drain(ctx context.Context) {
	cfg := ru.cfg
	close(ru.stop)
	ru.progress("draining operations in progress")
	drain := time.NewTimer(cfg.DrainTimeout)
	select {
	case <-ru.honestDone:
	case <-drain.C:
		if n := ru.h.inOps.Load(); n > 0 && ctx.Err() == nil {
			ru.rec.fail(failUnfinished, "%d honest operations still running %s after the last phase ended", n, cfg.DrainTimeout)
		}
		ru.cancelOps()
		<-ru.honestDone
	case <-ctx.Done():
		ru.cancelOps()
		<-ru.honestDone
	}
	drain.Stop()
	if ru.abDone != nil {
		select {
		case <-ru.abDone:
		default:
			ru.progress("waiting for the abuser to stop")
			<-ru.abDone
		}
	}
	ru.r.Interrupted = ctx.Err() != nil
}

// assemble runs the checks that need the server after the load
// (accounting, the abuser's envelopes, memory) and builds the report's
// phases, per-node figures and timeline from what the recorder kept.
func (ru *runner) assemble(ctx context.Context) *Report {
	r, ab := ru.r, ru.ab
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ru.stopMem()
	ru.mem.sample(fctx)
	if !r.Interrupted {
		r.Accounting = checkAccounting(fctx, ru.nodeAdm, ru.h.tenants, ru.rec)
	}
	if ab != nil {
		r.Abuser = ab.report(fctx, ru.adm, ru.rec)
		r.Notes = append(r.Notes, ab.notes...)
	}
	perNode, total := ru.mem.report(ru.cfg.RSSOverheadBytes, ru.rec)
	r.Memory = total
	for i, m := range perNode {
		r.Nodes[i].Memory = m
		if !m.Measured {
			r.Notes = append(r.Notes, fmt.Sprintf("memory of %s not measured: %s", ru.ns[i], ru.mem.why(i)))
		}
	}

	reqs, ops, failures, messages := ru.rec.snapshot()
	phases := ru.phases
	for i, p := range phases {
		r.Phases = append(r.Phases, ru.phaseReport(p, ru.clocks[i], reqs, ops))
	}
	for i := range r.Nodes {
		r.Nodes[i].Phases = nodePhases(i, phases, reqs)
	}
	if len(r.Phases) >= 2 {
		r.Comparison = compare(r.Phases[0], r.Phases[1])
	}
	if ru.pub != nil {
		r.Public = ru.pub.report(r.Phases)
	}
	if len(phases) > 0 {
		r.Timeline = timeline(reqs, phases[0].start, phases[len(phases)-1].end)
	}
	r.Failures, r.FailureMessages = failures, messages
	r.Finish()
	return r
}

// phaseReport is the report of phase p from the requests and operations
// recorded and the clocks the phase read.
func (ru *runner) phaseReport(p phaseSpan, c phaseClocks, reqs []reqRecord, ops []opRecord) PhaseReport {
	pr := PhaseReport{Name: p.name, StartSeconds: p.start.Seconds(), DurationSeconds: (p.end - p.start).Seconds()}
	pr.Honest = classReport(classHonest, p, reqs, ops, honestRoutes)
	if ru.ab != nil && p.name == "abuse" {
		cr := classReport(classAbuser, p, reqs, nil, abuserRoutes)
		pr.Abuser = &cr
	}
	half := phaseSpan{name: p.name, start: p.start + (p.end-p.start)/2, end: p.end}
	pr.SecondHalfHonestP99ms = classReport(classHonest, half, reqs, nil, nil).Latency.P99ms
	pr.LoadLag = c.loadLag
	pr.ServerLag, pr.ServerLagMeanMs = c.serverLag.summary, c.serverLag.meanMs
	pr.ServerCPUSeconds, pr.ServerBusy = cpuShare(c.serverCPU, pr.DurationSeconds)
	pr.LoadCPUSeconds, pr.LoadBusy = cpuShare(c.loadCPU, pr.DurationSeconds)
	if c.hostSteal >= 0 {
		pr.HostSteal = &c.hostSteal
	}
	if c.serverTurns >= 0 {
		n := int64(c.serverTurns)
		pr.ServerTurns = &n
	}
	names := make([]string, len(ru.h.tenants))
	for i, t := range ru.h.tenants {
		names[i] = t.name
	}
	pr.Tenants = tenantThroughput(names, p, ops)
	pr.JainOps, pr.JainBytes = jainOf(pr.Tenants)
	return pr
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
	hostSteal          float64 // share of the host's CPU time stolen; -1: unknown
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
