package budget

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"openxet/fairq"
)

// Tests that wait run inside synctest bubbles: time there is virtual, advances
// only when every goroutine of the bubble is blocked, and so elapsed times are
// exact.

func key(cred, tenant string) Key { return Key{Credential: cred, Tenant: tenant} }

// hundred is a budget of 100 bytes with the default shares: a credential may
// hold 25 bytes, a tenant 50.
func hundred(wait time.Duration) *Budget {
	return New(Config{TotalBytes: 100, CredentialShare: 0.25, TenantShare: 0.5, Wait: wait})
}

type outcome struct {
	r       Reservation
	err     error
	elapsed time.Duration // from the call to the return of Reserve
}

// reserveAsync calls Reserve on a new goroutine; the outcome arrives on the channel.
func reserveAsync(ctx context.Context, b *Budget, k Key, n int64) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		start := time.Now()
		r, err := b.Reserve(ctx, k, n)
		ch <- outcome{r: r, err: err, elapsed: time.Since(start)}
	}()
	return ch
}

// bubble runs f as the subtest name inside a synctest bubble.
func bubble(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// pending reports whether ch has no outcome yet, once the bubble is idle.
func pending(ch <-chan outcome) bool {
	synctest.Wait()
	return len(ch) == 0
}

// mustReserve reserves n bytes, failing the test unless it is granted at once.
// It passes a ctx that is already done: Reserve ignores ctx for a reservation
// that fits and returns ctx.Err() for one that would wait.
func mustReserve(t *testing.T, b *Budget, k Key, n int64) Reservation {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r, err := b.Reserve(ctx, k, n)
	if err != nil {
		t.Fatalf("Reserve(%v, %d) = %v, want granted at once", k, n, err)
	}
	return r
}

// advance lets virtual time pass in the bubble.
func advance(d time.Duration) { <-time.After(d) }

// checkInvariants checks the bookkeeping of b against itself.
func checkInvariants(t *testing.T, b *Budget) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var credSum, tenantSum int64
	for s := range b.creds.All() {
		if s.V.held < 0 || s.V.held > b.credCap {
			t.Errorf("credential %q holds %d, cap %d", s.Key(), s.V.held, b.credCap)
		}
		if (s.V.held == 0 && s.V.waiters == 0) != s.Idle() {
			t.Errorf("credential %q holds %d with %d waiters, idle %v", s.Key(), s.V.held, s.V.waiters, s.Idle())
		}
		credSum += s.V.held
	}
	for s := range b.tenants.All() {
		if s.V.held < 0 || s.V.held > b.tenantCapOf(s.Key()) {
			t.Errorf("tenant %q holds %d, cap %d", s.Key(), s.V.held, b.tenantCapOf(s.Key()))
		}
		if (s.V.held == 0 && s.V.waiters == 0) != s.Idle() {
			t.Errorf("tenant %q holds %d with %d waiters, idle %v", s.Key(), s.V.held, s.V.waiters, s.Idle())
		}
		tenantSum += s.V.held
	}
	checkTable(t, "credential", &b.creds)
	checkTable(t, "tenant", &b.tenants)
	if credSum != b.reserved || tenantSum != b.reserved {
		t.Errorf("reserved %d, credentials hold %d, tenants hold %d", b.reserved, credSum, tenantSum)
	}
	if b.pooledBytes < 0 || b.reserved+b.pooledBytes > b.total {
		t.Errorf("reserved %d + pooled %d, budget %d", b.reserved, b.pooledBytes, b.total)
	}
	if b.reserved < 0 || b.reserved > b.total || b.highWater > b.total {
		t.Errorf("reserved %d, high water %d, budget %d", b.reserved, b.highWater, b.total)
	}
	waiters := map[*share]int{}
	n := 0
	for w := b.line.Front(); w != nil; w = w.Next() {
		n++
		waiters[w.V.cred]++
		waiters[w.V.tenant]++
	}
	if n != b.line.Len() {
		t.Errorf("queue has %d waiters, count says %d", n, b.line.Len())
	}
	for _, tab := range []*fairq.Table[keyShare]{&b.creds, &b.tenants} {
		for s := range tab.All() {
			if waiters[s] != s.V.waiters {
				t.Errorf("%q has %d queued waiters, count says %d", s.Key(), waiters[s], s.V.waiters)
			}
		}
	}
}

// checkTable checks that every entry of tab is found under its key and
// that its idle ones are counted and bounded.
func checkTable(t *testing.T, name string, tab *fairq.Table[keyShare]) {
	t.Helper()
	idle := 0
	for s := range tab.All() {
		if tab.Find(s.Key()) != s {
			t.Errorf("%s entry %q is not found under its key", name, s.Key())
		}
		if s.Idle() {
			idle++
		}
	}
	if idle != tab.Len()-tab.Active() || idle > fairq.MaxIdle {
		t.Errorf("%s entries: %d idle, %d of %d counted idle, at most %d", name, idle, tab.Len()-tab.Active(), tab.Len(), fairq.MaxIdle)
	}
}

// checkDrained checks that nothing is held or queued and the maps are empty.
func checkDrained(t *testing.T, b *Budget) {
	t.Helper()
	checkInvariants(t, b)
	s := b.Stats()
	if s.ReservedBytes != 0 || s.Reservations != 0 || s.Waiting != 0 || s.Credentials != 0 || s.Tenants != 0 {
		t.Errorf("after all releases: %+v, want nothing held, queued or tracked", s)
	}
}

// tracker holds what the test itself believes is held, per key, to check
// the caps independently of the budget's bookkeeping.
type tracker struct {
	mu                 sync.Mutex
	cred, tenant       map[string]int64
	total              int64
	maxCred, maxTenant map[string]int64
	maxTotal           int64
}

func newTracker() *tracker {
	return &tracker{cred: map[string]int64{}, tenant: map[string]int64{},
		maxCred: map[string]int64{}, maxTenant: map[string]int64{}}
}

func (tr *tracker) add(k Key, n int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.cred[k.Credential] += n
	tr.tenant[k.Tenant] += n
	tr.total += n
	tr.maxCred[k.Credential] = max(tr.maxCred[k.Credential], tr.cred[k.Credential])
	tr.maxTenant[k.Tenant] = max(tr.maxTenant[k.Tenant], tr.tenant[k.Tenant])
	tr.maxTotal = max(tr.maxTotal, tr.total)
}

// holdFor reserves n bytes for k, records them while held for d, and releases.
// It returns Reserve's error.
func holdFor(ctx context.Context, b *Budget, tr *tracker, k Key, n int64, d time.Duration) error {
	r, err := b.Reserve(ctx, k, n)
	if err != nil {
		return err
	}
	defer r.Release()
	tr.add(k, n)
	advance(d)
	tr.add(k, -n)
	return nil
}

func TestCredentialShareCapsOneReader(t *testing.T) {
	tests := []struct {
		name        string
		c           Config
		readers     int
		n           int64
		hold        time.Duration
		wantElapsed time.Duration // for all readers to finish
	}{
		// Only one 20-byte reservation fits a 25-byte share at a time.
		{name: "one at a time", c: Config{TotalBytes: 100, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Minute},
			readers: 10, n: 20, hold: time.Second, wantElapsed: 10 * time.Second},
		// Two 12-byte reservations fit at a time.
		{name: "two at a time", c: Config{TotalBytes: 100, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Minute},
			readers: 10, n: 12, hold: time.Second, wantElapsed: 5 * time.Second},
		{name: "whole share", c: Config{TotalBytes: 1000, CredentialShare: 0.1, TenantShare: 1, Wait: time.Minute},
			readers: 20, n: 100, hold: time.Second, wantElapsed: 20 * time.Second},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := New(tt.c)
			credCap := b.Stats().CredentialBytes
			tr := newTracker()
			reader := key("reader", "acme")
			start := time.Now()
			var wg sync.WaitGroup
			defer wg.Wait() // also when the test fails early
			for range tt.readers {
				wg.Go(func() {
					if err := holdFor(t.Context(), b, tr, reader, tt.n, tt.hold); err != nil {
						t.Errorf("%s: reader: %v", tt.name, err)
					}
				})
			}
			synctest.Wait()
			if s := b.Stats(); s.Waiting == 0 {
				t.Fatalf("%s: no reader waits; the test does not exercise the share", tt.name)
			}
			// Another credential of the same tenant is served at once meanwhile.
			other := mustReserve(t, b, key("other", "acme"), tt.n)
			if cred, _ := b.Held(reader); cred > credCap {
				t.Errorf("%s: reader holds %d, share %d", tt.name, cred, credCap)
			}
			checkInvariants(t, b)
			other.Release()
			wg.Wait()
			if got := time.Since(start); got != tt.wantElapsed {
				t.Errorf("%s: readers took %v, want %v", tt.name, got, tt.wantElapsed)
			}
			if got := tr.maxCred["reader"]; got > credCap {
				t.Errorf("%s: reader held %d at most, share %d", tt.name, got, credCap)
			}
			checkDrained(t, b)
		})
	}
}

func TestTenantShareCapsManyCredentials(t *testing.T) {
	tests := []struct {
		name  string
		c     Config
		creds int
		each  int // reservations per credential
		n     int64
	}{
		{name: "credentials under their own share", c: Config{TotalBytes: 100, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Minute},
			creds: 8, each: 3, n: 20},
		{name: "tenant share below credential share", c: Config{TotalBytes: 100, CredentialShare: 1, TenantShare: 0.3, Wait: time.Minute},
			creds: 5, each: 4, n: 10},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := New(tt.c)
			tenantCap := b.Stats().TenantBytes
			tr := newTracker()
			var wg sync.WaitGroup
			defer wg.Wait() // also when the test fails early
			for i := range tt.creds {
				for range tt.each {
					wg.Go(func() {
						k := key(fmt.Sprintf("cred%d", i), "flood")
						if err := holdFor(t.Context(), b, tr, k, tt.n, time.Second); err != nil {
							t.Errorf("%s: %v: %v", tt.name, k, err)
						}
					})
				}
			}
			synctest.Wait()
			if s := b.Stats(); s.Waiting == 0 {
				t.Fatalf("%s: nobody waits; the test does not exercise the share", tt.name)
			}
			// Another tenant is served at once meanwhile.
			other := mustReserve(t, b, key("quiet", "other"), tt.n)
			if _, held := b.Held(key("", "flood")); held > tenantCap {
				t.Errorf("%s: tenant holds %d, share %d", tt.name, held, tenantCap)
			}
			checkInvariants(t, b)
			other.Release()
			wg.Wait()
			if got := tr.maxTenant["flood"]; got > tenantCap || got < tenantCap-tt.n+1 {
				t.Errorf("%s: tenant held %d at most, want at most its share %d and close to it", tt.name, got, tenantCap)
			}
			checkDrained(t, b)
		})
	}
}

func TestFloodDoesNotBlockOtherTenant(t *testing.T) {
	tests := []struct {
		name    string
		flooder func(i int) Key
	}{
		{name: "many credentials of one tenant", flooder: func(i int) Key { return key(fmt.Sprintf("a%d", i%7), "A") }},
		{name: "one credential", flooder: func(int) Key { return key("a", "A") }},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := New(Config{TotalBytes: 1000, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Minute})
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel() // also when the test fails early
			for i := range 200 {
				wg.Go(func() {
					r, err := b.Reserve(ctx, tt.flooder(i), 200)
					if err == nil {
						<-ctx.Done()
						r.Release()
					}
				})
			}
			synctest.Wait()
			if s := b.Stats(); s.Waiting < 190 {
				t.Fatalf("%s: %d flood waiters, want most of 200", tt.name, s.Waiting)
			}
			// Tenant B arrives after the whole flood and is admitted at once.
			r := mustReserve(t, b, key("b", "B"), 10)
			r.Release()
			r = mustReserve(t, b, key("b", "B"), 250)
			r.Release()
			cancel()
			wg.Wait()
			checkDrained(t, b)
		})
	}
}

func TestBudgetInvariant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 1 << 20
		b := New(Config{TotalBytes: total, CredentialShare: 0.25, TenantShare: 0.5, Wait: 5 * time.Second})
		credCap, tenantCap := b.Stats().CredentialBytes, b.Stats().TenantBytes
		tr := newTracker()
		var mu sync.Mutex
		results := map[string]int{}
		var wg sync.WaitGroup
		for i := range 1000 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(1, uint64(i)))
				c := rng.IntN(12)
				k := key(fmt.Sprintf("cred%d", c), fmt.Sprintf("tenant%d", c%4))
				n := 1 + rng.Int64N(credCap/2)
				if rng.IntN(10) == 0 {
					n = credCap // the largest a credential may hold
				}
				advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
				ctx := t.Context()
				if rng.IntN(10) == 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
					defer cancel()
				}
				err := holdFor(ctx, b, tr, k, n, time.Duration(rng.IntN(200))*time.Millisecond)
				var outcome string
				var busy *BusyError
				switch {
				case err == nil:
					outcome = "granted"
				case errors.As(err, &busy):
					outcome = "busy " + busy.Share
				case errors.Is(err, context.DeadlineExceeded):
					outcome = "cancelled"
				default:
					t.Errorf("Reserve(%v, %d) = %v", k, n, err)
				}
				mu.Lock()
				results[outcome]++
				mu.Unlock()
				if i%50 == 0 {
					checkInvariants(t, b)
				}
			})
		}
		wg.Wait()
		t.Logf("outcomes: %v", results)
		if s := b.Stats(); results["granted"] < 500 || s.Waited < 100 {
			t.Errorf("%d of 1000 granted, %d waited; want most granted and many waits", results["granted"], s.Waited)
		}
		for c, got := range tr.maxCred {
			if got > credCap {
				t.Errorf("credential %s held %d, share %d", c, got, credCap)
			}
		}
		for tn, got := range tr.maxTenant {
			if got > tenantCap {
				t.Errorf("tenant %s held %d, share %d", tn, got, tenantCap)
			}
		}
		s := b.Stats()
		if tr.maxTotal > total || s.HighWaterBytes > total {
			t.Errorf("held %d (high water %d), budget %d", tr.maxTotal, s.HighWaterBytes, total)
		}
		if s.HighWaterBytes < tr.maxTotal {
			t.Errorf("high water %d, but %d was held at once", s.HighWaterBytes, tr.maxTotal)
		}
		busy := int(s.Busy.Budget + s.Busy.Credential + s.Busy.Tenant)
		if int(s.Granted) != results["granted"] || busy != 1000-results["granted"]-results["cancelled"] ||
			int(s.Cancelled) != results["cancelled"] {
			t.Errorf("stats %+v disagree with outcomes %v", s, results)
		}
		checkDrained(t, b)
	})
}

func TestWaitThen503(t *testing.T) {
	const wait = 10 * time.Second
	tests := []struct {
		name        string
		holders     []Key // each holds 25 bytes
		waiter      Key
		n           int64
		releaseAt   time.Duration // 0: never release
		wantShare   string        // "" means granted
		wantElapsed time.Duration
	}{
		{name: "budget exhausted", holders: []Key{key("a", "A"), key("b", "A"), key("c", "B"), key("d", "B")},
			waiter: key("e", "C"), n: 1, wantShare: ShareBudget, wantElapsed: wait},
		{name: "credential share exhausted", holders: []Key{key("a", "A")},
			waiter: key("a", "A"), n: 1, wantShare: ShareCredential, wantElapsed: wait},
		{name: "tenant share exhausted", holders: []Key{key("a", "A"), key("b", "A")},
			waiter: key("c", "A"), n: 1, wantShare: ShareTenant, wantElapsed: wait},
		{name: "release during the wait admits", holders: []Key{key("a", "A"), key("b", "A"), key("c", "B"), key("d", "B")},
			waiter: key("e", "C"), n: 25, releaseAt: 3 * time.Second, wantElapsed: 3 * time.Second},
		{name: "release at the last moment admits", holders: []Key{key("a", "A")},
			waiter: key("a", "A"), n: 25, releaseAt: wait - time.Nanosecond, wantElapsed: wait - time.Nanosecond},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := hundred(wait)
			var held []Reservation
			for _, k := range tt.holders {
				held = append(held, mustReserve(t, b, k, 25))
			}
			if tt.releaseAt > 0 {
				go func() {
					advance(tt.releaseAt)
					held[0].Release()
				}()
			}
			o := <-reserveAsync(t.Context(), b, tt.waiter, tt.n)
			if o.elapsed != tt.wantElapsed {
				t.Errorf("%s: Reserve returned after %v, want %v", tt.name, o.elapsed, tt.wantElapsed)
			}
			if tt.wantShare == "" {
				if o.err != nil {
					t.Fatalf("%s: Reserve = %v, want granted", tt.name, o.err)
				}
				o.r.Release()
			} else {
				var busy *BusyError
				if !errors.As(o.err, &busy) || !errors.Is(o.err, ErrBusy) {
					t.Fatalf("%s: Reserve = %v, want a *BusyError", tt.name, o.err)
				}
				if busy.Share != tt.wantShare || busy.RetryAfter < time.Second || busy.N != tt.n || busy.Waited != wait {
					t.Errorf("%s: %+v, want share %s, RetryAfter >= 1s, N %d, Waited %v", tt.name, busy, tt.wantShare, tt.n, wait)
				}
				s := b.Stats()
				if got := s.Busy.Budget + s.Busy.Credential + s.Busy.Tenant; got != 1 {
					t.Errorf("%s: Stats.Busy = %+v, want one refusal", tt.name, s.Busy)
				}
			}
			for i := range held {
				held[i].Release()
			}
			checkDrained(t, b)
		})
	}
}

func TestOversizeRefusedAtOnce(t *testing.T) {
	tests := []struct {
		name      string
		c         Config
		busy      bool // fill the budget and queue a waiter first
		n         int64
		wantLimit int64
		wantShare string
	}{
		{name: "over the credential share", c: Config{TotalBytes: 100}, n: 26, wantLimit: 25, wantShare: ShareCredential},
		{name: "far over the budget", c: Config{TotalBytes: 100}, n: 1 << 40, wantLimit: 25, wantShare: ShareCredential},
		{name: "over the tenant share", c: Config{TotalBytes: 100, CredentialShare: 1, TenantShare: 0.3}, n: 31, wantLimit: 30, wantShare: ShareTenant},
		{name: "over the budget", c: Config{TotalBytes: 100, CredentialShare: 1, TenantShare: 1}, n: 101, wantLimit: 100, wantShare: ShareCredential},
		{name: "while the budget is busy", c: Config{TotalBytes: 100}, busy: true, n: 26, wantLimit: 25, wantShare: ShareCredential},
	}
	for _, tt := range tests {
		bubble(t, tt.name, func(t *testing.T) {
			b := New(tt.c)
			var held []Reservation
			var waiter <-chan outcome
			if tt.busy {
				for _, c := range []string{"a", "b", "c", "d"} {
					held = append(held, mustReserve(t, b, key(c, c), 25))
				}
				waiter = reserveAsync(t.Context(), b, key("e", "e"), 1)
				synctest.Wait()
			}
			start := time.Now()
			_, err := b.Reserve(t.Context(), key("e", "e"), tt.n)
			if d := time.Since(start); d != 0 {
				t.Errorf("%s: refused after %v, want at once", tt.name, d)
			}
			var tooLarge *TooLargeError
			if !errors.As(err, &tooLarge) || !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%s: Reserve(%d) = %v, want a *TooLargeError", tt.name, tt.n, err)
			}
			want := TooLargeError{N: tt.n, Limit: tt.wantLimit, Share: tt.wantShare}
			if *tooLarge != want {
				t.Errorf("%s: got %+v, want %+v", tt.name, *tooLarge, want)
			}
			if s := b.Stats(); s.TooLarge.Budget+s.TooLarge.Credential+s.TooLarge.Tenant != 1 {
				t.Errorf("%s: Stats.TooLarge = %+v, want one refusal", tt.name, s.TooLarge)
			}
			for i := range held {
				held[i].Release()
			}
			if waiter != nil {
				o := <-waiter
				o.r.Release()
			}
			checkDrained(t, b)
		})
	}
}
