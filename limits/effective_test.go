package limits

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeSource is an OverrideSource whose answer a test sets; it counts calls.
type fakeSource struct {
	mu    sync.Mutex
	over  map[string]Overrides
	err   error
	calls atomic.Int64
	// hook, if set, runs at the start of each call (to block it).
	hook func(ctx context.Context, tenant string)
}

func (f *fakeSource) TenantOverrides(ctx context.Context, tenant string) (Overrides, bool, error) {
	f.calls.Add(1)
	if f.hook != nil {
		f.hook(ctx, tenant)
	}
	if err := ctx.Err(); err != nil {
		return Overrides{}, false, err // like a real store
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return Overrides{}, false, f.err
	}
	o, ok := f.over[tenant]
	return o, ok, nil
}

func (f *fakeSource) set(tenant string, o Overrides, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.over == nil {
		f.over = map[string]Overrides{}
	}
	if o.IsZero() {
		delete(f.over, tenant)
	} else {
		f.over[tenant] = o
	}
	f.err = err
}

// clock is a manual clock for Effective.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t0.Add(d)
}

func ptr[T any](v T) *T { return &v }

func newTestEffective(src OverrideSource) (*Effective, *clock) {
	c := &clock{t: t0}
	e := NewEffective(DefaultLimits(), src, 10*time.Second)
	e.Now = c.Now
	return e, c
}

func TestOverridesApply(t *testing.T) {
	def := DefaultLimits()
	o := Overrides{QuotaBytes: ptr[int64](1 << 30), TenantBurst: ptr(10), MaxInFlightPerCredential: ptr(4)}
	want := def
	want.QuotaBytes = 1 << 30
	want.TenantRate.Burst = 10
	want.MaxInFlightPerCredential = 4
	if diff := cmp.Diff(want, o.Apply(def)); diff != "" {
		t.Fatalf("Apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(def, Overrides{}.Apply(def)); diff != "" {
		t.Fatalf("empty overrides changed defaults:\n%s", diff)
	}
	all := Overrides{
		QuotaBytes: ptr[int64](-1), TenantRequestsPerSecond: ptr(5.0), TenantBurst: ptr(6),
		CredentialRequestsPerSecond: ptr(7.0), CredentialBurst: ptr(8), MaxInFlightPerCredential: ptr(0),
	}
	wantAll := Limits{TenantRate: Rate{5, 6}, CredentialRate: Rate{7, 8}, MaxInFlightPerCredential: 0, QuotaBytes: -1}
	if diff := cmp.Diff(wantAll, all.Apply(def)); diff != "" {
		t.Fatalf("Apply all (-want +got):\n%s", diff)
	}
}

// TestOverridesSuspend: the suspended flag of a limits record suspends the
// tenant and is shown as an override; it survives a JSON round trip (the
// bucket record and the index hold the document as JSON), and a record
// without it does not suspend.
func TestOverridesSuspend(t *testing.T) {
	def := DefaultLimits()
	if def.Suspended {
		t.Fatal("the defaults suspend every tenant")
	}
	o := Overrides{Suspended: true, QuotaBytes: ptr[int64](5)}
	want := def
	want.Suspended, want.QuotaBytes = true, 5
	if diff := cmp.Diff(want, o.Apply(def)); diff != "" {
		t.Fatalf("Apply (-want +got):\n%s", diff)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if o.IsZero() || (Overrides{Suspended: true}).IsZero() {
		t.Fatal("a suspension overrides nothing")
	}
	if got := (Source{HasOverride: true, Overrides: o}).Field(FieldSuspended); got != "override" {
		t.Errorf("Field(suspended) = %q, want override", got)
	}
	if got := (Source{}).Field(FieldSuspended); got != "default" {
		t.Errorf("Field(suspended) without a record = %q, want default", got)
	}
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"suspended":true`) {
		t.Errorf("JSON %s lacks the flag", raw)
	}
	var back Overrides
	if err := json.Unmarshal(raw, &back); err != nil || !back.Apply(def).Suspended {
		t.Errorf("round trip of %s: %+v, %v", raw, back, err)
	}
	if raw, _ := json.Marshal(Overrides{QuotaBytes: ptr[int64](5)}); strings.Contains(string(raw), "suspended") {
		t.Errorf("a record that does not suspend says suspended: %s", raw)
	}
}

func TestOverridesValidate(t *testing.T) {
	nan := 0.0
	nan = nan / nan
	for _, c := range []struct {
		name   string
		o      Overrides
		fields []string // fields the error must name; none = valid
	}{
		{name: "empty", o: Overrides{}},
		{name: "all valid", o: Overrides{QuotaBytes: ptr[int64](0), TenantRequestsPerSecond: ptr(0.0), TenantBurst: ptr(1),
			CredentialRequestsPerSecond: ptr(0.5), CredentialBurst: ptr(1), MaxInFlightPerCredential: ptr(0)}},
		{name: "unlimited quota", o: Overrides{QuotaBytes: ptr[int64](-1)}},
		{name: "quota", o: Overrides{QuotaBytes: ptr[int64](-2)}, fields: []string{FieldQuotaBytes}},
		{name: "negative rate", o: Overrides{TenantRequestsPerSecond: ptr(-1.0)}, fields: []string{FieldTenantRequestsPerSecond}},
		{name: "NaN rate", o: Overrides{CredentialRequestsPerSecond: &nan}, fields: []string{FieldCredentialRequestsPerSecond}},
		{name: "rates at the bounds", o: Overrides{TenantRequestsPerSecond: ptr(MinRequestsPerSecond), CredentialRequestsPerSecond: ptr(MaxRequestsPerSecond)}},
		{name: "tiny rate", o: Overrides{TenantRequestsPerSecond: ptr(1e-9)}, fields: []string{FieldTenantRequestsPerSecond}},
		{name: "denormal rate", o: Overrides{CredentialRequestsPerSecond: ptr(1e-300)}, fields: []string{FieldCredentialRequestsPerSecond}},
		{name: "huge rate", o: Overrides{CredentialRequestsPerSecond: ptr(2e9)}, fields: []string{FieldCredentialRequestsPerSecond}},
		{name: "infinite rate", o: Overrides{TenantRequestsPerSecond: ptr(math.Inf(1))}, fields: []string{FieldTenantRequestsPerSecond}},
		{name: "zero burst", o: Overrides{TenantBurst: ptr(0)}, fields: []string{FieldTenantBurst}},
		{name: "negative in flight", o: Overrides{MaxInFlightPerCredential: ptr(-1)}, fields: []string{FieldMaxInFlightPerCredential}},
		{name: "several", o: Overrides{CredentialBurst: ptr(-3), QuotaBytes: ptr[int64](-9)},
			fields: []string{FieldCredentialBurst, FieldQuotaBytes}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.o.Validate()
			if len(c.fields) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOverrides) {
				t.Fatalf("Validate() = %v, want ErrInvalidOverrides", err)
			}
			for _, f := range c.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
		})
	}
}

func TestEffectiveOverrideApplies(t *testing.T) {
	src := &fakeSource{}
	src.set("big", Overrides{QuotaBytes: ptr[int64](100), CredentialBurst: ptr(7)}, nil)
	e, _ := newTestEffective(src)
	ctx := t.Context()

	l, s, err := e.For(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultLimits()
	want.QuotaBytes = 100
	want.CredentialRate.Burst = 7
	if diff := cmp.Diff(want, l); diff != "" {
		t.Fatalf("limits (-want +got):\n%s", diff)
	}
	if !s.HasOverride || s.Field(FieldQuotaBytes) != "override" || s.Field(FieldTenantBurst) != "default" || !s.FetchedAt.Equal(t0) {
		t.Fatalf("source %+v", s)
	}

	l, s, err = e.For(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultLimits(), l); diff != "" || s.HasOverride {
		t.Fatalf("tenant without overrides: %+v %+v", l, s)
	}
}

// TestEffectiveTimeline walks one tenant through the cache's life on a
// manual clock: fresh, refresh window, source failure within and past TTL.
func TestEffectiveTimeline(t *testing.T) {
	src := &fakeSource{}
	e, clk := newTestEffective(src)
	quota := func(q int64) Overrides { return Overrides{QuotaBytes: ptr(q)} }
	boom := errors.New("index unavailable")
	type step struct {
		at        time.Duration
		set       *Overrides // change the source's value first
		fail      error      // and its error
		wantQuota int64
		wantErr   error
		wantCalls int64
	}
	steps := []step{
		{at: 0, set: ptr(quota(1)), wantQuota: 1, wantCalls: 1},
		{at: 4 * time.Second, set: ptr(quota(2)), wantQuota: 1, wantCalls: 1},              // younger than TTL/2: cached
		{at: 6 * time.Second, wantQuota: 2, wantCalls: 2},                                  // refresh window: re-read (cached at 6s)
		{at: 12 * time.Second, set: ptr(quota(3)), fail: boom, wantQuota: 2, wantCalls: 3}, // refresh fails within TTL: cache served
		{at: 15*time.Second + 999*time.Millisecond, wantQuota: 2, wantCalls: 4},            // still within TTL
		{at: 16 * time.Second, wantErr: ErrLimitsUnavailable, wantCalls: 5},                // TTL reached: fail closed
		{at: 17 * time.Second, wantErr: boom, wantCalls: 6},                                // the cause is wrapped too
		{at: 18 * time.Second, set: ptr(quota(3)), wantQuota: 3, wantCalls: 7},             // source back
		{at: 19 * time.Second, wantQuota: 3, wantCalls: 7},
	}
	for i, s := range steps {
		clk.Set(s.at)
		if s.set != nil {
			src.set("t", *s.set, s.fail)
		}
		l, _, err := e.For(t.Context(), "t")
		switch {
		case s.wantErr != nil:
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("step %d at %v: err %v, want %v", i, s.at, err, s.wantErr)
			}
		case err != nil:
			t.Fatalf("step %d at %v: %v", i, s.at, err)
		case l.QuotaBytes != s.wantQuota:
			t.Fatalf("step %d at %v: quota %d, want %d", i, s.at, l.QuotaBytes, s.wantQuota)
		}
		if got := src.calls.Load(); got != s.wantCalls {
			t.Fatalf("step %d at %v: %d source calls, want %d", i, s.at, got, s.wantCalls)
		}
	}
}

func TestEffectiveInvalidate(t *testing.T) {
	src := &fakeSource{}
	src.set("t", Overrides{TenantBurst: ptr(5)}, nil)
	e, _ := newTestEffective(src)
	ctx := t.Context()
	if l, _, _ := e.For(ctx, "t"); l.TenantRate.Burst != 5 {
		t.Fatalf("burst %d", l.TenantRate.Burst)
	}
	src.set("t", Overrides{TenantBurst: ptr(9)}, nil) // an admin change on this node
	if l, _, _ := e.For(ctx, "t"); l.TenantRate.Burst != 5 {
		t.Fatal("changed before Invalidate or TTL")
	}
	e.Invalidate("t")
	if l, _, _ := e.For(ctx, "t"); l.TenantRate.Burst != 9 {
		t.Fatalf("after Invalidate burst %d, want 9 at once", l.TenantRate.Burst)
	}
	src.set("t", Overrides{}, nil) // overrides removed
	e.Invalidate("t")
	if l, s, _ := e.For(ctx, "t"); s.HasOverride || l != DefaultLimits() {
		t.Fatalf("after removing overrides: %+v %+v", l, s)
	}
}

// TestEffectiveInvalidateDuringRead: a read that began before an
// Invalidate may return the old value to its own callers but must not be
// cached.
func TestEffectiveInvalidateDuringRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		release := make(chan struct{})
		burst := 5
		src := sourceFunc(func(context.Context, string) (Overrides, bool, error) {
			b := burst // the value as it was when the read began
			if calls.Add(1) == 1 {
				<-release
			}
			return Overrides{TenantBurst: &b}, true, nil
		})
		e := NewEffective(DefaultLimits(), src, 10*time.Second)
		done := make(chan Limits)
		go func() {
			l, _, _ := e.For(t.Context(), "t")
			done <- l
		}()
		synctest.Wait() // the read is in the source, holding burst 5
		burst = 9
		e.Invalidate("t")
		close(release)
		if l := <-done; l.TenantRate.Burst != 5 {
			t.Fatalf("the read that began before Invalidate returned burst %d, want 5", l.TenantRate.Burst)
		}
		if l, _, _ := e.For(t.Context(), "t"); l.TenantRate.Burst != 9 {
			t.Fatalf("burst %d after Invalidate, want 9 (the older read was cached)", l.TenantRate.Burst)
		}
		if got := calls.Load(); got != 2 {
			t.Fatalf("%d source calls, want 2", got)
		}
	})
}

type sourceFunc func(ctx context.Context, tenant string) (Overrides, bool, error)

func (f sourceFunc) TenantOverrides(ctx context.Context, tenant string) (Overrides, bool, error) {
	return f(ctx, tenant)
}

func TestEffectiveNegativeCache(t *testing.T) {
	src := &fakeSource{}
	e, clk := newTestEffective(src)
	for i := range 100 {
		clk.Set(time.Duration(i) * 10 * time.Millisecond)
		if _, s, err := e.For(t.Context(), "none"); err != nil || s.HasOverride {
			t.Fatalf("call %d: %+v %v", i, s, err)
		}
	}
	if got := src.calls.Load(); got != 1 {
		t.Fatalf("%d source calls for a tenant without overrides, want 1", got)
	}
}

// TestEffectiveSingleflight: 1000 concurrent misses make one source call.
func TestEffectiveSingleflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		src.set("t", Overrides{QuotaBytes: ptr[int64](42)}, nil)
		release := make(chan struct{})
		src.hook = func(context.Context, string) { <-release }
		e := NewEffective(DefaultLimits(), src, 10*time.Second)
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range 1000 {
			wg.Go(func() {
				l, _, err := e.For(t.Context(), "t")
				if err != nil || l.QuotaBytes != 42 {
					bad.Add(1)
				}
			})
		}
		synctest.Wait() // all 1000 are waiting on the one read
		close(release)
		wg.Wait()
		if got := src.calls.Load(); got != 1 {
			t.Fatalf("%d source calls for 1000 concurrent misses, want 1", got)
		}
		if bad.Load() != 0 {
			t.Fatalf("%d callers got a wrong answer", bad.Load())
		}
	})
}

// TestEffectiveCallerGivesUp: a waiter whose context ends returns at once;
// the read goes on for the others.
func TestEffectiveCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		release := make(chan struct{})
		src.hook = func(ctx context.Context, _ string) {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		e := NewEffective(DefaultLimits(), src, 10*time.Second)

		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, _, err := e.For(ctx, "t") // leads the read
			errc <- err
		}()
		synctest.Wait()
		other := make(chan error, 1)
		go func() {
			_, _, err := e.For(t.Context(), "t") // joins it
			other <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled caller: %v", err)
		}
		close(release)
		if err := <-other; err != nil {
			t.Fatalf("other caller: %v (the first caller's cancellation leaked into the read)", err)
		}
		if got := src.calls.Load(); got != 1 {
			t.Fatalf("%d source calls, want 1", got)
		}
	})
}

// TestEffectiveFetchTimeout: a hung source fails closed after FetchTimeout.
func TestEffectiveFetchTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		src.hook = func(ctx context.Context, _ string) { <-ctx.Done() }
		e := NewEffective(DefaultLimits(), src, 10*time.Second)
		e.FetchTimeout = time.Second
		start := time.Now()
		_, _, err := e.For(t.Context(), "t")
		if !errors.Is(err, ErrLimitsUnavailable) {
			t.Fatalf("err %v, want ErrLimitsUnavailable", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("waited %v, want the 1s FetchTimeout", waited)
		}
	})
}

func TestEffectiveInvalidOverridesFailClosed(t *testing.T) {
	src := &fakeSource{}
	src.set("t", Overrides{TenantBurst: ptr(0)}, nil)
	e, _ := newTestEffective(src)
	_, _, err := e.For(t.Context(), "t")
	if !errors.Is(err, ErrLimitsUnavailable) || !errors.Is(err, ErrInvalidOverrides) {
		t.Fatalf("err %v, want ErrLimitsUnavailable wrapping ErrInvalidOverrides", err)
	}
}

func TestEffectiveNoSource(t *testing.T) {
	e := NewEffective(DefaultLimits(), nil, 0)
	if _, _, err := e.For(t.Context(), "t"); !errors.Is(err, ErrLimitsUnavailable) {
		t.Fatalf("err %v, want ErrLimitsUnavailable", err)
	}
}

func TestEffectiveBounded(t *testing.T) {
	src := &fakeSource{}
	e, clk := newTestEffective(src)
	e.MaxEntries = 3
	for i, tenant := range []string{"a", "b", "c", "d", "e"} {
		clk.Set(time.Duration(i) * time.Millisecond)
		if _, _, err := e.For(t.Context(), tenant); err != nil {
			t.Fatal(err)
		}
	}
	st := e.Stats()
	if st.Entries != 3 || st.Evictions != 2 || st.Fetches != 5 {
		t.Fatalf("stats %+v, want 3 entries, 2 evictions, 5 fetches", st)
	}
	// The oldest were evicted: "a" is read again, "e" is not.
	e.For(t.Context(), "e")
	if got := src.calls.Load(); got != 5 {
		t.Fatalf("newest tenant re-read: %d calls", got)
	}
	e.For(t.Context(), "a")
	if got := src.calls.Load(); got != 6 {
		t.Fatalf("evicted tenant not re-read: %d calls", got)
	}
}
