package budget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"openxet/fairq"
)

// holding is a reservation a test makes before the one it watches.
type holding struct {
	k Key
	n int64
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	tests := []struct {
		name    string
		holders []holding
		head    Key // cancelled while waiting at the head
		headN   int64
		later   Key // queued behind head; fits once head leaves
		laterN  int64
	}{
		{name: "head blocked by the budget",
			holders: []holding{{key("x", "X"), 25}, {key("y", "Y"), 25}, {key("z", "Z"), 25}, {key("w", "W"), 10}},
			head:    key("a", "A"), headN: 25, later: key("b", "B"), laterN: 15},
		{name: "head blocked by its credential",
			holders: []holding{{key("a", "A"), 20}},
			head:    key("a", "A"), headN: 10, later: key("a", "A"), laterN: 5},
		{name: "head blocked by its tenant",
			holders: []holding{{key("a", "A"), 25}, {key("b", "A"), 20}},
			head:    key("c", "A"), headN: 10, later: key("d", "A"), laterN: 5},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := hundred(time.Minute)
			var held []Reservation
			for _, h := range tt.holders {
				held = append(held, mustReserve(t, b, h.k, h.n))
			}
			ctx, cancel := context.WithCancel(t.Context())
			head := reserveAsync(ctx, b, tt.head, tt.headN)
			synctest.Wait()
			later := reserveAsync(t.Context(), b, tt.later, tt.laterN)
			if !pending(later) {
				t.Fatalf("%s: later reservation did not queue behind the head", tt.name)
			}
			advance(time.Second)
			cancel()
			ho := <-head
			if !errors.Is(ho.err, context.Canceled) || ho.elapsed != time.Second {
				t.Errorf("%s: head = %v after %v, want context.Canceled after 1s", tt.name, ho.err, ho.elapsed)
			}
			lo := <-later
			if lo.err != nil || lo.elapsed != time.Second {
				t.Errorf("%s: later = %v after %v, want granted when the head left, after 1s", tt.name, lo.err, lo.elapsed)
			}
			if s := b.Stats(); s.Cancelled != 1 || s.Waiting != 0 {
				t.Errorf("%s: stats %+v, want one cancelled and nobody waiting", tt.name, s)
			}
			lo.r.Release()
			for i := range held {
				held[i].Release()
			}
			checkDrained(t, b)
		})
	}
}

func TestCancelledBeforeWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := hundred(time.Minute)
		r := mustReserve(t, b, key("a", "A"), 25)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		// A reservation that fits is granted even with ctx done.
		r2 := mustReserve(t, b, key("b", "B"), 25)
		r2.Release()
		if _, err := b.Reserve(ctx, key("a", "A"), 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Reserve with a done ctx that must wait = %v, want context.Canceled", err)
		}
		// The refused reservation left no mark behind: another of the
		// credential that fits is granted at once.
		r.Release()
		r3 := mustReserve(t, b, key("a", "A"), 25)
		r3.Release()
		checkDrained(t, b)
	})
}

// The times of TestLargeWaiterNotStarved: a small reservation arrives every
// streamEvery and holds for streamHold; the large one asks at largeAt.
const (
	streamEvery = 10 * time.Millisecond
	streamHold  = 45 * time.Millisecond
	largeAt     = 500*time.Millisecond + 7*time.Millisecond
)

// starveCase is a case of TestLargeWaiterNotStarved.
type starveCase struct {
	name   string
	small  func(i int) Key // the key of the i-th small reservation
	smallN int64
	large  Key
	largeN int64
}

func TestLargeWaiterNotStarved(t *testing.T) {
	// A stream of small reservations arrives every 10 ms (at whole multiples of
	// it) and holds for 45 ms (releasing at 5 ms past), so whatever limits them
	// stays nearly full. Without the no-barging rule the large reservation,
	// asking at 507 ms, would never see room: each release is taken by the next
	// small arrival.
	tests := []starveCase{
		// A credential holds 20-25 of its 25 bytes; the large one needs 20.
		{name: "same credential", small: func(int) Key { return key("a", "A") }, smallN: 5,
			large: key("a", "A"), largeN: 20},
		// A tenant holds 40-50 of its 50 bytes, over five credentials; the
		// large one, of another credential of that tenant, needs 25.
		{name: "same tenant", small: func(i int) Key { return key(fmt.Sprintf("a%d", i%5), "A") }, smallN: 10,
			large: key("big", "A"), largeN: 25},
		// Ten credentials of ten tenants keep 80-100 of the budget's 100
		// bytes; the large one fits its shares but needs 25 of the budget.
		{name: "whole budget", small: func(i int) Key { return key(fmt.Sprintf("s%d", i%10), fmt.Sprintf("T%d", i%10)) }, smallN: 20,
			large: key("big", "BIG"), largeN: 25},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) { checkLargeNotStarved(t, tt) })
	}
}

// checkLargeNotStarved runs tt (in a synctest bubble): the large
// reservation, asked for amid the stream of small ones, is granted within
// one hold, before every small one that arrives after it.
func checkLargeNotStarved(t *testing.T, tt starveCase) {
	b := hundred(time.Minute)
	stream := startSmalls(t, b, tt, time.Now())
	defer stream.stop() // also when the test fails early
	advance(largeAt)
	if s := b.Stats(); s.Waiting != 0 {
		t.Fatalf("small reservations wait before the large one comes: %+v", s)
	}
	o := <-reserveAsync(t.Context(), b, tt.large, tt.largeN)
	if o.err != nil {
		t.Fatalf("large = %v", o.err)
	}
	if o.elapsed == 0 || o.elapsed > streamHold {
		t.Errorf("large waited %v, want more than 0 and at most one hold (%v)", o.elapsed, streamHold)
	}
	grantedAt := largeAt + o.elapsed
	advance(streamHold)
	o.r.Release()
	stream.stop()
	stream.mu.Lock()
	defer stream.mu.Unlock()
	checkNoBarging(t, stream.smalls, grantedAt)
	checkDrained(t, b)
}

// smallGrant is when a small reservation arrived and when it was granted,
// from the start of its stream.
type smallGrant struct{ arrived, granted time.Duration }

// smallStream is a stream of small reservations under way.
type smallStream struct {
	mu     sync.Mutex
	smalls []smallGrant // the granted ones, under mu
	done   chan struct{}
	wg     sync.WaitGroup
	stop   func() // ends the stream and waits until every reservation is released
}

// startSmalls starts tt's stream of small reservations on b: one every
// streamEvery after start, each held for streamHold.
func startSmalls(t *testing.T, b *Budget, tt starveCase, start time.Time) *smallStream {
	st := &smallStream{done: make(chan struct{})}
	st.stop = sync.OnceFunc(func() {
		close(st.done)
		st.wg.Wait()
	})
	st.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-st.done:
				return
			case <-time.After(streamEvery):
			}
			st.wg.Go(func() {
				arrived := time.Since(start)
				r, err := b.Reserve(t.Context(), tt.small(i), tt.smallN)
				if err != nil {
					t.Errorf("small %d: %v", i, err)
					return
				}
				st.mu.Lock()
				st.smalls = append(st.smalls, smallGrant{arrived, time.Since(start)})
				st.mu.Unlock()
				advance(streamHold)
				r.Release()
			})
		}
	})
	return st
}

// checkNoBarging checks that some small reservation arrived after the large
// one (at largeAt, granted at grantedAt) and none of those was granted before it.
func checkNoBarging(t *testing.T, smalls []smallGrant, grantedAt time.Duration) {
	t.Helper()
	var after int
	for _, s := range smalls {
		if s.arrived > largeAt {
			after++
			if s.granted < grantedAt {
				t.Errorf("small arriving at %v was granted at %v, before the large one that arrived at %v (granted at %v)",
					s.arrived, s.granted, largeAt, grantedAt)
			}
		}
	}
	if after == 0 {
		t.Errorf("no small reservation arrived after the large one")
	}
}

func TestDoubleReleaseIsNoop(t *testing.T) {
	tests := []struct {
		name    string
		release func(r *Reservation)
	}{
		{name: "twice", release: func(r *Reservation) { r.Release(); r.Release() }},
		{name: "copy after original", release: func(r *Reservation) {
			c := *r
			r.Release()
			c.Release()
		}},
		{name: "original after copy", release: func(r *Reservation) {
			c := *r
			c.Release()
			r.Release()
		}},
		{name: "concurrently", release: func(r *Reservation) {
			var wg sync.WaitGroup
			for range 8 {
				c := *r
				wg.Go(func() { c.Release(); r.Release() })
			}
			wg.Wait()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Config{TotalBytes: 100, CredentialShare: 1, TenantShare: 1})
			other := mustReserve(t, b, key("o", "O"), 40)
			r := mustReserve(t, b, key("a", "A"), 60)
			stale := r
			tt.release(&r)
			if s := b.Stats(); s.ReservedBytes != 40 || s.Reservations != 1 {
				t.Fatalf("after releasing 60 of 100: reserved %d in %d reservations, want 40 in 1", s.ReservedBytes, s.Reservations)
			}
			// The released ticket is reused; a stale copy must not release its
			// new owner.
			next := mustReserve(t, b, key("a", "A"), 60)
			stale.Release()
			if cred, _ := b.Held(key("a", "A")); cred != 60 {
				t.Errorf("stale Release freed a reused reservation: credential holds %d, want 60", cred)
			}
			// With ctx done, Reserve grants only what fits at once.
			done, cancel := context.WithCancel(t.Context())
			cancel()
			if _, err := b.Reserve(done, key("x", "X"), 1); err == nil || b.Stats().ReservedBytes != 100 {
				t.Errorf("budget accepted more than it has: reserved %d", b.Stats().ReservedBytes)
			}
			next.Release()
			other.Release()
			checkDrained(t, b)
		})
	}
}

func TestZeroAndNegativeReservations(t *testing.T) {
	b := hundred(time.Second)
	var zero Reservation
	zero.Release()
	r, err := b.Reserve(t.Context(), key("a", "A"), 0)
	if err != nil || r.Bytes() != 0 {
		t.Errorf("Reserve(0) = %+v, %v; want an empty reservation", r, err)
	}
	r.Release()
	r, err = b.Reserve(t.Context(), key("a", "A"), -1)
	if err == nil || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBusy) {
		t.Errorf("Reserve(-1) = %v, want a plain error", err)
	}
	r.Release()
	checkDrained(t, b)
}

func TestHeldAndStats(t *testing.T) {
	b := hundred(time.Second)
	steps := []struct {
		k        Key
		n        int64
		wantCred int64
		wantTen  int64
	}{
		{key("a", "A"), 10, 10, 10},
		{key("a", "A"), 5, 15, 15},
		{key("b", "A"), 20, 20, 35},
		{key("c", "C"), 25, 25, 25},
	}
	var held []Reservation
	for i, s := range steps {
		held = append(held, mustReserve(t, b, s.k, s.n))
		if c, tn := b.Held(s.k); c != s.wantCred || tn != s.wantTen {
			t.Errorf("step %d: Held(%v) = %d, %d; want %d, %d", i, s.k, c, tn, s.wantCred, s.wantTen)
		}
	}
	s := b.Stats()
	want := Stats{TotalBytes: 100, CredentialBytes: 25, TenantBytes: 50, ReservedBytes: 60, HighWaterBytes: 60,
		Reservations: 4, Credentials: 3, Tenants: 2, Granted: 4}
	if s != want {
		t.Errorf("Stats() = %+v, want %+v", s, want)
	}
	for i := range held {
		held[i].Release()
	}
	if c, tn := b.Held(key("a", "A")); c != 0 || tn != 0 {
		t.Errorf("after release Held = %d, %d; want 0, 0", c, tn)
	}
	if s := b.Stats(); s.HighWaterBytes != 60 || s.ReservedBytes != 0 {
		t.Errorf("after release: %+v", s)
	}
	checkDrained(t, b)
}

// TestIdleEntriesAreBounded: entries that fall idle stay for reuse, at most
// fairq.MaxIdle of each kind, the oldest leaving first; they hold nothing, count
// for nothing in Stats, and a key that comes back behaves as a fresh one.
func TestIdleEntriesAreBounded(t *testing.T) {
	b := hundred(time.Second)
	n := fairq.MaxIdle + 10
	for i := range n {
		r := mustReserve(t, b, key(fmt.Sprintf("c%d", i), fmt.Sprintf("t%d", i)), 5)
		r.Release()
	}
	checkDrained(t, b)
	if b.creds.Len() != fairq.MaxIdle || b.tenants.Len() != fairq.MaxIdle {
		t.Fatalf("%d credential and %d tenant entries kept, want %d each", b.creds.Len(), b.tenants.Len(), fairq.MaxIdle)
	}
	if b.creds.Find("c0") != nil || b.creds.Find(fmt.Sprintf("c%d", n-1)) == nil {
		t.Errorf("the oldest idle entry stayed or the newest left")
	}
	// A kept key and a dropped key both get their full share again.
	for _, c := range []string{"c0", fmt.Sprintf("c%d", n-1)} {
		r := mustReserve(t, b, key(c, "t"), 25)
		if got, _ := b.Held(key(c, "t")); got != 25 {
			t.Errorf("Held(%s) = %d, want 25", c, got)
		}
		checkInvariants(t, b)
		r.Release()
	}
	checkDrained(t, b)
}

// TestTenantSharesHoldANamedTenant: a tenant Config.TenantShares names
// (the server's anonymous pool, tenant "") holds at most its own share,
// whichever credentials ask: more is refused at once when it could never
// fit, and waits then gets a *BusyError naming the tenant share when it
// could. Meanwhile another tenant still gets its whole TenantShare.
func TestTenantSharesHoldANamedTenant(t *testing.T) {
	const wait = 10 * time.Second
	bubble(t, "pool", func(t *testing.T) {
		b := New(Config{TotalBytes: 100, CredentialShare: 0.25, TenantShare: 0.5, TenantShares: map[string]float64{"": 0.2}, Wait: wait})
		var tl *TooLargeError
		if _, err := b.Reserve(t.Context(), key("ip1", ""), 21); !errors.As(err, &tl) || tl.Limit != 20 || tl.Share != ShareTenant {
			t.Fatalf("21 bytes of a 20-byte pool: %v, want a *TooLargeError of the tenant share", err)
		}
		a := mustReserve(t, b, key("ip1", ""), 15)
		c := mustReserve(t, b, key("ip2", ""), 5)
		o := <-reserveAsync(t.Context(), b, key("ip3", ""), 1)
		var busy *BusyError
		if !errors.As(o.err, &busy) || busy.Share != ShareTenant || o.elapsed != wait || busy.RetryAfter < time.Second {
			t.Fatalf("a byte over the pool's share: %v after %v, want a *BusyError of the tenant share after %v", o.err, o.elapsed, wait)
		}
		other := mustReserve(t, b, key("alice1", "alice"), 25)
		other2 := mustReserve(t, b, key("alice2", "alice"), 25)
		if _, held := b.Held(key("", "")); held != 20 {
			t.Errorf("pool holds %d, want 20", held)
		}
		for _, r := range []*Reservation{&a, &c, &other, &other2} {
			r.Release()
		}
		checkDrained(t, b)
	})
	for _, c := range []struct {
		share float64
		ok    bool
	}{{0.2, true}, {0.005, false}, {1.5, false}, {0.01, false}} {
		err := Config{TotalBytes: 1000, CredentialShare: 0.25, TenantShare: 0.5, TenantShares: map[string]float64{"": c.share}, Wait: time.Second}.Validate(100)
		var ce *ConfigError
		if c.ok != (err == nil) || !c.ok && (!errors.As(err, &ce) || !strings.Contains(ce.Key, KeyTenantShare)) {
			t.Errorf("TenantShares share %v: Validate = %v", c.share, err)
		}
	}
}
