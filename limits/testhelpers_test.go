package limits

import (
	"math"
	"time"
)

// Test-only views of the tables and the gate: the server never asks what a
// table would decide without deciding, and always admits through
// AdmitClock.

// Peek reports what Allow would decide for key at now, without spending
// anything or changing the table. Remaining counts the request asked
// about. For an unknown key in a shard that is full of throttled keys, Peek
// reports the same refusal Allow would give.
func (t *Table) Peek(key string, r Rate, now time.Time) Decision {
	interval, tolerance, limited := r.gcra()
	if !limited {
		return unlimitedDecision(r)
	}
	nowN := t.offset(now)
	h := t.hash(key)
	s := t.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.index.find(h); i >= 0 {
		s.latest = max(s.latest, nowN)
		return peek(clampTAT(s.index.entries[i].tat, s.latest, interval, tolerance), nowN, interval, tolerance, r)
	}
	if s.n >= s.cap {
		if wait, ok := s.evictable(nowN); !ok {
			return Decision{RetryAfter: wait, Limit: r}
		}
	}
	return peek(nowN, nowN, interval, tolerance, r)
}

// Admit is AdmitClock at a fixed now, for fixed timelines.
func (g *Gate) Admit(credential, tenant string, l Limits, now time.Time) (Admission, error) {
	return g.admit(g.keys(credential, tenant), credential, tenant, l, now)
}

// evictable is makeRoom for a full shard without changes, for Peek.
func (s *shard) evictable(now int64) (time.Duration, bool) {
	wait := int64(math.MaxInt64)
	for seen := 0; seen < scanPerInsert && seen < s.n; seen++ {
		tat := s.index.entries[s.index.find(s.ring[(s.old+seen)%len(s.ring)])].tat
		if tat <= now {
			return 0, true
		}
		wait = min(wait, tat-now)
	}
	if wait == math.MaxInt64 {
		wait = int64(time.Second)
	}
	return time.Duration(wait), false
}
