package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// indexTables are the index's tables, in the order Counts reports them.
var indexTables = []string{"xorbs", "xorb_owners", "tenants", "shards", "shard_owners", "shard_xorbs", "files", "dedup", "credentials", "repos", "commits", "commit_aliases", "refs"}

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

// randomHex is n random bytes in hex: a deployment id, a collector's lease.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// isHex reports whether s is hex.
func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}
