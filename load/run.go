package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Run runs cfg.Scenario against cfg.Server and returns its report.
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
	tg := &targets{allowRemote: cfg.AllowRemote}
	for _, u := range []string{cfg.Server, cfg.MetricsURL} {
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
		Scenario: string(cfg.Scenario), Server: cfg.Server, RunID: randomHex(3), Started: t0.UTC(), Seed: seed,
		GeneratorSharesCPUs: sharesHost(ctx, cfg.Server),
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

	adm := &admin{base: cfg.Server, metrics: cfg.MetricsURL, token: cfg.AdminToken, hc: &http.Client{Transport: newTransport(16, nil)}}
	defer adm.hc.CloseIdleConnections()
	// Check the admin token before anything else.
	if err := adm.call(ctx, "GET", "/credentials?tenant=load-check", nil, nil); err != nil {
		return nil, fmt.Errorf("cannot use the admin API of %s with this token: %w", cfg.Server, err)
	}
	reported, known, err := adm.serverCPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the server's metrics: %w", err)
	}
	serverCPUs, err := checkServerCPUs(reported, known, cfg.ServerCPUs)
	if err != nil {
		return nil, err
	}
	r.Layout = newLayout(serverCPUs, cfg.LoadCPUs)
	progress("layout: %s", r.Layout)

	mem := &memSampler{adm: adm, t0: t0}
	memCtx, stopMem := context.WithCancel(ctx)
	memDone := make(chan struct{})
	go func() { defer close(memDone); mem.run(memCtx, cfg.ScrapeInterval) }()
	defer func() { stopMem(); <-memDone }()

	tr := newTransport(cfg.Tenants*cfg.CredentialsPerTenant+64, nil)
	defer tr.CloseIdleConnections()
	c := &client{hc: &http.Client{Transport: tr}, rec: rec, timeout: cfg.RequestTimeout}
	h := &honest{cfg: cfg, base: cfg.Server, c: c, rec: rec, seed: seed, targets: tg}

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
			progress("removed the limits records of %d of %d tenants (the server has no tenant deletion yet: the tenants stay known, with their stored bytes)", removed, len(runTenants))
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
		h.upload(ctx, t, 0, newRand(seed, uint64(i)))
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
		ab, err = newAbuser(ctx, cfg, rec, r.RunID, func(c credential) {
			madeMu.Lock()
			made = append(made, c)
			madeMu.Unlock()
		})
		if err != nil {
			return nil, err
		}
		runTenants = append(runTenants, ab.name)
		progress("abuser %s: uploading a %s xorb to hold reads of, setting its quota", ab.name, fmtBytes(cfg.Abuser.BigXorbBytes))
		if err := ab.setup(ctx, adm, seed, tg); err != nil {
			return nil, fmt.Errorf("abuser setup: %w", err)
		}
		defer ab.c.hc.CloseIdleConnections()
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
	var schedLags []LatencySummary // the load process's own, per phase
	var serverLags []serverLag     // the server's, per phase
	runPhase := func(name string) {
		p := phaseSpan{name: name, start: rec.since(time.Now())}
		srvBefore, srvSumBefore, _ := adm.schedLatency(ctx)
		before := schedSnapshot()
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
		schedLags = append(schedLags, schedBetween(before, schedSnapshot()))
		srvAfter, srvSumAfter, _ := adm.schedLatency(ctx)
		serverLags = append(serverLags, newServerLag(srvBefore, srvAfter, srvSumAfter-srvSumBefore))
		phases = append(phases, p)
	}
	if cfg.Scenario == ManyTenants {
		runPhase("many_tenants")
	} else {
		runPhase("baseline")
		if ctx.Err() == nil {
			abCtx, stopAb := context.WithCancel(ctx)
			abDone := make(chan struct{})
			go func() {
				defer close(abDone)
				if ab.proc == nil {
					ab.run(abCtx)
				} else if err := ab.proc.run(abCtx); err != nil {
					rec.fail(failCheck, "%v", err)
				}
			}()
			runPhase("abuse")
			stopAb()
			<-abDone
		}
	}

	// Drain: no new operations; the running ones get DrainTimeout.
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
	r.Interrupted = ctx.Err() != nil

	// Checks that need the server after the load.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	stopMem()
	<-memDone
	mem.sample(fctx)
	if ab != nil {
		r.Abuser = ab.report(fctx, adm, rec)
		r.Notes = append(r.Notes, ab.notes...)
	}
	r.Memory = mem.report(cfg.RSSOverheadBytes, rec)
	if !r.Memory.Measured {
		r.Notes = append(r.Notes, "server memory not measured: "+mem.why())
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
		pr.LoadLag = schedLags[i]
		pr.ServerLag, pr.ServerLagMeanMs = serverLags[i].summary, serverLags[i].meanMs
		pr.Tenants = tenantThroughput(names, p, ops)
		pr.JainOps, pr.JainBytes = jainOf(pr.Tenants)
		r.Phases = append(r.Phases, pr)
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
// the server and differs from the one the honest tenants come from.
func newAbuser(ctx context.Context, cfg Config, rec *recorder, runID string, track func(credential)) (*abuser, error) {
	a := cfg.Abuser
	ab := &abuser{
		cfg: a, base: cfg.Server, rec: rec, name: "load-" + runID + "-abuser", track: track,
		c: &client{hc: &http.Client{Transport: newTransport(a.Readers+a.FloodWorkers+a.QuotaWorkers+8, nil)}, rec: rec, timeout: cfg.RequestTimeout},
	}
	if a.SprayAddr == "none" {
		ab.notes = append(ab.notes, "bad-token sprayer off (--spray-addr none)")
		return ab, nil
	}
	ip := net.ParseIP(a.SprayAddr)
	hostport, err := serverHostPort(cfg.Server)
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
		ab.notes = append(ab.notes, fmt.Sprintf("bad-token sprayer off: honest tenants already reach the server from %s", ip))
		return ab, nil
	}
	sd := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	conn, err = sd.DialContext(ctx, "tcp", hostport)
	if err != nil {
		ab.notes = append(ab.notes, fmt.Sprintf("bad-token sprayer off: cannot reach the server from %s (%v)", ip, err))
		return ab, nil
	}
	conn.Close()
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
// limits it ran into: the flooding credential's rate, the sprayer's
// auth-failure rate, and the quota.
func (ab *abuser) report(ctx context.Context, adm *admin, rec *recorder) *AbuserReport {
	reqs, _, _, _ := rec.snapshot()
	ar := &AbuserReport{Tenant: ab.name, Refusals: map[string]int{}, HeldPeak: ab.heldPeak.Load(), HeldBytes: ab.heldBytes.Load(), QuotaStored: ab.quotaStored.Load()}
	byAttack := map[string]*AttackReport{}
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
	}
	for _, name := range abuserRoutes {
		if at := byAttack[name]; at != nil {
			ar.Attacks = append(ar.Attacks, *at)
		}
	}

	ar.Flood = ab.floodEnvelope()
	if ab.limits.CredentialRequestsPerSecond > 0 {
		if ar.Flood.Admitted > ar.Flood.Allowed {
			rec.fail(failEnvelope, "the flooding credential got %d requests past its limit in %.1fs; %g/s with burst %d allows %d",
				ar.Flood.Admitted, ar.Flood.Seconds, ab.limits.CredentialRequestsPerSecond, ab.limits.CredentialBurst, ar.Flood.Allowed)
		}
		if ar.Flood.Offered <= ar.Flood.Allowed {
			ab.notes = append(ab.notes, fmt.Sprintf("the flood sent %d requests in %.1fs, no more than its credential limit allows (%d): that limit was not exercised",
				ar.Flood.Offered, ar.Flood.Seconds, ar.Flood.Allowed))
		}
	}
	if ab.spray != nil {
		e := ab.sprayEnvelope()
		ar.Spray = &e
		if n := ab.cfg.AuthFailuresPerMinute; n > 0 {
			if e.Admitted > e.Allowed {
				rec.fail(failEnvelope, "%s had %d bad tokens checked in %.1fs; %d failures per minute allows %d", ab.cfg.SprayAddr, e.Admitted, e.Seconds, n, e.Allowed)
			}
			if e.Offered <= e.Allowed {
				ab.notes = append(ab.notes, fmt.Sprintf("the sprayer sent %d bad tokens in %.1fs, no more than the auth-failure limit allows (%d): that limit was not exercised",
					e.Offered, e.Seconds, e.Allowed))
			}
		}
	}
	if lim, err := adm.limits(ctx, ab.name); err != nil {
		rec.fail(failCheck, "read the abuser's usage: %v", err)
	} else {
		ar.QuotaBytes, ar.UsageBytes = lim.QuotaBytes, lim.UsageBytes
		if lim.QuotaBytes >= 0 && lim.UsageBytes > lim.QuotaBytes {
			rec.fail(failEnvelope, "the abuser stores %d bytes, over its quota of %d", lim.UsageBytes, lim.QuotaBytes)
		}
	}
	if ab.cfg.QuotaWorkers > 0 && ar.QuotaStored == 0 && ab.cfg.QuotaHeadroomBytes >= ab.cfg.QuotaXorbBytes {
		ab.notes = append(ab.notes, "no quota upload was stored although the headroom had room for one")
	}
	return ar
}

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

// floodEnvelope is the flooding credential's envelope so far.
func (ab *abuser) floodEnvelope() EnvelopeReport {
	return envelope("credential", ab.floodFirst.Load(), ab.floodLast.Load(), ab.floodAnswered.Load(), ab.floodAdmitted.Load(),
		ab.limits.CredentialRequestsPerSecond, ab.limits.CredentialBurst)
}

// sprayEnvelope is the sprayer's auth-failure envelope so far.
func (ab *abuser) sprayEnvelope() EnvelopeReport {
	n := ab.cfg.AuthFailuresPerMinute
	e := envelope("auth_failures", ab.sprayFirst.Load(), ab.sprayLast.Load(), ab.sprayAnswered.Load(), ab.sprayReached.Load(), float64(n)/60, n)
	// The allowance is checked before a token is verified and spent
	// after it fails: w concurrent sprayers may all pass one check, at
	// the start and at each refill.
	if w := int64(ab.cfg.SprayWorkers); w > 1 {
		e.Allowed += (w - 1) * (1 + int64(math.Ceil(float64(n)/60*e.Seconds)))
	}
	return e
}

// memSampler scrapes the server's memory gauges.
type memSampler struct {
	adm *admin
	t0  time.Time

	mu      sync.Mutex
	samples []MemSample
	err     error
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

func (m *memSampler) sample(ctx context.Context) {
	at := time.Since(m.t0)
	v, err := m.adm.scrape(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			m.err = err
		}
		return
	}
	if _, ok := v[metricBudget]; !ok {
		m.err = fmt.Errorf("%s lacks %s", m.adm.metrics, metricBudget)
		return
	}
	m.samples = append(m.samples, MemSample{AtSeconds: at.Seconds(), RSSBytes: int64(v[metricRSS]), ReservedBytes: int64(v[metricReserved]), BudgetBytes: int64(v[metricBudget])})
	if _, ok := v[metricRSS]; !ok {
		m.err = fmt.Errorf("%s lacks %s", m.adm.metrics, metricRSS)
	}
}

func (m *memSampler) why() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err.Error()
	}
	return "no samples"
}

// report summarizes the samples and fails the run when the peak RSS is over
// budget + overhead (overhead < 0: no check).
func (m *memSampler) report(overhead int64, rec *recorder) MemoryReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	mr := MemoryReport{Samples: m.samples, OverheadBytes: overhead}
	rss := false
	for _, s := range m.samples {
		mr.BudgetBytes = max(mr.BudgetBytes, s.BudgetBytes)
		mr.PeakRSSBytes = max(mr.PeakRSSBytes, s.RSSBytes)
		mr.PeakReservedBytes = max(mr.PeakReservedBytes, s.ReservedBytes)
		rss = rss || s.RSSBytes > 0
	}
	mr.Measured = rss && mr.BudgetBytes > 0
	if !mr.Measured {
		return mr
	}
	mr.LimitBytes = mr.BudgetBytes + max(overhead, 0)
	if overhead >= 0 && mr.PeakRSSBytes > mr.LimitBytes {
		rec.fail(failMemory, "peak RSS %s is over the budget %s plus %s overhead", fmtBytes(mr.PeakRSSBytes), fmtBytes(mr.BudgetBytes), fmtBytes(overhead))
	}
	return mr
}
