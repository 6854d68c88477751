package store

import (
	"context"
	"fmt"
	"testing"

	"openxet/limits"
)

// TestQuotaSQLIsCheckQuota: the SQL fragments of the owner transactions
// (quota.go) decide as limits.CheckQuota decides (without pending bytes,
// which only a node knows), on the engine the test runs on, for overrides
// and defaults that are unlimited, zero and finite, at and around the
// edge.
func TestQuotaSQLIsCheckQuota(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	overrides := []string{"NULL", "-1", "0", "100"}
	sizes := []int64{-1, 0, 100}
	n := 0
	for _, override := range overrides {
		for _, def := range sizes {
			quota := def
			if override != "NULL" {
				fmt.Sscan(override, &quota)
			}
			for _, usage := range []int64{0, 40, 100} {
				for _, size := range []int64{0, 1, 60, 61, 100} {
					q := "SELECT " + fitsQuotaSQL(effectiveQuotaSQL("CAST("+override+" AS BIGINT)", fmt.Sprint(def)), fmt.Sprint(usage), fmt.Sprint(size))
					var fits bool
					if err := s.queryRow(context.Background(), q).Scan(&fits); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
					want := limits.CheckQuota(quota, usage, 0, size) == limits.QuotaOK
					if fits != want {
						t.Errorf("override %s, default %d, usage %d, size %d: SQL says fits %v, CheckQuota %v", override, def, usage, size, fits, want)
					}
					n++
				}
			}
		}
	}
	t.Logf("%d cases", n)
}
