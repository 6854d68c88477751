package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"openxet/xet"
)

// abuser is one tenant attacking the server four ways at once, one
// credential per attack, plus a client address spraying bad tokens.
type abuser struct {
	cfg   AbuserConfig
	base  string
	name  string
	c     *client        // the abuser's own address (the honest tenants' too)
	proc  *abuserProcess // the child running the attacks; nil: they run here
	spray *client        // from SprayAddr; nil when the sprayer is off
	rec   *recorder
	track func(credential) // called with each credential made, to revoke it later
	notes []string

	flood, hold, quota credential
	smallFile          *fileSpec
	bigURL             string
	bigFrom, bigTo     uint64 // the fetch URL's byte range, inclusive
	quotaBodies        [][]byte
	quotaHashes        []xet.Hash
	limits             tenantLimits // effective limits after the quota was set

	// What the attacks saw, for the report's envelope checks.
	floodAnswered  atomic.Int64 // flood requests answered, admitted or not
	floodAdmitted  atomic.Int64
	floodFirst     atomic.Int64 // unix nanos of the first flood request sent
	floodLast      atomic.Int64 // unix nanos of the last flood answer
	sprayAnswered  atomic.Int64
	sprayReached   atomic.Int64 // answers past the auth-failure check (any but 429): the token was checked
	sprayFirst     atomic.Int64
	sprayLast      atomic.Int64
	held, heldPeak atomic.Int64
	heldBytes      atomic.Int64
	quotaReached   atomic.Int64 // quota uploads answered past the rate limits (the quota was checked)
	quotaStored    atomic.Int64 // quota uploads the server stored
}

// setup makes the abuser's credentials and data: a small file to flood
// reconstructions of, a big xorb to hold reads of, and a quota just above
// what that costs.
func (ab *abuser) setup(ctx context.Context, adm *admin, seed uint64, tg *targets) error {
	var err error
	for _, c := range []*credential{&ab.flood, &ab.hold, &ab.quota} {
		if *c, err = adm.createCredential(ctx, ab.name); err != nil {
			return err
		}
		ab.track(*c)
	}
	up := func(tok string, x *xorbSpec, body []byte) (*fileSpec, error) {
		w := who{}
		a := ab.c.do(ctx, w, "POST", ab.base+"/v1/xorbs/default/"+x.info.Hash.String(), tok, body)
		if a.err != nil || a.status != http.StatusOK {
			return nil, fmt.Errorf("abuser xorb upload: %s", a.describe())
		}
		f, fi := newFile([]*xorbSpec{x})
		a = ab.c.do(ctx, w, "POST", ab.base+"/v1/shards", tok, shardFor(fi, x))
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
	a := ab.c.do(ctx, who{}, "GET", ab.base+"/v1/reconstructions/"+big.hash.String(), ab.hold.Token, nil)
	var rec reconstruction
	if a.err != nil || a.status != http.StatusOK || json.Unmarshal(a.body, &rec) != nil || len(rec.FetchInfo[x.info.Hash.String()]) != 1 {
		return fmt.Errorf("abuser reconstruction of its big file: %s", a.describe())
	}
	fe := rec.FetchInfo[x.info.Hash.String()][0]
	if err := tg.check(ctx, fe.URL); err != nil {
		return fmt.Errorf("the server hands out fetch URLs for another host (%s): %w", fe.URL, err)
	}
	ab.bigURL, ab.bigFrom, ab.bigTo = fe.URL, fe.URLRange.Start, fe.URLRange.End

	lim, err := adm.limits(ctx, ab.name)
	if err != nil {
		return err
	}
	doc := map[string]any{"quota_bytes": lim.UsageBytes + ab.cfg.QuotaHeadroomBytes}
	if ab.cfg.CredentialRequestsPerSecond > 0 {
		doc["credential_requests_per_second"] = ab.cfg.CredentialRequestsPerSecond
		doc["credential_burst"] = ab.cfg.CredentialBurst
	}
	if ab.limits, err = adm.setLimits(ctx, ab.name, doc); err != nil {
		return err
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
	for range ab.cfg.Readers {
		wg.Go(func() { ab.holdReader(ctx) })
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

func setOnce(v *atomic.Int64, t time.Time) { v.CompareAndSwap(0, t.UnixNano()) }

// floodWorker sends cheap reads as fast as the flood rate lets it:
// reconstructions of the abuser's small file and dedup queries for chunks
// nobody has.
func (ab *abuser) floodWorker(ctx context.Context, lim *rate.Limiter, i int) {
	r := mrand.New(mrand.NewPCG(uint64(i), 0xf100d))
	w := who{classAbuser, routeFlood, -1}
	for n := 0; ; n++ {
		if lim.Wait(ctx) != nil {
			return
		}
		setOnce(&ab.floodFirst, time.Now())
		var a answer
		if n%2 == 0 {
			a = ab.c.do(ctx, w, "GET", ab.base+"/v1/reconstructions/"+ab.smallFile.hash.String(), ab.flood.Token, nil, "Range", "bytes=0-65535")
		} else {
			var h xet.Hash
			for j := range h {
				h[j] = byte(r.Uint32())
			}
			a = ab.c.do(ctx, w, "GET", ab.base+"/v1/chunks/default/"+h.String(), ab.flood.Token, nil)
		}
		if a.err != nil {
			continue
		}
		ab.floodLast.Store(time.Now().UnixNano())
		if a.status != http.StatusTooManyRequests {
			ab.floodAdmitted.Add(1)
		}
		ab.floodAnswered.Add(1)
		ab.rec.poke()
	}
}

// holdReader keeps one read of the big xorb open, consuming it at the
// configured rate, and opens another when refused or cut off.
func (ab *abuser) holdReader(ctx context.Context) {
	w := who{classAbuser, routeHold, -1}
	perRead := max(ab.cfg.ReadBytesPerSecond/4, 1)
	buf := make([]byte, perRead)
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, "GET", ab.bigURL, nil)
		if err != nil {
			return
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", ab.bigFrom, ab.bigTo))
		start := time.Now()
		res, err := ab.c.hc.Do(req)
		rr := reqRecord{start: ab.rec.since(start), dur: time.Since(start), tenant: -1, class: w.class, route: w.route}
		if err != nil {
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
			rr.code = refusalCode(res.StatusCode, body)
			ab.rec.request(rr)
			sleepCtx(ctx, answer{header: res.Header}.retryAfter())
			continue
		}
		now := ab.held.Add(1)
		for {
			p := ab.heldPeak.Load()
			if now <= p || ab.heldPeak.CompareAndSwap(p, now) {
				break
			}
		}
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
		ab.held.Add(-1)
	}
}

// quotaWorker uploads new xorbs past the abuser's quota, announcing each
// with Expect: 100-continue so that a refusal costs no body bytes.
func (ab *abuser) quotaWorker(ctx context.Context, lim *rate.Limiter, i int) {
	w := who{classAbuser, routeQuota, -1}
	for n := i; ; n += ab.cfg.QuotaWorkers {
		if lim.Wait(ctx) != nil {
			return
		}
		k := n % len(ab.quotaBodies)
		a := ab.c.do(ctx, w, "POST", ab.base+"/v1/xorbs/default/"+ab.quotaHashes[k].String(), ab.quota.Token, ab.quotaBodies[k], "Expect", "100-continue")
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

// sprayWorker sends requests with tokens that are not valid: well-formed
// tokens of unknown credentials, wrong secrets for the abuser's own
// credential ids, and forged fetch URLs.
func (ab *abuser) sprayWorker(ctx context.Context, lim *rate.Limiter, i int) {
	w := who{classAbuser, routeSpray, -1}
	var fileHash xet.Hash
	rand.Read(fileHash[:])
	for n := i; ; n += ab.cfg.SprayWorkers {
		if lim.Wait(ctx) != nil {
			return
		}
		setOnce(&ab.sprayFirst, time.Now())
		var a answer
		switch n % 3 {
		case 0:
			a = ab.spray.do(ctx, w, "GET", ab.base+"/v1/reconstructions/"+fileHash.String(), "hf_oxt_"+randomHex(8)+"_"+randomHex(32), nil)
		case 1:
			a = ab.spray.do(ctx, w, "GET", ab.base+"/v1/reconstructions/"+fileHash.String(), "hf_oxt_"+ab.flood.ID+"_"+randomHex(32), nil)
		default:
			exp := time.Now().Add(time.Hour).Unix()
			u := fmt.Sprintf("%s/v1/fetch/%s?c=%s&r=0-1023&s=%s&t=%s&x=%d", ab.base, fileHash, ab.hold.ID, randomHex(32), ab.name, exp)
			a = ab.spray.do(ctx, w, "GET", u, "", nil, "Range", "bytes=0-1023")
		}
		if a.err != nil {
			continue
		}
		ab.sprayLast.Store(time.Now().UnixNano())
		if a.status != http.StatusTooManyRequests {
			ab.sprayReached.Add(1)
		}
		ab.sprayAnswered.Add(1)
		ab.rec.poke()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
