package accounts

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// TestTenantLimits: a tenant's overrides are stored (record, then row),
// read back, restored from the record alone, and removed with a nil
// document; a document that is not JSON, or a bad tenant name, is refused
// with nothing changed.
func TestTenantLimits(t *testing.T) {
	engines(t, func(t *testing.T, newIndex func() string) {
		ctx := context.Background()
		dir := t.TempDir()
		a, _, b := openAt(t, newIndex(), fileBucket(dir), nil)
		if _, ok, err := a.TenantLimits(ctx, "alice"); ok || err != nil {
			t.Fatalf("no limits yet: ok %v %v", ok, err)
		}
		quota := int64(1 << 20)
		doc := []byte(`{"requests_per_second":5}`) // compact: the record holds it compacted
		if err := a.PutTenantLimits(ctx, "alice", doc, &quota); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			tenant string
			doc    []byte
			want   string
		}{
			{"alice", []byte(`{"requests_per_second":`), "not a JSON document"},
			{"Bad/Name", doc, "invalid tenant name"},
		} {
			if err := a.PutTenantLimits(ctx, tc.tenant, tc.doc, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s: %v, want %q", tc.tenant, tc.doc, err, tc.want)
			}
		}
		if got, ok, err := a.TenantLimits(ctx, "alice"); !ok || err != nil || string(got) != string(doc) {
			t.Fatalf("limits %s ok %v %v, want %s (the refusals changed nothing)", got, ok, err, doc)
		}
		if keys, _ := b.ListKeys(ctx, PrefixTenantLimits); len(keys) != 1 || keys[0] != TenantLimitsKey("alice") {
			t.Fatalf("records %v", keys)
		}

		fresh, fidx, _ := openAt(t, newIndex(), fileBucket(dir), nil)
		data, err := b.ReadAll(ctx, TenantLimitsKey("alice"))
		if err != nil {
			t.Fatal(err)
		}
		if err := fidx.Tx(ctx, func(tx *sql.Tx) error { return RestoreTenantLimits(ctx, tx, data) }); err != nil {
			t.Fatal(err)
		}
		var q sql.NullInt64
		if err := fidx.Reads().QueryRowContext(ctx, `SELECT quota_bytes FROM tenants WHERE name = ?`, "alice").Scan(&q); err != nil || q.Int64 != quota {
			t.Fatalf("restored quota %v %v, want %d", q, err, quota)
		}
		if got, ok, err := fresh.TenantLimits(ctx, "alice"); !ok || err != nil || string(got) != string(doc) {
			t.Fatalf("restored limits %s %v %v", got, ok, err)
		}

		if err := a.PutTenantLimits(ctx, "alice", nil, &quota); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := a.TenantLimits(ctx, "alice"); ok || err != nil {
			t.Fatalf("after delete: ok %v %v", ok, err)
		}
		if keys, _ := b.ListKeys(ctx, PrefixTenantLimits); len(keys) != 0 {
			t.Fatalf("records after delete: %v", keys)
		}
	})
}
