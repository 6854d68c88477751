package limits

import (
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// DefaultMaxKeys is the key cap NewTable uses when given maxKeys <= 0.
const DefaultMaxKeys = 100_000

// Eviction work per new key (nginx limit_req style): look at no more than
// scanPerInsert entries from the old end of the key's shard and drop at
// most evictPerInsert of them.
const (
	scanPerInsert  = 8
	evictPerInsert = 2
	maxShards      = 64
	minShardKeys   = 64
	// idleGrace: while a shard has room, only keys whose bucket has been
	// full for this long are dropped, so that keys used steadily at a low
	// rate are not dropped and re-added on every request.
	idleGrace = int64(time.Minute)
)

// Table is a set of GCRA rate limiters, one per key, with a hard cap on the
// number of keys it tracks. The zero value is not usable; call NewTable.
// A Table is safe for concurrent use.
//
// The state per key is one theoretical arrival time (TAT). Keys are spread
// over up to 64 shards by hash, each with its own mutex, so calls on
// different keys rarely contend. Every decision on a key happens under its
// shard's lock, and a TAT only moves forward, so a caller holding a stale
// now can only be refused more: admissions stay within
// Burst + PerSecond·W over any window W however many goroutines race.
//
// The Rate is passed on every call, so a changed limit applies to the next
// call. Lowering a rate keeps the key's state; the stricter rate simply
// refills more slowly.
//
// Keys are identified by a 64-bit hash with a per-table random seed; the
// key strings are not stored. Two keys whose hashes collide (probability
// about n²/2⁶⁵ for n keys, and not steerable without the seed) would share
// one bucket, which can only make both stricter.
//
// # Eviction
//
// Only keys whose bucket is full again (TAT <= now) are ever evicted; such
// a key is indistinguishable from one never seen, so eviction loses
// nothing. Eviction work happens only when a new key arrives, and is
// bounded (nginx limit_req style): the table looks at up to 8 entries at
// the old end of the key's shard, drops up to 2, and moves each one it
// keeps to the new end (a second chance, so that the next scan sees other
// keys). While the shard has room it drops only keys that have been full
// for a minute, so that keys used steadily at a low rate are not dropped
// and re-added on every request; at its cap it drops any key that is full.
//
// If no room was made, the new key is refused: the table fails closed.
// Allow returns a refusal whose RetryAfter is the time until the earliest
// of the inspected keys becomes evictable, and Stats counts it in Full. A
// throttled key therefore never comes back with a fresh bucket, at the
// price that a shard full of throttled keys refuses newcomers until some
// refill. No call ever sweeps the table.
//
// The cap is split evenly across shards, so a shard can fill before the
// table does; size the cap about 25% above the keys you expect.
type Table struct {
	seed   maphash.Seed
	epoch  time.Time
	mask   uint64
	shards []shard
}

type shard struct {
	mu    sync.Mutex
	index tatTable // key hash -> TAT, nanoseconds since the table's epoch
	// ring holds every tracked hash once, oldest first from ring[old]:
	// the eviction order. It is touched only when a key is added.
	ring []uint64
	old  int // index of the oldest hash
	n    int // hashes in the ring == keys in index
	cap  int
	// latest is the latest now any caller brought (see clampTAT).
	latest int64

	allowed, denied, full, inserted, evicted uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// TableStats is a snapshot of a table's counters, for metrics.
type TableStats struct {
	Keys     int    // keys tracked now
	Cap      int    // hard cap on keys (sum of the shards' caps)
	Allowed  uint64 // Allow calls that admitted
	Denied   uint64 // Allow calls refused because the key's bucket was empty
	Full     uint64 // Allow calls refused because the key was new and its shard was full of throttled keys
	Inserted uint64 // keys added
	Evicted  uint64 // keys dropped because their bucket was full again
}

// NewTable returns a table that tracks at most maxKeys keys
// (DefaultMaxKeys if maxKeys <= 0). It allocates no per-key memory up front.
func NewTable(maxKeys int) *Table {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := 1
	for n*2 <= maxShards && maxKeys/(n*2) >= minShardKeys {
		n *= 2
	}
	t := &Table{
		seed: maphash.MakeSeed(),
		// The epoch only anchors offsets; decisions depend on differences
		// between the times callers pass. Taking it from time.Now keeps the
		// monotonic reading, so callers passing time.Now() values are immune
		// to wall-clock steps.
		epoch:  time.Now(),
		mask:   uint64(n - 1),
		shards: make([]shard, n),
	}
	per := maxKeys / n
	for i := range t.shards {
		s := &t.shards[i]
		s.cap = per
		s.latest = -maxOffset
	}
	return t
}

// hash is key's hash under the table's seed; never 0, which marks an
// empty entry.
func (t *Table) hash(key string) uint64 {
	return keyHash(t.seed, key)
}

func keyHash(seed maphash.Seed, key string) uint64 {
	if h := maphash.String(seed, key); h != 0 {
		return h
	}
	return 1
}

// shardOf is the shard that holds the key whose hash is h.
func (t *Table) shardOf(h uint64) *shard {
	return &t.shards[h&t.mask]
}

// offset converts now into nanoseconds since the epoch, clamped.
func (t *Table) offset(now time.Time) int64 {
	d := int64(now.Sub(t.epoch))
	return min(max(d, -maxOffset), maxOffset)
}

// Allow decides whether one request of key at rate r is admitted at now,
// and if so spends one unit of the key's allowance. now should be the
// current time (time.Now(), read once per request); a time earlier than
// another caller's is safe, one from the future spends allowance early.
// An unlimited r admits without tracking the key.
func (t *Table) Allow(key string, r Rate, now time.Time) Decision {
	d, _ := t.allow(key, r, now, false)
	return d
}

// allow is Allow. With passNew, a new key that finds its shard full of
// throttled keys is admitted without being tracked (nothing is spent) and
// tracked is false; Stats does not count it in Full.
func (t *Table) allow(key string, r Rate, now time.Time, passNew bool) (d Decision, tracked bool) {
	return t.allowHash(t.hash(key), r, now, passNew)
}

// allowHash is allow for the key whose hash (Table.hash) is h.
func (t *Table) allowHash(h uint64, r Rate, now time.Time, passNew bool) (d Decision, tracked bool) {
	interval, tolerance, limited := r.gcra()
	if !limited {
		return unlimitedDecision(r), false
	}
	nowN := t.offset(now)
	s := t.shardOf(h)
	s.mu.Lock()
	if i := s.index.find(h); i >= 0 {
		e := &s.index.entries[i]
		s.latest = max(s.latest, nowN)
		e.tat = clampTAT(e.tat, s.latest, interval, tolerance)
		d, next := decide(e.tat, nowN, interval, tolerance, r)
		if d.Allowed {
			e.tat = next
			s.allowed++
		} else {
			s.denied++
		}
		s.mu.Unlock()
		return d, true
	}
	if wait, ok := s.makeRoom(nowN); !ok {
		if passNew {
			s.mu.Unlock()
			return peek(nowN, nowN, interval, tolerance, r), false
		}
		s.full++
		s.mu.Unlock()
		return Decision{RetryAfter: wait, Limit: r}, false
	}
	// A new key starts with a full bucket (TAT = now), so it is admitted.
	d, next := decide(nowN, nowN, interval, tolerance, r)
	s.add(h, next)
	s.allowed++
	s.mu.Unlock()
	return d, true
}

// clampTAT caps a stored TAT at the latest one rate r itself can produce
// (an empty bucket: latest + interval + tolerance). A TAT beyond it was set
// under a slower rate; when an operator raises the rate, the key is judged
// by the new rate at once instead of serving out the old one's debt.
// latest is the latest now the shard has seen, not the caller's: a caller
// with a stale now must not pull an honest TAT back (that would over-admit).
func clampTAT(tat, now, interval, tolerance int64) int64 {
	if lim := now + interval + tolerance; lim > now && tat > lim {
		return lim
	}
	return tat
}

// Refund gives back one unit that Allow admitted for key at rate r, for a
// request that a later check refused (so that one limiter's refusal does
// not use up another's allowance). It is a no-op for an unknown key or an
// unlimited rate. Call it at most once per admitted request, soon after.
func (t *Table) Refund(key string, r Rate) {
	t.refundHash(t.hash(key), r)
}

// refundHash is Refund for the key whose hash (Table.hash) is h.
func (t *Table) refundHash(h uint64, r Rate) {
	interval, _, limited := r.gcra()
	if !limited {
		return
	}
	s := t.shardOf(h)
	s.mu.Lock()
	if i := s.index.find(h); i >= 0 {
		// Any TAT at or before now is a full bucket, so going below now
		// is harmless.
		s.index.entries[i].tat -= interval
	}
	s.mu.Unlock()
}

// Len returns the number of keys tracked now.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// Stats returns the table's counters. Each shard is read under its lock in
// turn, so the totals are not one atomic snapshot.
func (t *Table) Stats() TableStats {
	var st TableStats
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		st.Keys += s.n
		st.Cap += s.cap
		st.Allowed += s.allowed
		st.Denied += s.denied
		st.Full += s.full
		st.Inserted += s.inserted
		st.Evicted += s.evicted
		s.mu.Unlock()
	}
	return st
}

// makeRoom does the eviction work for one new key (see Table) and reports
// whether the shard now has room for it; if not, it returns the wait until
// the first inspected entry becomes evictable.
func (s *shard) makeRoom(now int64) (time.Duration, bool) {
	wait := int64(math.MaxInt64)
	evicted := 0
	for seen := 0; seen < scanPerInsert && evicted < evictPerInsert && s.n > 0; seen++ {
		h := s.ring[s.old]
		at := s.index.find(h)
		tat := s.index.entries[at].tat
		full := s.n >= s.cap
		if tat <= now-idleGrace || (full && tat <= now) {
			s.popOldest()
			s.index.removeAt(at)
			s.evicted++
			evicted++
			continue
		}
		if full && tat > now {
			wait = min(wait, tat-now)
		}
		s.popOldest() // second chance: to the new end
		s.push(h)
	}
	if s.n < s.cap {
		return 0, true
	}
	if wait == math.MaxInt64 {
		wait = int64(time.Second)
	}
	return time.Duration(wait), false
}

func (s *shard) add(h uint64, tat int64) {
	s.push(h)
	s.index.insert(h, tat)
	s.inserted++
}

// push appends h at the new end of the ring, growing it up to cap.
func (s *shard) push(h uint64) {
	if s.n == len(s.ring) {
		grown := make([]uint64, min(max(2*len(s.ring), 16), s.cap))
		for i := range s.n {
			grown[i] = s.ring[(s.old+i)%len(s.ring)]
		}
		s.ring, s.old = grown, 0
	}
	s.ring[(s.old+s.n)%len(s.ring)] = h
	s.n++
}

// popOldest drops the oldest hash from the ring; the caller deletes it
// from the map or pushes it again.
func (s *shard) popOldest() {
	s.old++
	if s.old == len(s.ring) {
		s.old = 0
	}
	s.n--
}
