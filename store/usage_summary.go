package store

import (
	"context"
	"fmt"
)

// UsageSummary is what the index says about stored bytes, for metrics.
type UsageSummary struct {
	// XorbBytes is the size of every xorb in the index, each counted once
	// however many tenants own it: the bytes the bucket holds for xorbs.
	XorbBytes int64
	// ChargedBytes is the sum of every tenant's usage: a xorb owned by two
	// tenants counts twice, as their quotas do.
	ChargedBytes int64
	// Tenants is at most the number asked for, those nearest their quota
	// first (usage / quota, highest first), then the largest.
	Tenants []TenantStored
}

// TenantStored is one tenant's stored bytes and effective quota.
type TenantStored struct {
	Name       string
	UsageBytes int64
	QuotaBytes int64 // < 0: unlimited
}

// UsageSummary sums the index's stored bytes and lists up to maxTenants
// tenants; a tenant without a quota override has defaultQuotaBytes (< 0:
// unlimited). It reads every xorb row, so callers should not call it per
// request.
func (s *Store) UsageSummary(ctx context.Context, maxTenants int, defaultQuotaBytes int64) (UsageSummary, error) {
	var out UsageSummary
	if err := s.queryRow(ctx, `SELECT COALESCE(SUM(stream_len), 0) FROM xorbs`).Scan(&out.XorbBytes); err != nil {
		return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	if err := s.queryRow(ctx, `SELECT COALESCE(SUM(usage_bytes), 0) FROM tenants`).Scan(&out.ChargedBytes); err != nil {
		return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	if maxTenants <= 0 {
		return out, nil
	}
	rows, err := s.query(ctx, `SELECT name, usage_bytes, COALESCE(quota_bytes, ?1) AS quota FROM tenants
		ORDER BY CASE WHEN COALESCE(quota_bytes, ?1) > 0 THEN CAST(usage_bytes AS DOUBLE PRECISION) / COALESCE(quota_bytes, ?1) ELSE -1 END DESC, usage_bytes DESC, name
		LIMIT ?2`, defaultQuotaBytes, maxTenants)
	if err != nil {
		return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t TenantStored
		if err := rows.Scan(&t.Name, &t.UsageBytes, &t.QuotaBytes); err != nil {
			return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
		}
		out.Tenants = append(out.Tenants, t)
	}
	if err := rows.Err(); err != nil {
		return UsageSummary{}, fmt.Errorf("usage summary: %w", err)
	}
	return out, nil
}
