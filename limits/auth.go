package limits

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAuthFailuresPerMinute is the default auth_failures_per_minute.
const DefaultAuthFailuresPerMinute = 60

// AuthFailures limits failed authentications per client address. Each
// failure spends one unit of a bucket of N units (N = failures per minute)
// that refills at N per minute. While an address's bucket is empty, every
// auth attempt from it is refused, valid token or not, until a unit
// refills: after N quick failures an address gets one more try per 60/N
// seconds.
//
// An attempt spends its unit before the token is checked (Begin) and gets
// it back if the attempt did not fail (AuthAttempt.Refund), like Gate's
// refunds. So however many attempts from one address race, at most N
// tokens are checked before N failures are on record, and at most
// N + N·W/60 within any W. An attempt that finds the bucket empty while
// attempts of the same address are still being checked is not refused: it
// waits until they end (a refund lets it in; failures leave it refused).
// So a client with more than N requests authenticating at once (a busy
// host, a NAT, a proxy) is never refused for attempts that turn out good,
// and racing bad tokens still get exactly N checks.
//
// A successful authentication does not reset the count (GitLab's ban does).
// Resetting would let anyone holding one valid token interleave successes
// with guesses and guess without limit; with no reset, a legitimate client
// that fails a few times simply recovers as its bucket refills.
//
// # Addresses
//
// An IPv4 address is its own key, also when written IPv4-mapped
// (::ffff:192.0.2.1). An IPv6 address is keyed by its /64: one host or
// subscriber is commonly given a whole /64, so keying single IPv6
// addresses would give one client 2^64 buckets. Strings that are not IP
// addresses are keys as given.
//
// # Memory
//
// Client addresses are attacker-controlled, so the table is hard-capped
// (see Table for the eviction rule: only keys whose bucket is full again
// are dropped, so a throttled address never comes back with a fresh
// bucket). An address is recorded when it attempts and stays recorded
// only while it has failures to serve out (a refunded attempt leaves a
// full bucket, which is evictable at once). When a new address finds its
// part of the table full of throttled addresses:
//
//   - its attempt is still admitted: an address that never failed is never
//     refused, whatever other addresses do;
//   - if the attempt fails and the table still has no room, the failure
//     cannot be recorded; AuthAttempt.Failed then refuses that failing
//     attempt (answer it as rate limited rather than unauthorized) and
//     Stats counts it in Unrecorded. Nothing is evicted to make room.
//
// An attacker therefore gets at most N failures per minute per key it
// controls while the table has room, and more only after filling the table
// with throttled keys, which itself takes about one failure per second per
// key for every key of the cap (docs/design.md §4: a hard cap for IP-keyed tables;
// size it with limits.GateConfig.MaxIPs).
//
// An AuthFailures is safe for concurrent use.
type AuthFailures struct {
	table      *Table
	rate       Rate
	pending    [pendingShards]pendingShard // attempts being checked, per address
	failures   atomic.Uint64
	refused    atomic.Uint64
	unrecorded atomic.Uint64
}

// pendingShards spreads the in-progress counts over this many locks.
const pendingShards = 64

// pendingShard counts, per address, the attempts Begin admitted that have
// not ended; a waiter sleeps on cond until one ends. Only addresses with
// an attempt in progress have an entry, so the map is bounded by the
// requests in flight.
type pendingShard struct {
	mu   sync.Mutex
	cond sync.Cond
	n    map[string]int
}

func (a *AuthFailures) shard(key string) *pendingShard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	ps := &a.pending[h%pendingShards]
	ps.mu.Lock()
	if ps.n == nil {
		ps.n = map[string]int{}
		ps.cond.L = &ps.mu
	}
	return ps
}

// end ends one attempt of key: its in-progress count drops and waiters
// look again.
func (a *AuthFailures) end(key string) {
	ps := a.shard(key)
	if ps.n[key]--; ps.n[key] <= 0 {
		delete(ps.n, key)
	}
	ps.cond.Broadcast()
	ps.mu.Unlock()
}

// AuthStats is a snapshot of an AuthFailures' counters, for metrics.
type AuthStats struct {
	Table      TableStats
	Failures   uint64 // failed attempts (AuthAttempt.Failed calls)
	Refused    uint64 // attempts Begin refused
	Unrecorded uint64 // failures that found no room in the table (answered as refused)
}

// NewAuthFailures returns a limiter allowing perMinute failures per address
// per minute (with a burst of perMinute), tracking at most maxIPs keys
// (DefaultMaxKeys if maxIPs <= 0). perMinute <= 0 disables the limit.
func NewAuthFailures(perMinute int, maxIPs int) *AuthFailures {
	a := &AuthFailures{table: NewTable(maxIPs)}
	if perMinute > 0 {
		a.rate = Rate{PerSecond: float64(perMinute) / 60, Burst: perMinute}
	}
	return a
}

// Rate returns the rate the limiter applies per address.
func (a *AuthFailures) Rate() Rate { return a.rate }

// AuthAttempt is one authentication attempt that Begin admitted. Call
// exactly one of Refund or Failed when the token has been checked. The
// zero value is an attempt that spent nothing and records nothing.
type AuthAttempt struct {
	a     *AuthFailures
	key   string
	spent bool // a unit of key's bucket was spent by Begin
}

// Begin decides whether ip may attempt to authenticate at now. If so, it
// spends one unit of the address's allowance before the token is checked,
// and the caller must end the attempt with Refund or Failed. A refusal's
// RetryAfter is the exact wait until one more attempt is allowed.
//
// When the address's allowance is spent but some of its attempts are still
// being checked, Begin waits for them to end before it decides: each end
// of an attempt (Refund or Failed) wakes it to look again.
func (a *AuthFailures) Begin(ip string, now time.Time) (AuthAttempt, Decision) {
	key := ipKey(ip)
	ps := a.shard(key)
	defer ps.mu.Unlock()
	for {
		d, spent := a.table.allow(key, a.rate, now, true)
		if d.Allowed {
			ps.n[key]++
			return AuthAttempt{a: a, key: key, spent: spent}, d
		}
		if ps.n[key] == 0 {
			a.refused.Add(1)
			return AuthAttempt{}, d
		}
		ps.cond.Wait()
	}
}

// Refund ends an attempt that did not fail (the token verified, or it could
// not be checked for a reason that is not the client's): the unit Begin
// spent is given back.
func (at AuthAttempt) Refund() {
	if at.a == nil {
		return
	}
	if at.spent {
		at.a.table.Refund(at.key, at.a.rate)
	}
	at.a.end(at.key)
}

// Failed ends an attempt whose token did not verify, at now: the unit
// Begin spent stays spent. If Begin could not record the address (no
// room), Failed records the failure now; when it still cannot, the
// returned decision is a refusal and the caller must answer this failing
// attempt as refused by the limit. Otherwise the decision is Allowed.
func (at AuthAttempt) Failed(now time.Time) Decision {
	if at.a == nil {
		return Decision{Allowed: true}
	}
	at.a.failures.Add(1)
	defer at.a.end(at.key)
	if at.spent {
		return Decision{Allowed: true, Limit: at.a.rate}
	}
	d, _ := at.a.table.allow(at.key, at.a.rate, now, false)
	if !d.Allowed {
		at.a.unrecorded.Add(1)
	}
	return d
}

// ipKey is the key AuthFailures uses for a client address: an IPv4 address
// as is (also when written IPv4-mapped), an IPv6 address by its /64 (as
// 2001:db8::/64, without a zone), anything else as given.
func ipKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil || addr.Is4() {
		return ip // dotted IPv4 parses only in its one canonical form
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	p, err := addr.WithZone("").Prefix(64)
	if err != nil {
		return ip
	}
	return p.String()
}

// Len returns the number of keys tracked.
func (a *AuthFailures) Len() int { return a.table.Len() }

// Stats returns the counters.
func (a *AuthFailures) Stats() AuthStats {
	return AuthStats{Table: a.table.Stats(), Failures: a.failures.Load(), Refused: a.refused.Load(), Unrecorded: a.unrecorded.Load()}
}
