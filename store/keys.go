package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Bucket key layout (docs/design.md §3). Tenant names and credential ids never appear
// in keys: their SHA-256 does.
const (
	prefixXorbs        = "xorbs/default/"
	prefixShards       = "shards/"
	prefixXorbOwners   = "xorb-owners/"
	prefixShardOwners  = "shard-owners/"
	prefixTenantLimits = "tenant-limits/"
	prefixCredentials  = "credentials/"
)

// HashName returns the hex SHA-256 of a tenant name or credential id, the
// form used in bucket keys and limiter keys.
func HashName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

func xorbKey(xorb string) string   { return prefixXorbs + xorb }
func shardKey(shard string) string { return prefixShards + shard }
func xorbOwnerKey(xorb, tenant string) string {
	return prefixXorbOwners + xorb + "/" + HashName(tenant)
}
func shardOwnerKey(shard, tenant string) string {
	return prefixShardOwners + shard + "/" + HashName(tenant)
}
func tenantLimitsKey(tenant string) string { return prefixTenantLimits + HashName(tenant) }
func credentialKey(id string) string       { return prefixCredentials + HashName(id) }

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

type tenantLimitsRecord struct {
	Tenant     string          `json:"tenant"`
	Limits     json.RawMessage `json:"limits"` // the caller's JSON document
	QuotaBytes *int64          `json:"quota_bytes,omitempty"`
}
