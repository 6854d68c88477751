package load

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

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
