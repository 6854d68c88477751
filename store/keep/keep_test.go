package keep

import (
	"testing"
	"time"
)

// TestKeepRules: each rule on a fixed time base, T0 = 1000 and
// a grace of 100 s (OwnerGrace is longer, so an owner's grace is 100 s
// too), at and on both sides of every bound.
func TestKeepRules(t *testing.T) {
	pt := Time{T0: 1000, Grace: 100}
	owners := []struct {
		name string
		f    OwnerFacts
		want Verdict
	}{
		{"needed by a retained file", OwnerFacts{Needed: true, Created: 0}, Needed},
		{"needed even when dropped and old", OwnerFacts{Needed: true, Dropped: true, Created: 0}, Needed},
		{"created at the grace's start", OwnerFacts{Created: 900}, Grace},
		{"created just before it", OwnerFacts{Created: 899}, Act},
		{"created lately but dropped", OwnerFacts{Created: 999, Dropped: true}, Act},
		{"touched at T0", OwnerFacts{Created: 0, Touched: 1000}, Act},
		{"touched after T0", OwnerFacts{Created: 0, Touched: 1001}, Touched},
		{"dropped, touched after T0", OwnerFacts{Created: 999, Dropped: true, Touched: 1001}, Touched},
	}
	for _, c := range owners {
		if got := pt.Owner(c.f); got != c.want {
			t.Errorf("owner %s (%+v): %d, want %d", c.name, c.f, got, c.want)
		}
	}
	shards := []struct {
		name string
		f    ShardOwnerFacts
		want Verdict
	}{
		{"nothing holds it", ShardOwnerFacts{Touched: 900, Epoch: 900}, Act},
		{"registered within the grace", ShardOwnerFacts{Touched: 901}, Grace},
		{"index younger than the grace", ShardOwnerFacts{Epoch: 901}, Grace},
		{"a file came through it", ShardOwnerFacts{HasFile: true}, Needed},
		{"its tenant owns a xorb of it", ShardOwnerFacts{OwnsXorb: true}, Needed},
		{"grace before need", ShardOwnerFacts{Touched: 950, HasFile: true}, Grace},
	}
	for _, c := range shards {
		if got := pt.ShardOwner(c.f); got != c.want {
			t.Errorf("shard owner %s (%+v): %d, want %d", c.name, c.f, got, c.want)
		}
	}
	objects := []struct {
		name string
		f    ObjectFacts
		want Verdict
	}{
		{"garbage", ObjectFacts{Touched: 900, Settled: 900}, Act},
		{"being deleted", ObjectFacts{Doomed: true}, Doomed},
		{"doomed before needed", ObjectFacts{Doomed: true, Needed: true}, Doomed},
		{"owned or referenced", ObjectFacts{Needed: true}, Needed},
		{"touched within the grace", ObjectFacts{Touched: 901}, Touched},
		{"touched after T0", ObjectFacts{Touched: 1001}, Touched},
		{"written or released within the grace", ObjectFacts{Settled: 901}, Grace},
		{"touch before settling", ObjectFacts{Touched: 950, Settled: 950}, Touched},
	}
	for _, c := range objects {
		if got := pt.Object(c.f); got != c.want {
			t.Errorf("object %s (%+v): %d, want %d", c.name, c.f, got, c.want)
		}
	}
	// A grace longer than OwnerGrace caps an owner's.
	long := NewTime(1_000_000, 30*24*time.Hour)
	if got, want := long.OwnerGraceStart(), int64(1_000_000-24*3600); got != want {
		t.Errorf("owner grace start under a 30-day grace: %d, want %d", got, want)
	}
	if got, want := long.GraceStart(), int64(1_000_000-30*24*3600); got != want {
		t.Errorf("grace start: %d, want %d", got, want)
	}
}
