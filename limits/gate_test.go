package limits

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func testLimits() Limits {
	return Limits{
		CredentialRate:           Rate{PerSecond: 1, Burst: 3},
		TenantRate:               Rate{PerSecond: 1, Burst: 5},
		MaxInFlightPerCredential: 2,
		QuotaBytes:               -1,
	}
}

func limitOf(err error) string {
	var re *RateError
	if errors.As(err, &re) {
		return re.Limit
	}
	return ""
}

func TestGateRefusalSpendsNothingElse(t *testing.T) {
	l := testLimits()
	t.Run("credential refusal leaves the tenant", func(t *testing.T) {
		g := NewGate(GateConfig{})
		for range 3 {
			a, err := g.Admit("c1", "t", l, t0)
			if err != nil {
				t.Fatal(err)
			}
			g.Done(a)
		}
		before := g.Tenants.Peek("t", l.TenantRate, t0)
		_, err := g.Admit("c1", "t", l, t0)
		if limitOf(err) != LimitCredential {
			t.Fatalf("err %v, want the credential limit", err)
		}
		if after := g.Tenants.Peek("t", l.TenantRate, t0); after != before {
			t.Fatalf("tenant spent by a credential refusal: %+v -> %+v", before, after)
		}
	})
	t.Run("tenant refusal refunds the credential", func(t *testing.T) {
		g := NewGate(GateConfig{})
		// Five credentials use up the tenant's burst of 5.
		for _, c := range []string{"a", "b", "c", "d", "e"} {
			a, err := g.Admit(c, "t", l, t0)
			if err != nil {
				t.Fatal(err)
			}
			g.Done(a)
		}
		before := g.Credentials.Peek("f", l.CredentialRate, t0)
		_, err := g.Admit("f", "t", l, t0)
		if limitOf(err) != LimitTenant {
			t.Fatalf("err %v, want the tenant limit", err)
		}
		if after := g.Credentials.Peek("f", l.CredentialRate, t0); after != before {
			t.Fatalf("credential spent by a tenant refusal: %+v -> %+v", before, after)
		}
		if g.InFlight.Count("f") != 0 || tenantCount(g, "t") != 0 {
			t.Fatalf("in progress counted for a refused request: credential %d, tenant %d", g.InFlight.Count("f"), tenantCount(g, "t"))
		}
	})
	t.Run("in-flight refusal refunds both", func(t *testing.T) {
		g := NewGate(GateConfig{})
		var held [2]Admission
		for i := range held {
			a, err := g.Admit("c", "t", l, t0) // held: no Done yet
			if err != nil {
				t.Fatal(err)
			}
			if n := g.InFlight.Count("c"); n != i+1 || a.TenantInFlight != i+1 {
				t.Fatalf("admission %d: %d in flight, %d of its tenant", i+1, n, a.TenantInFlight)
			}
			held[i] = a
		}
		if other, err := g.Admit("d", "t", l, t0); err != nil || g.InFlight.Count("d") != 1 || other.TenantInFlight != 3 {
			t.Fatalf("another credential of the tenant: %d in flight, %d of the tenant, %v; want 1, its own count, and 3", g.InFlight.Count("d"), other.TenantInFlight, err)
		} else {
			g.Done(other)
		}
		cb := g.Credentials.Peek("c", l.CredentialRate, t0)
		tb := g.Tenants.Peek("t", l.TenantRate, t0)
		refused, err := g.Admit("c", "t", l, t0)
		var re *RateError
		if !errors.As(err, &re) || re.Limit != LimitInFlight || RetryAfterSeconds(re.Decision.RetryAfter) != 1 || re.Decision.Limit.Burst != 2 {
			t.Fatalf("err %#v, want the in-flight limit with Retry-After 1", err)
		}
		if ca, ta := g.Credentials.Peek("c", l.CredentialRate, t0), g.Tenants.Peek("t", l.TenantRate, t0); ca != cb || ta != tb {
			t.Fatalf("rates spent by an in-flight refusal: credential %+v -> %+v, tenant %+v -> %+v", cb, ca, tb, ta)
		}
		g.Done(refused) // a refused admission counted nothing
		if n, nt := g.InFlight.Count("c"), tenantCount(g, "t"); n != 2 || nt != 2 {
			t.Fatalf("Done of a refused admission: %d in flight, %d of the tenant; want 2 and 2", n, nt)
		}
		g.Done(held[0])
		a, err := g.Admit("c", "t", l, t0)
		if n := g.InFlight.Count("c"); err != nil || n != 2 {
			t.Fatalf("after Done: %d in flight, %v; want 2", n, err)
		}
		g.Done(a)
		g.Done(held[1])
		if g.InFlight.Len() != 0 || g.tenants.total() != 0 {
			t.Fatalf("in-flight entries left: %d credentials, %d tenant requests", g.InFlight.Len(), g.tenants.total())
		}
		for _, name := range LimitNames() {
			want := uint64(0)
			if name == LimitInFlight {
				want = 1
			}
			if got := g.Refusals.Load(name); got != want {
				t.Errorf("refusals[%s] = %d, want %d", name, got, want)
			}
		}
	})
}

func TestGateAdmission(t *testing.T) {
	g := NewGate(GateConfig{})
	l := testLimits()
	a, err := g.Admit("c", "t", l, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Done(a)
	if a.Credential.Remaining != 2 || a.Tenant.Remaining != 4 {
		t.Fatalf("admission %+v", a)
	}
}

func TestGateAuth(t *testing.T) {
	g := NewGate(GateConfig{AuthFailuresPerMinute: 2})
	for range 2 {
		at, err := g.BeginAuth("ip", t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.AuthFailed(at, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err := g.BeginAuth("ip", t0)
	var re *RateError
	if !errors.As(err, &re) || re.Limit != LimitAuthFailures || re.Decision.RetryAfter != 30*time.Second {
		t.Fatalf("err %v, want the auth-failure limit for 30s", err)
	}
	if g.Refusals.Load(LimitAuthFailures) != 1 {
		t.Fatal("auth refusal not counted")
	}
	at, err := g.BeginAuth("other", t0)
	if err != nil {
		t.Fatalf("other IP: %v", err)
	}
	at.Refund()
}

// TestImports: limits knows nothing of HTTP, databases, blob storage or
// metrics (docs/design.md §1).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "database/sql", "github.com/labstack/echo", "github.com/prometheus/", "gocloud.dev", "golang.org/x/time/rate", "openxet/"} {
			if strings.HasPrefix(dep, banned) && dep != "openxet/limits" {
				t.Errorf("limits depends on %s", dep)
			}
		}
	}
}

// TestGateInFlightKeyedLikeItsParts: Admit hashes the credential once for
// its rate and its in-flight count; the count must be the one the
// exported InFlight reports for that credential, also for a Gate put
// together from parts with seeds of their own.
func TestGateInFlightKeyedLikeItsParts(t *testing.T) {
	l := testLimits()
	for name, g := range map[string]*Gate{
		"NewGate": NewGate(GateConfig{}),
		"parts":   {Credentials: NewTable(0), Tenants: NewTable(0), InFlight: NewInFlight(), AuthFailures: NewAuthFailures(60, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			var held []Admission
			for i := 1; i <= 2; i++ {
				a, err := g.Admit("cred", "t", l, t0)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, a)
				if got := g.InFlight.Count("cred"); got != i {
					t.Fatalf("InFlight.Count after %d admissions = %d", i, got)
				}
			}
			if _, err := g.Admit("cred", "t", l, t0); limitOf(err) != LimitInFlight {
				t.Fatalf("third admission: %v, want the in-flight limit", err)
			}
			for _, a := range held {
				g.Done(a)
			}
			if n := g.InFlight.Len(); n != 0 {
				t.Fatalf("%d in-flight keys left after Done", n)
			}
		})
	}
}

// TestAdmitClock: AdmitClock reads its clock once per call and decides at
// that time: each credential and tenant decision is the one Peek foresaw
// at the clock's time, through admissions and credential and in-flight
// refusals, and an admission has a count for Done to end.
func TestAdmitClock(t *testing.T) {
	l := testLimits()
	g := NewGate(GateConfig{})
	now, reads := t0, 0
	clock := func() time.Time { reads++; return now }
	var held []Admission
	for step := range 14 {
		switch step {
		case 4, 9: // end the requests in flight
			for _, a := range held {
				g.Done(a)
			}
			held = nil
		case 7:
			now = now.Add(1500 * time.Millisecond)
		}
		cred := g.Credentials.Peek("c", l.CredentialRate, now)
		tenant := g.Tenants.Peek("t", l.TenantRate, now)
		before := reads
		a, err := g.AdmitClock("c", "t", l, clock)
		if reads != before+1 {
			t.Fatalf("step %d: the clock was read %d times", step, reads-before)
		}
		// Peek's Remaining counts the request asked about; Allow's does not.
		foreseen := func(got, peek Decision) bool {
			if got.Allowed {
				peek.Remaining--
			}
			return got == peek
		}
		if !foreseen(a.Credential, cred) || (limitOf(err) != LimitCredential && !foreseen(a.Tenant, tenant)) {
			t.Fatalf("step %d: decisions %+v / %+v, Peek at the clock's time foresaw %+v / %+v", step, a.Credential, a.Tenant, cred, tenant)
		}
		if err == nil {
			held = append(held, a)
		}
		if got := g.InFlight.Count("c"); got != len(held) {
			t.Fatalf("step %d: %d in flight, want %d", step, got, len(held))
		}
	}
	if r := &g.Refusals; r.Load(LimitInFlight) == 0 || r.Load(LimitCredential) == 0 {
		t.Fatalf("the steps did not reach both limits: in flight %d, credential %d", r.Load(LimitInFlight), r.Load(LimitCredential))
	}
}

// tenantCount is the gate's count of tenant's requests in progress, the
// one Admission.TenantInFlight reports.
func tenantCount(g *Gate, tenant string) int {
	return g.tenants.count(g.Tenants.hash(tenant))
}

// TestGateTenantInFlight: a tenant whose Limits cap its requests in
// progress (the anonymous pool) is refused at the cap, whichever of its
// credentials asks, with nothing of the credential's or the tenant's rate
// spent and the credential's in-flight count given back; a tenant without
// the cap is not counted; Done frees a place. Also for a Gate put together
// from parts with seeds of their own, and none for one without the table.
func TestGateTenantInFlight(t *testing.T) {
	capped := Anonymous{
		AddressRate: Rate{PerSecond: 1, Burst: 3}, AddressMaxInFlight: 2,
		PoolRate: Rate{PerSecond: 1, Burst: 10}, PoolMaxInFlight: 2,
	}.Limits()
	for name, g := range map[string]*Gate{
		"NewGate": NewGate(GateConfig{}),
		"parts":   {Credentials: NewTable(0), Tenants: NewTable(0), InFlight: NewInFlight(), TenantInFlight: NewInFlight(), AuthFailures: NewAuthFailures(60, 0)},
	} {
		t.Run(name, func(t *testing.T) {
			a1, err1 := g.Admit("ip1", "", capped, t0)
			a2, err2 := g.Admit("ip2", "", capped, t0)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			credBefore, poolBefore := g.Credentials.Peek("ip3", capped.CredentialRate, t0), g.Tenants.Peek("", capped.TenantRate, t0)
			_, err := g.Admit("ip3", "", capped, t0)
			var re *RateError
			if !errors.As(err, &re) || re.Limit != LimitTenantInFlight || re.Decision.RetryAfter != time.Second || re.Decision.Limit.Burst != 2 {
				t.Fatalf("third request of the pool: %v %+v, want the tenant in-flight limit", err, re)
			}
			if got := g.Credentials.Peek("ip3", capped.CredentialRate, t0); got != credBefore {
				t.Errorf("the refusal spent ip3's rate: %+v, before %+v", got, credBefore)
			}
			if got := g.Tenants.Peek("", capped.TenantRate, t0); got != poolBefore {
				t.Errorf("the refusal spent the pool's rate: %+v, before %+v", got, poolBefore)
			}
			if n := g.InFlight.Count("ip3"); n != 0 {
				t.Errorf("ip3 in flight after its refusal: %d", n)
			}
			if n := g.Refusals.Load(LimitTenantInFlight); n != 1 {
				t.Errorf("refusals counted: %d, want 1", n)
			}
			// Another tenant, without the cap, is neither refused nor counted.
			for i := 0; i < 2; i++ {
				a, err := g.Admit(fmt.Sprint("c", i), "alice", testLimits(), t0)
				if err != nil {
					t.Fatalf("alice beside the full pool: %v", err)
				}
				defer g.Done(a)
			}
			if n := g.TenantInFlight.Count("alice"); n != 0 {
				t.Errorf("alice counted in TenantInFlight: %d", n)
			}
			g.Done(a1)
			a3, err := g.Admit("ip3", "", capped, t0)
			if err != nil {
				t.Fatalf("after one pool request ended: %v", err)
			}
			g.Done(a2)
			g.Done(a3)
			if n := g.TenantInFlight.Len(); n != 0 {
				t.Errorf("%d tenant in-flight keys left after Done", n)
			}
		})
	}
	g := &Gate{Credentials: NewTable(0), Tenants: NewTable(0), InFlight: NewInFlight(), AuthFailures: NewAuthFailures(60, 0)}
	for i := 0; i < 3; i++ {
		if _, err := g.Admit(fmt.Sprint("ip", i), "", capped, t0); err != nil {
			t.Fatalf("a Gate without TenantInFlight refused request %d: %v", i, err)
		}
	}
}
