package work

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"openxet/fairq"
)

// Tests that wait run inside synctest bubbles: time there is virtual and
// advances only when every goroutine of the bubble is blocked, so waits are
// exact and the order of grants is decided by the pool alone.

type outcome struct {
	s       Slot
	err     error
	elapsed time.Duration
}

// acquireAsync calls Acquire on a new goroutine; the outcome arrives on the
// channel.
func acquireAsync(ctx context.Context, p *Pool, tenant string) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		start := time.Now()
		s, err := p.Acquire(ctx, tenant)
		ch <- outcome{s: s, err: err, elapsed: time.Since(start)}
	}()
	return ch
}

// mustAcquire acquires a slot that must be granted at once: it passes a ctx
// already done, which Acquire consults only when it would wait.
func mustAcquire(t *testing.T, p *Pool, tenant string) Slot {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s, err := p.Acquire(ctx, tenant)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v, want a slot at once", tenant, err)
	}
	return s
}

// advance lets virtual time pass in the bubble.
func advance(d time.Duration) { <-time.After(d) }

// pending reports whether ch has no outcome yet, once the bubble is idle.
func pending(ch <-chan outcome) bool {
	synctest.Wait()
	return len(ch) == 0
}

// checkIdle checks that nothing is held or waiting and no entry is left.
func checkIdle(t *testing.T, p *Pool) {
	t.Helper()
	st := p.Stats()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for e := range p.tenants.All() {
		if e.Idle() {
			n++
		}
		if !e.Idle() || e.V.held != 0 || e.V.line.Len() != 0 {
			t.Errorf("entry %q: idle %v, held %d, waiters %d", e.Key(), e.Idle(), e.V.held, e.V.line.Len())
		}
	}
	for e := range p.tenants.All() {
		if p.tenants.Find(e.Key()) != e {
			t.Errorf("entry %q is not found under its key", e.Key())
		}
	}
	if st.Held != 0 || st.Waiting != 0 || st.Tenants != 0 || p.ring != nil || p.tenants.Len() != n || p.tenants.Active() != 0 || n > fairq.MaxIdle {
		t.Errorf("idle pool: held %d, waiting %d, tenants %d, ring %v, %d entries of which %d idle; want nothing held, waiting or active",
			st.Held, st.Waiting, st.Tenants, p.ring != nil, p.tenants.Len(), n)
	}
}

func TestGrantAtOnceAndShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Slots: 4, TenantShare: 0.5, Wait: time.Minute})
		if got := p.TenantSlots(); got != 2 {
			t.Fatalf("TenantSlots = %d, want 2", got)
		}
		a1, a2 := mustAcquire(t, p, "a"), mustAcquire(t, p, "a")
		// a is at its share: its third request waits although two slots are free.
		a3 := acquireAsync(t.Context(), p, "a")
		if !pending(a3) {
			t.Fatalf("a's third request was granted past its share of 2")
		}
		b1 := mustAcquire(t, p, "b") // another tenant passes it
		if got := p.Held("a"); got != 2 {
			t.Errorf("Held(a) = %d, want 2", got)
		}
		a1.Release()
		o := <-a3
		if o.err != nil {
			t.Fatalf("a's third request: %v, want granted when a released one", o.err)
		}
		for _, s := range []*Slot{&a2, &b1, &o.s} {
			s.Release()
		}
		st := p.Stats()
		if st.Granted != 4 || st.Waited != 1 || st.Peak != 3 {
			t.Errorf("Stats = %+v, want Granted 4, Waited 1, Peak 3", st)
		}
		checkIdle(t, p)
	})
}

// TestFloodDoesNotDelayOthers: a tenant with a long line ahead gets one slot
// per turn of the ring; each other tenant's single request waits for at
// most one of the flood's grants.
func TestFloodDoesNotDelayOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Slots: 2, TenantShare: 1, Wait: time.Hour})
		held := []Slot{mustAcquire(t, p, "flood"), mustAcquire(t, p, "flood")}

		var mu sync.Mutex
		var order []string
		type waiter struct {
			name string
			ch   <-chan outcome
		}
		var waiters []waiter
		add := func(tenant, name string) {
			ch := make(chan outcome, 1)
			go func() {
				s, err := p.Acquire(t.Context(), tenant)
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				ch <- outcome{s: s, err: err}
			}()
			synctest.Wait() // queue in this order
			waiters = append(waiters, waiter{name, ch})
		}
		for i := range 100 {
			add("flood", fmt.Sprintf("flood%03d", i))
		}
		add("b", "b")
		add("c", "c")
		add("d", "d")

		// Release one slot at a time, as the holder of each finishes.
		for len(held) > 0 {
			s := held[0]
			held = held[1:]
			s.Release()
			synctest.Wait()
			for i := 0; i < len(waiters); i++ {
				if len(waiters[i].ch) == 1 {
					o := <-waiters[i].ch
					if o.err != nil {
						t.Fatalf("%s: %v", waiters[i].name, o.err)
					}
					held = append(held, o.s)
					waiters = append(waiters[:i], waiters[i+1:]...)
					i--
				}
			}
		}
		want := []string{"flood000", "b", "c", "d", "flood001", "flood002"}
		for i, w := range want {
			if order[i] != w {
				t.Fatalf("grant order starts %v, want %v", order[:len(want)], want)
			}
		}
		// Within the flood, first in first out.
		n := 0
		for _, name := range order {
			if len(name) == 8 && name[:5] == "flood" {
				if want := fmt.Sprintf("flood%03d", n); name != want {
					t.Fatalf("flood granted %s where %s was next in its line", name, want)
				}
				n++
			}
		}
		if n != 100 {
			t.Errorf("%d of the flood's 100 requests granted", n)
		}
		checkIdle(t, p)
	})
}

// TestRoundRobinAmongFloods: two tenants with long lines alternate, and a
// tenant at its share is passed over while others below theirs are served.
func TestRoundRobinAmongFloods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Slots: 3, TenantShare: 0.34, Wait: time.Hour}) // one slot per tenant
		hogA, hogB, other := mustAcquire(t, p, "a"), mustAcquire(t, p, "b"), mustAcquire(t, p, "x")
		var as, bs []<-chan outcome
		for range 3 {
			as = append(as, acquireAsync(t.Context(), p, "a"))
			synctest.Wait()
		}
		for range 3 {
			bs = append(bs, acquireAsync(t.Context(), p, "b"))
			synctest.Wait()
		}
		// Slot of x frees: a and b are both at their share of one.
		other.Release()
		if !pending(as[0]) || !pending(bs[0]) {
			t.Fatalf("a tenant at its share of one slot was granted a second")
		}
		if st := p.Stats(); st.Held != 2 || st.Waiting != 6 {
			t.Fatalf("Stats = %+v, want Held 2, Waiting 6", st)
		}
		// b releases: only b is below its share, so b is served.
		hogB.Release()
		ob := <-bs[0]
		if !pending(as[0]) {
			t.Fatalf("a granted past its share")
		}
		hogA.Release()
		oa := <-as[0]
		// From here each release serves the tenant whose slot freed; the
		// one free slot left goes to whoever is next in the ring.
		for _, o := range []outcome{oa, ob} {
			if o.err != nil {
				t.Fatal(o.err)
			}
		}
		oa.s.Release()
		ob.s.Release()
		for i := 1; i < 3; i++ {
			a, b := <-as[i], <-bs[i]
			a.s.Release()
			b.s.Release()
		}
		checkIdle(t, p)
	})
}

func TestWaitEndsBusy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holder  string // tenant holding the slot a would get
		atShare bool
	}{
		{"node busy", "other", false},
		{"at its share", "a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := New(Config{Slots: 2, TenantShare: 0.5, Wait: 3 * time.Second})
				h1 := mustAcquire(t, p, tc.holder)
				var h2 Slot
				if !tc.atShare {
					h2 = mustAcquire(t, p, "third")
				}
				ch := acquireAsync(t.Context(), p, "a")
				advance(time.Second)
				later := acquireAsync(t.Context(), p, "a")
				o := <-ch
				var be *BusyError
				if !errors.As(o.err, &be) || !errors.Is(o.err, ErrBusy) {
					t.Fatalf("Acquire = %v, want *BusyError", o.err)
				}
				if o.elapsed != 3*time.Second || be.Waited != 3*time.Second || be.RetryAfter != time.Second || be.AtShare != tc.atShare {
					t.Errorf("elapsed %v, error %+v; want 3s, Waited 3s, RetryAfter 1s, AtShare %v", o.elapsed, be, tc.atShare)
				}
				// The request behind it in a's line is next once a slot frees.
				h1.Release()
				if o2 := <-later; o2.err != nil {
					t.Errorf("the next request of a: %v, want granted", o2.err)
				} else {
					o2.s.Release()
				}
				h2.Release()
				if st := p.Stats(); st.Busy != 1 || st.Waited != 2 {
					t.Errorf("Stats = %+v, want Busy 1, Waited 2", st)
				}
				checkIdle(t, p)
			})
		})
	}
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Slots: 1, TenantShare: 1, Wait: time.Hour})
		h := mustAcquire(t, p, "x")
		ctx, cancel := context.WithCancel(t.Context())
		gone := acquireAsync(ctx, p, "a")
		stays := acquireAsync(t.Context(), p, "b")
		advance(time.Second)
		cancel()
		o := <-gone
		if !errors.Is(o.err, context.Canceled) || o.elapsed != time.Second {
			t.Fatalf("cancelled Acquire = %v after %v, want context.Canceled after 1s", o.err, o.elapsed)
		}
		if st := p.Stats(); st.Waiting != 1 || st.Canceled != 1 {
			t.Errorf("Stats = %+v, want Waiting 1, Canceled 1", st)
		}
		h.Release()
		o = <-stays
		if o.err != nil {
			t.Fatalf("the waiter behind the cancelled one: %v", o.err)
		}
		o.s.Release()
		// A ctx already done does not matter when a slot is free, and
		// fails at once when the request would wait.
		s := mustAcquire(t, p, "a")
		if _, err := p.Acquire(ctx, "b"); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with a done ctx on a full pool = %v, want context.Canceled", err)
		}
		s.Release()
		checkIdle(t, p)
	})
}

func TestReleaseOnce(t *testing.T) {
	p := New(Config{Slots: 2, TenantShare: 1, Wait: time.Second})
	s := mustAcquire(t, p, "a")
	cp := s
	s.Release()
	s.Release()
	cp.Release()
	var zero Slot
	zero.Release()
	// A stale copy must not release the slot that reuses its ticket.
	s2 := mustAcquire(t, p, "a")
	cp.Release()
	if got := p.Held("a"); got != 1 {
		t.Errorf("Held(a) = %d after a stale copy's Release, want 1", got)
	}
	s2.Release()
	checkIdle(t, p)
}

func TestAcquireReleaseAllocs(t *testing.T) {
	p := New(Config{Slots: 8, TenantShare: 0.25, Wait: time.Second})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		s, err := p.Acquire(ctx, "tenant")
		if err != nil {
			t.Fatal(err)
		}
		s.Release()
	})
	if allocs != 0 {
		t.Errorf("Acquire+Release without waiting: %v allocs, want 0", allocs)
	}
}

// TestConcurrentNoLeak runs many goroutines of many tenants acquiring,
// giving up and releasing at random, under -race, and checks that the pool
// ends idle and never granted past a limit.
func TestConcurrentNoLeak(t *testing.T) {
	p := New(Config{Slots: 4, TenantShare: 0.5, Wait: 50 * time.Millisecond})
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[string]int{}
	total, over := 0, ""
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			tenant := fmt.Sprintf("t%d", g%5)
			for range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(4) == 0 {
					cancel()
				}
				s, err := p.Acquire(ctx, tenant)
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				held[tenant]++
				total++
				if held[tenant] > 2 || total > 4 {
					over = fmt.Sprintf("tenant %s holds %d, node %d", tenant, held[tenant], total)
				}
				mu.Unlock()
				for range r.IntN(3) {
					runtime.Gosched()
				}
				mu.Lock()
				held[tenant]--
				total--
				mu.Unlock()
				s.Release()
			}
		})
	}
	wg.Wait()
	if over != "" {
		t.Errorf("granted past a limit: %s", over)
	}
	checkIdle(t, p)
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		c       Config
		slots   int
		wantErr []string // keys named
	}{
		{Config{Slots: 8, TenantShare: 0.25, Wait: time.Second}, 2, nil},
		{Config{Slots: 3, TenantShare: 0.25, Wait: time.Second}, 1, nil}, // never below one
		{Config{Slots: 8, TenantShare: 1, Wait: time.Second}, 8, nil},
		{Config{}, 2, []string{KeySlots, KeyTenantShare, KeyWait}},
		{Config{Slots: MaxSlots + 1, TenantShare: 1.5, Wait: -time.Second}, MaxSlots, []string{KeySlots, KeyTenantShare, KeyWait}},
	} {
		t.Run(fmt.Sprintf("%+v", tc.c), func(t *testing.T) {
			if got := tc.c.TenantSlots(); got != tc.slots {
				t.Errorf("TenantSlots = %d, want %d", got, tc.slots)
			}
			err := tc.c.Validate()
			var got []string
			for _, e := range unwrapAll(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("Validate error %v is not a *ConfigError", e)
				}
				got = append(got, ce.Key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantErr) {
				t.Errorf("Validate names %v, want %v (%v)", got, tc.wantErr, err)
			}
		})
	}
}

func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestIdleEntriesAreBounded: tenants that fall idle keep their entry for
// reuse, at most fairq.MaxIdle of them, the oldest leaving first.
func TestIdleEntriesAreBounded(t *testing.T) {
	p := New(Config{Slots: 2, TenantShare: 0.5, Wait: time.Second})
	n := fairq.MaxIdle + 10
	for i := range n {
		s := mustAcquire(t, p, fmt.Sprintf("t%d", i))
		s.Release()
	}
	checkIdle(t, p)
	p.mu.Lock()
	kept, oldest, newest := p.tenants.Len(), p.tenants.Find("t0") != nil, p.tenants.Find(fmt.Sprintf("t%d", n-1)) != nil
	p.mu.Unlock()
	if kept != fairq.MaxIdle || oldest || !newest {
		t.Errorf("%d entries kept (oldest %v, newest %v), want %d, the newest", kept, oldest, newest, fairq.MaxIdle)
	}
	// A kept tenant and a dropped one both get their share again.
	for _, tn := range []string{"t0", fmt.Sprintf("t%d", n-1)} {
		s := mustAcquire(t, p, tn)
		done, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := p.Acquire(done, tn); !errors.Is(err, context.Canceled) {
			t.Errorf("%s got past its share of one", tn)
		}
		s.Release()
	}
	checkIdle(t, p)
}

// AcquireUntilDone waits past Config.Wait, in the same order as Acquire,
// until its slot is granted or its ctx ends; it never counts as busy.
func TestAcquireUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Slots: 1, TenantShare: 1, Wait: time.Second})
		h := mustAcquire(t, p, "x")
		ch := make(chan outcome, 1)
		go func() {
			start := time.Now()
			s, err := p.AcquireUntilDone(t.Context(), "a")
			ch <- outcome{s, err, time.Since(start)}
		}()
		advance(time.Hour)
		if !pending(ch) {
			t.Fatal("AcquireUntilDone gave up while the slot was held")
		}
		h.Release()
		o := <-ch
		if o.err != nil || o.elapsed != time.Hour {
			t.Fatalf("AcquireUntilDone = %v after %v, want granted after 1h", o.err, o.elapsed)
		}
		o.s.Release()

		h = mustAcquire(t, p, "x")
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			s, err := p.AcquireUntilDone(ctx, "a")
			ch <- outcome{s, err, 0}
		}()
		synctest.Wait()
		cancel()
		if o := <-ch; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("AcquireUntilDone after its ctx ended = %v, want context.Canceled", o.err)
		}
		h.Release()
		if st := p.Stats(); st.Busy != 0 || st.Canceled != 1 {
			t.Errorf("Stats = %+v, want Busy 0, Canceled 1", st)
		}
		checkIdle(t, p)
	})
}
