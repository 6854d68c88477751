package store

import "openxet/store/objects"

// Bucket key layout (docs/design.md §3). Tenant names and credential ids never appear
// in keys: their SHA-256 does. The accounts' keys (tenant limits,
// credentials) are package accounts'.
const (
	prefixXorbs       = "xorbs/default/"
	prefixShards      = "shards/"
	prefixXorbOwners  = "xorb-owners/"
	prefixShardOwners = "shard-owners/"
)

// HashName returns the hex SHA-256 of a tenant name or credential id, the
// form used in bucket keys and limiter keys (objects.HashName).
func HashName(name string) string { return objects.HashName(name) }

func xorbKey(xorb string) string   { return prefixXorbs + xorb }
func shardKey(shard string) string { return prefixShards + shard }
func xorbOwnerKey(xorb, tenant string) string {
	return prefixXorbOwners + xorb + "/" + HashName(tenant)
}
func shardOwnerKey(shard, tenant string) string {
	return prefixShardOwners + shard + "/" + HashName(tenant)
}

// Bucket records, as JSON.
type xorbOwnerRecord struct {
	Tenant    string `json:"tenant"`
	SizeBytes int64  `json:"size_bytes"`
	Created   int64  `json:"created"`
}

type shardOwnerRecord struct {
	Tenant  string `json:"tenant"`
	Created int64  `json:"created"`
}
