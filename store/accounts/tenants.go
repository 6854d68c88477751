package accounts

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"openxet/store/index"
	"openxet/store/objects"
)

// Tenant is a tenant's row in the index.
type Tenant struct {
	Name       string
	UsageBytes int64
	Limits     []byte // the tenant's overrides document, nil when none
}

// Tenants lists every tenant known to the index (from credentials, owners
// or limits), ordered by name.
func (a *Accounts) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := a.idx.Reads().QueryContext(ctx, `SELECT name, usage_bytes, limits FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("tenants: %w", index.Err(err))
	}
	defer rows.Close()
	var out []Tenant
	for rows.Next() {
		var t Tenant
		var lim sql.NullString
		if err := rows.Scan(&t.Name, &t.UsageBytes, &lim); err != nil {
			return nil, fmt.Errorf("tenants: %w", index.Err(err))
		}
		if lim.Valid {
			t.Limits = []byte(lim.String)
		}
		out = append(out, t)
	}
	return out, index.Err(rows.Err())
}

// TenantLimits returns a tenant's overrides document; ok is false when it
// has none.
func (a *Accounts) TenantLimits(ctx context.Context, tenant string) (doc []byte, ok bool, err error) {
	var lim sql.NullString
	err = index.Err(a.idx.Reads().QueryRowContext(ctx, `SELECT limits FROM tenants WHERE name = ?`, tenant).Scan(&lim))
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
func (a *Accounts) PutTenantLimits(ctx context.Context, tenant string, doc []byte, quotaBytes *int64) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	key := TenantLimitsKey(tenant)
	if doc == nil {
		if err := a.bucket.Delete(ctx, key); err != nil && !objects.IsNotFound(err) {
			return fmt.Errorf("delete limits of %s: %w", tenant, objects.Err(err))
		}
	} else {
		if !json.Valid(doc) {
			return fmt.Errorf("limits of %s: not a JSON document", tenant)
		}
		rec, _ := json.Marshal(tenantLimitsRecord{Tenant: tenant, Limits: doc, QuotaBytes: quotaBytes})
		if err := a.write(ctx, key, rec); err != nil {
			return fmt.Errorf("write limits of %s: %w", tenant, err)
		}
	}
	if doc == nil {
		quotaBytes = nil
	}
	return a.idx.Tx(ctx, func(tx *sql.Tx) error { return setTenantLimits(ctx, tx, tenant, doc, quotaBytes) })
}

// RestoreTenantLimits indexes the tenant-limits record data (the JSON of
// a tenant's limits object, as PutTenantLimits writes it): reindex's step
// for each object under PrefixTenantLimits.
func RestoreTenantLimits(ctx context.Context, tx *sql.Tx, data []byte) error {
	var rec tenantLimitsRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return err
	}
	return setTenantLimits(ctx, tx, rec.Tenant, rec.Limits, rec.QuotaBytes)
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
