package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// Tenant is a tenant's row in the index.
type Tenant struct {
	Name       string
	UsageBytes int64
	Limits     []byte // the tenant's overrides document, nil when none
}

// Tenants lists every tenant known to the index (from credentials, owners
// or limits), ordered by name.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.query(ctx, `SELECT name, usage_bytes, limits FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", err)
	}
	defer rows.Close()
	var out []Tenant
	for rows.Next() {
		var t Tenant
		var lim sql.NullString
		if err := rows.Scan(&t.Name, &t.UsageBytes, &lim); err != nil {
			return nil, fmt.Errorf("tenants: %w", dbErr(err))
		}
		if lim.Valid {
			t.Limits = []byte(lim.String)
		}
		out = append(out, t)
	}
	return out, dbErr(rows.Err())
}

// TenantLimits returns a tenant's overrides document; ok is false when it
// has none.
func (s *Store) TenantLimits(ctx context.Context, tenant string) (doc []byte, ok bool, err error) {
	var lim sql.NullString
	err = s.queryRow(ctx, `SELECT limits FROM tenants WHERE name = ?`, tenant).Scan(&lim)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !lim.Valid) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("limits of %s: %w", tenant, err)
	}
	return []byte(lim.String), true, nil
}

// PutTenantLimits stores a tenant's overrides document (JSON) and its quota
// override (nil: the default applies): the tenant-limits record in the
// bucket, then the index. A nil doc deletes both. The quota override is
// what the transaction that records a new owner enforces, so a quota set
// through one process holds on every process at once.
func (s *Store) PutTenantLimits(ctx context.Context, tenant string, doc []byte, quotaBytes *int64) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	key := tenantLimitsKey(tenant)
	if doc == nil {
		if err := s.bucket.Delete(ctx, key); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete limits of %s: %w", tenant, bucketErr(err))
		}
	} else {
		if !json.Valid(doc) {
			return fmt.Errorf("limits of %s: not a JSON document", tenant)
		}
		rec, _ := json.Marshal(tenantLimitsRecord{Tenant: tenant, Limits: doc, QuotaBytes: quotaBytes})
		if _, err := s.writeObject(ctx, key, rec, typeJSON, false); err != nil {
			return fmt.Errorf("write limits of %s: %w", tenant, err)
		}
	}
	if doc == nil {
		quotaBytes = nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return setTenantLimits(ctx, tx, tenant, doc, quotaBytes) })
}

func setTenantLimits(ctx context.Context, tx *sql.Tx, tenant string, doc []byte, quotaBytes *int64) error {
	var v, q any
	if doc != nil {
		v = string(doc)
	}
	if quotaBytes != nil {
		q = *quotaBytes
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO tenants(name, limits, quota_bytes) VALUES (?, ?, ?)
		ON CONFLICT(name) DO UPDATE SET limits = excluded.limits, quota_bytes = excluded.quota_bytes`, tenant, v, q)
	if err != nil {
		return fmt.Errorf("index limits of %s: %w", tenant, err)
	}
	return nil
}

// indexTables are the index's tables, in the order Counts reports them.
var indexTables = []string{"xorbs", "xorb_owners", "tenants", "shards", "shard_owners", "shard_xorbs", "files", "dedup", "credentials", "repos", "commits", "refs"}

// Counts returns the number of rows of every index table, for checks that
// a refused request changed nothing and for reindex reports.
func (s *Store) Counts(ctx context.Context) (map[string]int64, error) {
	out := make(map[string]int64, len(indexTables))
	for _, t := range indexTables {
		var n int64
		if err := s.queryRow(ctx, `SELECT COUNT(*) FROM `+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		out[t] = n
	}
	return out, nil
}
