package store

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// TestUsageSummary: stored bytes count each xorb once, charged bytes count
// each owner, and the tenant list puts those nearest their quota first
// (overrides and the default quota both apply; unlimited tenants follow,
// largest first), cut to the number asked for.
func TestUsageSummary(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	put := func(tenant string, seed uint64) int64 {
		body, info := xet.BuildXorb(chunksOf(seed, 2, 3000), false)
		if _, err := s.PutXorb(ctx, tenant, info, body[:info.StreamLen], -1); err != nil {
			t.Fatal(err)
		}
		return int64(info.StreamLen)
	}
	a1, a2 := put("alice", 1), put("alice", 2)
	b1 := put("bob", 3)
	put("bob", 1) // alice's first xorb, now also bob's
	c1 := put("carol", 4)
	if err := s.PutTenantLimits(ctx, "bob", []byte(`{}`), ptr(b1*2)); err != nil { // bob: 100% of b1+a1 when a1 == b1
		t.Fatal(err)
	}
	if err := s.PutTenantLimits(ctx, "carol", []byte(`{}`), ptr(int64(-1))); err != nil {
		t.Fatal(err)
	}

	got, err := s.UsageSummary(ctx, 10, 100*a1)
	if err != nil {
		t.Fatal(err)
	}
	want := UsageSummary{
		XorbBytes:    a1 + a2 + b1 + c1,
		ChargedBytes: a1 + a2 + b1 + a1 + c1,
		Tenants: []TenantStored{
			{"bob", b1 + a1, 2 * b1},
			{"alice", a1 + a2, 100 * a1},
			{"carol", c1, -1},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("-want +got:\n%s", diff)
	}

	// Default unlimited: bob (the only quota) first, then by size; cut to 2.
	got, err = s.UsageSummary(ctx, 2, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Tenants[:1], got.Tenants[:1]); diff != "" || len(got.Tenants) != 2 || got.Tenants[1].Name != "alice" {
		t.Fatalf("unlimited default: %+v", got.Tenants)
	}
	// None asked: totals only.
	got, err = s.UsageSummary(ctx, 0, -1)
	if err != nil || got.Tenants != nil || got.XorbBytes != want.XorbBytes {
		t.Fatalf("no tenants: %+v %v", got, err)
	}
}
