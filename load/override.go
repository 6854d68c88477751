package load

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"openxet/xet"
)

// overrideWait bounds the wait for a limits override to reach every node:
// the documented bound (limits.cache_ttl, at most 10 s; docs/scale-out.md)
// plus room for a slow machine to send its probes.
const overrideWait = 15 * time.Second

// overridePoll is the pause between two probes of a node that does not
// enforce the override yet.
const overridePoll = 100 * time.Millisecond

// awaitOverride waits until every node enforces the abuser's credential
// limit override, so that the flood's envelope on each node is checked
// against the limit it really had. A node caches a tenant's limits for up
// to limits.cache_ttl; one that read the abuser's limits before the
// override was set could admit the flood at its default rate until then.
//
// It cannot ask a node what it caches (the admin API shows the index), so
// it watches: it sends a fourth credential's cheap requests (dedup queries
// for a chunk nobody has) to the node until one is refused 429
// rate_limited/credential with a RateLimit-Policy whose quota and window
// are the override's (q = burst, w = burst/rate rounded up). A node still
// on another limit either refuses with another policy or admits more than
// the override would have; then the probe pauses (Retry-After, or
// overridePoll) and tries again. A node that never shows the override
// within overrideWait of its setting is a failure (failOverride).
//
// It does nothing when the run sets no credential limit (the quota needs no
// wait: every node reads it in the index transaction of an upload).
func (ab *abuser) awaitOverride(ctx context.Context, rec *recorder) {
	ab.overrideSeconds = make([]float64, len(ab.nodes))
	ab.overridePolls = make([]int, len(ab.nodes))
	for i := range ab.overrideSeconds {
		ab.overrideSeconds[i] = -1
	}
	if ab.cfg.CredentialRequestsPerSecond <= 0 || ab.probe.Token == "" {
		return
	}
	var wg sync.WaitGroup
	for i := range ab.nodes {
		wg.Go(func() {
			secs, err := ab.probeNode(ctx, i, &ab.overridePolls[i])
			if err != nil {
				if ctx.Err() == nil {
					rec.fail(failOverride, "%s: %v", ab.nodes[i], err)
				}
				return
			}
			ab.overrideSeconds[i] = secs
		})
	}
	wg.Wait()
}

// probeNode is awaitOverride for node i: it returns how long after the
// override was set the node was first seen enforcing it, and counts its
// probes (bursts) in polls.
func (ab *abuser) probeNode(ctx context.Context, i int, polls *int) (float64, error) {
	rps, burst := ab.cfg.CredentialRequestsPerSecond, ab.cfg.CredentialBurst
	wantQ, wantW := rateLimitPolicy(rps, burst)
	deadline := ab.overrideSet.Add(ab.overrideWait)
	var miss xet.Hash
	copy(miss[:], "openxet load override probe....")
	url := ab.nodes[i] + "/v1/chunks/default/" + miss.String()
	last := "no answer"
	for {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the abuser's credential limit (%g/s, burst %d) was set %s ago and the node does not enforce it (last probe: %s); overrides must reach every node within limits.cache_ttl (at most 10 s)",
				rps, burst, time.Since(ab.overrideSet).Round(100*time.Millisecond), last)
		}
		// Send until refused, or until the override would have refused
		// one: burst, plus what its rate refills meanwhile, plus one.
		*polls++
		start := time.Now()
		pause := overridePoll
		for sent := 0; ; sent++ {
			if sent > burst+int(math.Ceil(rps*time.Since(start).Seconds()))+1 {
				last = fmt.Sprintf("%d requests admitted in %s", sent, time.Since(start).Round(time.Millisecond))
				break
			}
			a := ab.c.do(ctx, who{}, "GET", url, ab.probe.Token, nil)
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if a.status == http.StatusNotFound {
				continue
			}
			if a.status != http.StatusTooManyRequests {
				return 0, fmt.Errorf("probe of the abuser's limits answered %s", a.describe())
			}
			policy := a.header.Get("RateLimit-Policy")
			last = fmt.Sprintf("429 %s, RateLimit-Policy %s", a.code, policy)
			if q, w, ok := parsePolicy(policy, "credential"); ok && q == wantQ && w == wantW {
				return time.Since(ab.overrideSet).Seconds(), nil
			}
			pause = a.retryAfter()
			break
		}
		if !sleepCtx(ctx, min(pause, time.Until(deadline)+time.Millisecond)) {
			return 0, ctx.Err()
		}
	}
}

// rateLimitPolicy is the RateLimit-Policy quota and window (whole seconds,
// rounded up, at least 1) a limit of perSecond with burst announces: q is
// the burst, w the time an empty bucket takes to refill it, computed as the
// server's GCRA does (the emission interval rounded up to whole
// nanoseconds).
func rateLimitPolicy(perSecond float64, burst int) (q, w int) {
	q = max(burst, 1)
	interval := math.Max(1, math.Ceil(1e9/perSecond))
	window := time.Duration(float64(q) * interval)
	w = int(window / time.Second)
	if window%time.Second != 0 || w == 0 {
		w++
	}
	return q, w
}

// parsePolicy reads `"name";q=4;w=4` (one policy of a RateLimit-Policy
// header) for the named limit.
func parsePolicy(h, name string) (q, w int, ok bool) {
	parts := strings.Split(h, ";")
	if len(parts) < 3 || strings.TrimSpace(parts[0]) != strconv.Quote(name) {
		return 0, 0, false
	}
	seen := 0
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		switch k {
		case "q":
			q, seen = n, seen|1
		case "w":
			w, seen = n, seen|2
		}
	}
	return q, w, seen == 3
}
