package limits

import (
	"hash/maphash"
	"sync"
)

// InFlight counts requests in progress per key (a credential) and caps
// them. An entry exists only while its count is above zero, so the table
// never holds more entries than there are requests in progress and needs
// no eviction. The zero value is not usable; call NewInFlight. An InFlight
// is safe for concurrent use.
//
// Every Acquire that returns true must be paired with exactly one Release,
// including when the request panics or the client goes away (use defer).
//
// Like Table, it identifies keys by a seeded 64-bit hash; a collision
// would make two keys share one count, which can only make both stricter.
type InFlight struct {
	seed   maphash.Seed
	shards [maxShards]inFlightShard
}

type inFlightShard struct {
	mu sync.Mutex
	// count maps a key hash to its requests in flight (the entry's tat
	// field holds the count). Entries come and go with requests, so it is
	// the open-addressing table the rate tables use rather than a Go map,
	// whose insert and delete cost more than the lookup on every request.
	count    tatTable
	total    int
	acquired uint64
	refused  uint64
	_        [64]byte
}

// InFlightStats is a snapshot of an InFlight's counters, for metrics.
type InFlightStats struct {
	Keys     int    // keys with at least one request in flight
	InFlight int    // requests in flight, all keys
	Acquired uint64 // successful Acquire calls
	Refused  uint64 // Acquire calls refused at the cap
}

// NewInFlight returns an empty counter set.
func NewInFlight() *InFlight {
	return newInFlight(maphash.MakeSeed())
}

// newInFlight returns an empty counter set that hashes keys with seed.
// Gate gives it the credential table's seed, so that one hash of a
// credential serves both (Table.hash).
func newInFlight(seed maphash.Seed) *InFlight {
	return &InFlight{seed: seed}
}

// shardOf is the shard that counts the key whose hash under f's seed is h.
func (f *InFlight) shardOf(h uint64) *inFlightShard {
	return &f.shards[h%maxShards]
}

// Acquire counts one more request in flight for key and returns true,
// unless key already has max requests in flight, in which case it changes
// nothing and returns false. max <= 0 means no cap (the request is still
// counted). A lowered max applies to the next Acquire; requests already in
// flight are not affected.
func (f *InFlight) Acquire(key string, max int) bool {
	return f.acquireHash(keyHash(f.seed, key), max)
}

// acquireHash is Acquire for the key whose hash under f's seed is h.
func (f *InFlight) acquireHash(h uint64, max int) bool {
	s := f.shardOf(h)
	s.mu.Lock()
	i := s.count.find(h)
	var c int64
	if i >= 0 {
		c = s.count.entries[i].tat
	}
	if max > 0 && c >= int64(max) {
		s.refused++
		s.mu.Unlock()
		return false
	}
	if i >= 0 {
		s.count.entries[i].tat = c + 1
	} else {
		s.count.insert(h, 1)
	}
	s.total++
	s.acquired++
	s.mu.Unlock()
	return true
}

// Release ends one request of key that Acquire admitted. The key's entry is
// deleted when its count returns to zero. Releasing a key with nothing in
// flight is a no-op.
func (f *InFlight) Release(key string) {
	f.releaseHash(keyHash(f.seed, key))
}

// releaseHash is Release for the key whose hash under f's seed is h.
func (f *InFlight) releaseHash(h uint64) {
	s := f.shardOf(h)
	s.mu.Lock()
	if i := s.count.find(h); i >= 0 {
		s.total--
		if e := &s.count.entries[i]; e.tat <= 1 {
			s.count.removeAt(i)
		} else {
			e.tat--
		}
	}
	s.mu.Unlock()
}

// Count returns the number of requests of key in flight.
func (f *InFlight) Count(key string) int {
	h := keyHash(f.seed, key)
	s := f.shardOf(h)
	s.mu.Lock()
	var c int64
	if i := s.count.find(h); i >= 0 {
		c = s.count.entries[i].tat
	}
	s.mu.Unlock()
	return int(c)
}

// Len returns the number of keys with requests in flight.
func (f *InFlight) Len() int {
	return f.Stats().Keys
}

// Stats returns the counters, reading each shard under its lock in turn.
func (f *InFlight) Stats() InFlightStats {
	var st InFlightStats
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		st.Keys += s.count.n
		st.InFlight += s.total
		st.Acquired += s.acquired
		st.Refused += s.refused
		s.mu.Unlock()
	}
	return st
}
