package limits

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// hexKeys returns n distinct 64-character keys, like sha256(credential id)
// in hex, the credential key.
func hexKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		sum := sha256.Sum256([]byte(prefix + strconv.Itoa(i)))
		keys[i] = hex.EncodeToString(sum[:])
	}
	return keys
}

// tenantNames returns n distinct tenant names, the tenant key.
func tenantNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	return names
}

// BenchmarkAllowExistingKey: one Allow on a tracked key, clock read
// included.
func BenchmarkAllowExistingKey(b *testing.B) {
	tbl := NewTable(0)
	r := Rate{PerSecond: 1e9, Burst: 1 << 20}
	key := hexKeys("c", 1)[0]
	tbl.Allow(key, r, time.Now())
	b.ReportAllocs()
	for b.Loop() {
		tbl.Allow(key, r, time.Now())
	}
}

// BenchmarkAllowExistingKeyFixedTime: the same without the clock read.
func BenchmarkAllowExistingKeyFixedTime(b *testing.B) {
	tbl := NewTable(0)
	r := Rate{PerSecond: 1e9, Burst: 1 << 20}
	key := hexKeys("c", 1)[0]
	now := time.Now()
	tbl.Allow(key, r, now)
	b.ReportAllocs()
	for b.Loop() {
		tbl.Allow(key, r, now)
	}
}

// BenchmarkRequestCheck is the whole per-request check of docs/design.md §4 on the
// primitives: read the clock once, credential Allow, tenant Allow,
// in-flight Acquire and Release, over 100k tenants with one credential
// each, at the default limits.
func BenchmarkRequestCheck(b *testing.B) {
	const n = 100_000
	tenants := tenantNames(n)
	creds := hexKeys("c", n)
	l := DefaultLimits()
	credTable, tenantTable, inFlight := NewTable(2*n), NewTable(2*n), NewInFlight()
	now := time.Now()
	for i := range n {
		credTable.Allow(creds[i], l.CredentialRate, now)
		tenantTable.Allow(tenants[i], l.TenantRate, now)
	}
	var refused int
	eachKey(b, n, func(i int) {
		now := time.Now()
		cred, tenant := creds[i], tenants[i]
		if !credTable.Allow(cred, l.CredentialRate, now).Allowed ||
			!tenantTable.Allow(tenant, l.TenantRate, now).Allowed ||
			!inFlight.Acquire(cred, l.MaxInFlightPerCredential) {
			refused++
			return
		}
		inFlight.Release(cred)
	})
	if refused > 0 {
		b.Fatalf("%d requests refused", refused)
	}
}

// eachKey runs body once per iteration of b's loop with the index of the
// next of n keys, in turn, and reports allocations.
func eachKey(b *testing.B, n int, body func(i int)) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i++; i == n {
			i = 0
		}
		body(i)
	}
}

// BenchmarkGateAdmit is BenchmarkRequestCheck through Gate: "at" with the
// time read by the caller (Admit), "clock" with the clock read inside,
// after the tables' entries are asked for (AdmitClock, the server's call).
func BenchmarkGateAdmit(b *testing.B) {
	const n = 100_000
	tenants := tenantNames(n)
	creds := hexKeys("c", n)
	l := DefaultLimits()
	for _, tc := range []struct {
		name  string
		admit func(g *Gate, credential, tenant string) (Admission, error)
	}{
		{"at", func(g *Gate, credential, tenant string) (Admission, error) {
			return g.Admit(credential, tenant, l, time.Now())
		}},
		{"clock", func(g *Gate, credential, tenant string) (Admission, error) {
			return g.AdmitClock(credential, tenant, l, time.Now)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g := NewGate(GateConfig{MaxCredentials: 2 * n, MaxTenants: 2 * n})
			eachKey(b, n, func(i int) {
				a, err := tc.admit(g, creds[i], tenants[i])
				if err != nil {
					b.Fatal(err)
				}
				g.Done(a)
			})
		})
	}
}

// BenchmarkAllowParallel: Allow from all Ps, each goroutine on its own
// keys among 10k, clock read included.
func BenchmarkAllowParallel(b *testing.B) {
	keys := hexKeys("p", 10_000)
	tbl := NewTable(0)
	r := Rate{PerSecond: 1e9, Burst: 1 << 20}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			tbl.Allow(keys[i%len(keys)], r, time.Now())
		}
	})
}

// BenchmarkAllowParallelOneKey: all Ps on one key (the contention case).
func BenchmarkAllowParallelOneKey(b *testing.B) {
	tbl := NewTable(0)
	r := Rate{PerSecond: 1e9, Burst: 1 << 20}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tbl.Allow("hot", r, time.Now())
		}
	})
}

// BenchmarkAllowNewKeys: every call a new key in a full table whose
// entries are evictable (an IP spray): insert plus incremental eviction.
func BenchmarkAllowNewKeys(b *testing.B) {
	keys := hexKeys("n", 1<<16)
	tbl := NewTable(10_000)
	r := Rate{PerSecond: 1e6, Burst: 1}
	now := time.Now()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		now = now.Add(time.Microsecond)
		tbl.Allow(keys[i&(len(keys)-1)], r, now)
	}
}

// BenchmarkAuthCheck: an attempt (Begin, then Refund) for an IP with no
// failures.
func BenchmarkAuthCheck(b *testing.B) {
	a := NewAuthFailures(DefaultAuthFailuresPerMinute, 0)
	b.ReportAllocs()
	for b.Loop() {
		at, _ := a.Begin("203.0.113.9", time.Now())
		at.Refund()
	}
}

// BenchmarkEffectiveHit: For on a cached tenant.
func BenchmarkEffectiveHit(b *testing.B) {
	e := NewEffective(DefaultLimits(), sourceFunc(func(ctxArg context.Context, _ string) (Overrides, bool, error) {
		return Overrides{}, false, nil
	}), 0)
	ctx := b.Context()
	e.For(ctx, "tenant")
	b.ReportAllocs()
	for b.Loop() {
		e.For(ctx, "tenant")
	}
}
