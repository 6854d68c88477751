package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"openxet/xet"
)

// abuser is one tenant attacking the server four ways at once, one
// credential per attack, plus a client address spraying bad tokens. Every
// attack reaches every node: the flood, quota and spray workers each take
// the nodes in turn, and the held reads are shared out among the nodes'
// fetch URLs, so that each node's own limits are put to the test and
// checked against what that node admitted.
type abuser struct {
	cfg   AbuserConfig
	nodes nodes
	name  string
	c     *client        // the abuser's own address (the honest tenants' too)
	proc  *abuserProcess // the child running the attacks; nil: they run here
	spray *client        // from SprayAddr; nil when the sprayer is off
	rec   *recorder
	track func(credential) // called with each credential made, to revoke it later
	notes []string

	flood, hold, quota credential
	probe              credential // only to see a limits override in effect (awaitOverride)
	smallFile          *fileSpec
	holds              []holdURL // one per node that answered, in node order
	quotaBodies        [][]byte
	quotaHashes        []xet.Hash
	nodeLimits         []tenantLimits // effective limits after the override was set, as each node shows them (its own defaults + the shared override)
	overrideSet        time.Time      // when the override was answered
	overrideWait       time.Duration  // how long after overrideSet a node may take to show it (overrideWait)
	overrideSeconds    []float64      // per node: seen in effect this long after overrideSet; -1 not probed
	overridePolls      []int          // per node: probes sent (awaitOverride)

	// What the attacks saw, per node, for the report's envelope checks.
	floodBy, sprayBy []envCounters
	holdOpen         []atomic.Int64 // per node: hold reads sent and not yet closed
	holdOpenPeak     []atomic.Int64
	held, heldPeak   atomic.Int64 // hold reads answered and open, all nodes
	heldBytes        atomic.Int64
	quotaReached     atomic.Int64 // quota uploads answered past the rate limits (the quota was checked)
	quotaStored      atomic.Int64 // quota uploads the server stored
	quotaInFlight    atomic.Int64 // quota uploads sent and not yet answered, all nodes
	quotaInFlightMax atomic.Int64
}

// holdURL is a fetch URL of the big xorb as one node made it.
type holdURL struct {
	url      string
	from, to uint64 // its byte range, inclusive
	node     int    // the node it names; -1 when none (server.public_url names another host)
}

// envCounters is what one attack offered one node and what got past a
// limit there.
type envCounters struct {
	answered atomic.Int64 // requests answered, admitted or not
	admitted atomic.Int64 // answers past the limit
	first    atomic.Int64 // unix nanos of the first request sent
	last     atomic.Int64 // unix nanos of the last answer
}

func (e *envCounters) sent(t time.Time) { e.first.CompareAndSwap(0, t.UnixNano()) }

func (e *envCounters) answer(t time.Time, admitted bool) {
	e.last.Store(t.UnixNano())
	if admitted {
		e.admitted.Add(1)
	}
	e.answered.Add(1)
}

// raise sets v to n if n is larger.
func raise(v *atomic.Int64, n int64) {
	for {
		p := v.Load()
		if n <= p || v.CompareAndSwap(p, n) {
			return
		}
	}
}

// setup makes the abuser's credentials and data: a small file to flood
// reconstructions of, a big xorb to hold reads of (with a fetch URL from
// every node), and a quota just above what that costs. adm makes the admin
// calls (the first node); nodeAdm[i] reads node i's view of the abuser's
// limits.
//
// Until its limits are set, the abuser touches the first node only, whose
// limits cache the override replaces at once; the other nodes first hear
// of the abuser after it, and awaitOverride checks that they enforce it.
func (ab *abuser) setup(ctx context.Context, adm *admin, nodeAdm []*admin, seed uint64, tg *targets) error {
	var err error
	creds := []*credential{&ab.flood, &ab.hold, &ab.quota}
	if ab.cfg.CredentialRequestsPerSecond > 0 {
		creds = append(creds, &ab.probe)
	}
	for _, c := range creds {
		if *c, err = adm.createCredential(ctx, ab.name); err != nil {
			return err
		}
		ab.track(*c)
	}
	base := ab.nodes[0]
	up := func(tok string, x *xorbSpec, body []byte) (*fileSpec, error) {
		w := who{}
		a := ab.c.do(ctx, w, "POST", base+"/v1/xorbs/default/"+x.info.Hash.String(), tok, body)
		if a.err != nil || a.status != http.StatusOK {
			return nil, fmt.Errorf("abuser xorb upload: %s", a.describe())
		}
		f, fi := newFile([]*xorbSpec{x})
		a = ab.c.do(ctx, w, "POST", base+"/v1/shards", tok, shardFor(fi, x))
		if a.err != nil || a.status != http.StatusOK {
			return nil, fmt.Errorf("abuser shard upload: %s", a.describe())
		}
		return f, nil
	}
	x, body := newXorb(mix(seed^0xab05e), 200<<10)
	if ab.smallFile, err = up(ab.flood.Token, x, body); err != nil {
		return err
	}
	x, body = newXorb(mix(seed^0xb16), int(ab.cfg.BigXorbBytes))
	big, err := up(ab.hold.Token, x, body)
	if err != nil {
		return err
	}

	lim, err := adm.limits(ctx, ab.name)
	if err != nil {
		return err
	}
	doc := map[string]any{"quota_bytes": lim.UsageBytes + ab.cfg.QuotaHeadroomBytes}
	if ab.cfg.CredentialRequestsPerSecond > 0 {
		doc["credential_requests_per_second"] = ab.cfg.CredentialRequestsPerSecond
		doc["credential_burst"] = ab.cfg.CredentialBurst
	}
	if _, err = adm.setLimits(ctx, ab.name, doc); err != nil {
		return err
	}
	ab.overrideSet = time.Now()
	ab.nodeLimits = make([]tenantLimits, len(ab.nodes))
	for i, na := range nodeAdm {
		if ab.nodeLimits[i], err = na.limits(ctx, ab.name); err != nil {
			return fmt.Errorf("read the abuser's limits from %s: %w", ab.nodes[i], err)
		}
	}

	// A fetch URL of the big xorb from every node: each names the node
	// that made it (unless server.public_url names another host).
	for i, n := range ab.nodes {
		a := ab.c.do(ctx, who{}, "GET", n+"/v1/reconstructions/"+big.hash.String(), ab.hold.Token, nil)
		var rec reconstruction
		if a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &rec) != nil || len(rec.FetchInfo[x.info.Hash.String()]) != 1 {
			return fmt.Errorf("abuser reconstruction of its big file on %s: %s", n, a.describe())
		}
		fe := rec.FetchInfo[x.info.Hash.String()][0]
		if err := tg.check(ctx, fe.URL); err != nil {
			return fmt.Errorf("the server hands out fetch URLs for another host (%s): %w", fe.URL, err)
		}
		hu := holdURL{url: fe.URL, from: fe.URLRange.Start, to: fe.URLRange.End, node: ab.nodes.of(fe.URL)}
		if hu.node != i {
			ab.notes = append(ab.notes, fmt.Sprintf("%s hands out fetch URLs for %s, not for itself (server.public_url?): the held reads' in-flight limit is not checked per node", n, fe.URL))
		}
		ab.holds = append(ab.holds, hu)
	}
	ab.makeQuotaXorbs(seed)
	return nil
}

// makeQuotaXorbs makes the xorbs the quota attack uploads, a function of
// seed: enough new xorbs to fill the headroom and then some; refused ones
// are never stored, so they can be sent again and again.
func (ab *abuser) makeQuotaXorbs(seed uint64) {
	n := int(ab.cfg.QuotaHeadroomBytes/ab.cfg.QuotaXorbBytes) + 4
	n = max(n, 8)
	ab.quotaBodies, ab.quotaHashes = nil, nil
	for i := range n {
		x, body := newXorb(mix(seed^0x9007a^uint64(i)<<20), int(ab.cfg.QuotaXorbBytes))
		ab.quotaBodies = append(ab.quotaBodies, body)
		ab.quotaHashes = append(ab.quotaHashes, x.info.Hash)
	}
}

// run attacks until ctx is done and returns when every attacker has stopped.
func (ab *abuser) run(ctx context.Context) {
	var wg sync.WaitGroup
	lim := rate.NewLimiter(rate.Limit(ab.cfg.FloodRate), ab.cfg.FloodWorkers)
	for i := range ab.cfg.FloodWorkers {
		wg.Go(func() { ab.floodWorker(ctx, lim, i) })
	}
	for i := range ab.cfg.Readers {
		wg.Go(func() { ab.holdReader(ctx, ab.holds[i%len(ab.holds)]) })
	}
	qlim := rate.NewLimiter(rate.Limit(ab.cfg.QuotaRate), 1)
	for i := range ab.cfg.QuotaWorkers {
		wg.Go(func() { ab.quotaWorker(ctx, qlim, i) })
	}
	if ab.spray != nil {
		slim := rate.NewLimiter(rate.Limit(ab.cfg.SprayRate), 1)
		for i := range ab.cfg.SprayWorkers {
			wg.Go(func() { ab.sprayWorker(ctx, slim, i) })
		}
	}
	wg.Wait()
}

// floodWorker sends cheap reads as fast as the flood rate lets it, to
// each node in turn: reconstructions of the abuser's small file and dedup
// queries for chunks nobody has.
func (ab *abuser) floodWorker(ctx context.Context, lim *rate.Limiter, i int) {
	r := mrand.New(mrand.NewPCG(uint64(i), 0xf100d))
	cur := newCursor(i, len(ab.nodes))
	for n := 0; ; n++ {
		if lim.Wait(ctx) != nil {
			return
		}
		w := who{classAbuser, routeFlood, -1, cur.next()}
		base, ec := ab.nodes[w.node], &ab.floodBy[w.node]
		ec.sent(time.Now())
		var a answer
		if n%2 == 0 {
			a = ab.c.do(ctx, w, "GET", base+"/v1/reconstructions/"+ab.smallFile.hash.String(), ab.flood.Token, nil, "Range", "bytes=0-65535")
		} else {
			var h xet.Hash
			for j := range h {
				h[j] = byte(r.Uint32())
			}
			a = ab.c.do(ctx, w, "GET", base+"/v1/chunks/default/"+h.String(), ab.flood.Token, nil)
		}
		if a.err != nil {
			continue
		}
		ec.answer(time.Now(), a.status != http.StatusTooManyRequests)
		ab.rec.poke()
	}
}

// holdReader keeps one read of the big xorb open through hu, consuming it
// at the configured rate, and opens another when refused or cut off.
func (ab *abuser) holdReader(ctx context.Context, hu holdURL) {
	w := who{classAbuser, routeHold, -1, hu.node}
	perRead := max(ab.cfg.ReadBytesPerSecond/4, 1)
	buf := make([]byte, perRead)
	// open counts this reader's read from before it is sent until it is
	// closed: what the node's in-flight count can hold of it, at most.
	open := func(d int64) {
		if hu.node >= 0 {
			raise(&ab.holdOpenPeak[hu.node], ab.holdOpen[hu.node].Add(d))
		}
	}
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, "GET", hu.url, nil)
		if err != nil {
			return
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", hu.from, hu.to))
		start := time.Now()
		open(1)
		res, err := ab.c.hc.Do(req)
		rr := reqRecord{start: ab.rec.since(start), dur: time.Since(start), tenant: -1, node: int16(w.node), class: w.class, route: w.route}
		if err != nil {
			open(-1)
			if ctx.Err() != nil {
				return
			}
			ab.rec.request(rr)
			sleepCtx(ctx, time.Second)
			continue
		}
		rr.status = int16(res.StatusCode)
		if res.StatusCode != http.StatusPartialContent && res.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			open(-1)
			rr.code = refusalCode(res.StatusCode, body)
			ab.rec.request(rr)
			sleepCtx(ctx, answer{header: res.Header}.retryAfter())
			continue
		}
		raise(&ab.heldPeak, ab.held.Add(1))
		ab.rec.request(rr)
		for {
			n, err := res.Body.Read(buf)
			ab.heldBytes.Add(int64(n))
			if err != nil {
				break
			}
			if !sleepCtx(ctx, time.Duration(float64(n)/float64(ab.cfg.ReadBytesPerSecond)*float64(time.Second))) {
				break
			}
		}
		res.Body.Close()
		open(-1)
		ab.held.Add(-1)
	}
}

// quotaWorker uploads new xorbs past the abuser's quota, to each node in
// turn, announcing each with Expect: 100-continue so that a refusal costs
// no body bytes.
func (ab *abuser) quotaWorker(ctx context.Context, lim *rate.Limiter, i int) {
	cur := newCursor(i, len(ab.nodes))
	for n := i; ; n += ab.cfg.QuotaWorkers {
		if lim.Wait(ctx) != nil {
			return
		}
		w := who{classAbuser, routeQuota, -1, cur.next()}
		k := n % len(ab.quotaBodies)
		raise(&ab.quotaInFlightMax, ab.quotaInFlight.Add(1))
		a := ab.c.do(ctx, w, "POST", ab.nodes[w.node]+"/v1/xorbs/default/"+ab.quotaHashes[k].String(), ab.quota.Token, ab.quotaBodies[k], "Expect", "100-continue")
		ab.quotaInFlight.Add(-1)
		if a.status == http.StatusOK {
			var xr struct {
				WasInserted bool `json:"was_inserted"`
			}
			if json.Unmarshal(a.body, &xr) == nil && xr.WasInserted {
				ab.quotaStored.Add(1)
			}
		}
		if a.status != 0 && a.status != http.StatusTooManyRequests {
			ab.quotaReached.Add(1)
			ab.rec.poke()
		}
	}
}

// sprayWorker sends requests with tokens that are not valid, to each node
// in turn: well-formed tokens of unknown credentials, wrong secrets for the
// abuser's own credential ids, and forged fetch URLs. An answer other than
// 429 means the token was checked: the address got past its auth-failure
// limit on that node.
func (ab *abuser) sprayWorker(ctx context.Context, lim *rate.Limiter, i int) {
	var fileHash xet.Hash
	rand.Read(fileHash[:])
	cur := newCursor(i, len(ab.nodes))
	for n := i; ; n += ab.cfg.SprayWorkers {
		if lim.Wait(ctx) != nil {
			return
		}
		w := who{classAbuser, routeSpray, -1, cur.next()}
		base, ec := ab.nodes[w.node], &ab.sprayBy[w.node]
		ec.sent(time.Now())
		var a answer
		switch n % 3 {
		case 0:
			a = ab.spray.do(ctx, w, "GET", base+"/v1/reconstructions/"+fileHash.String(), "hf_oxt_"+randomHex(8)+"_"+randomHex(32), nil)
		case 1:
			a = ab.spray.do(ctx, w, "GET", base+"/v1/reconstructions/"+fileHash.String(), "hf_oxt_"+ab.flood.ID+"_"+randomHex(32), nil)
		default:
			exp := time.Now().Add(time.Hour).Unix()
			u := fmt.Sprintf("%s/v1/fetch/%s?c=%s&r=0-1023&s=%s&t=%s&x=%d", base, fileHash, ab.hold.ID, randomHex(32), ab.name, exp)
			a = ab.spray.do(ctx, w, "GET", u, "", nil, "Range", "bytes=0-1023")
		}
		if a.err != nil {
			continue
		}
		ec.answer(time.Now(), a.status != http.StatusTooManyRequests)
		ab.rec.poke()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
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
