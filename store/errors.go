package store

import (
	"errors"
	"fmt"
)

// ErrNotFound means the thing asked for is not in the index (for a tenant,
// "not visible to that tenant" is the same answer).
var ErrNotFound = errors.New("not found")

// ErrOverQuota is the sentinel of *OverQuotaError.
var ErrOverQuota = errors.New("over quota")

// ErrMissingXorb means a shard references a xorb that is not stored.
var ErrMissingXorb = errors.New("missing xorb")

// ErrInvalidShard means a shard does not agree with the stored xorbs it
// references (chunk counts, sizes, verification hashes, file hash).
var ErrInvalidShard = errors.New("invalid shard")

// ErrIndexInUse means reindex found the index held open by a server.
var ErrIndexInUse = errors.New("index in use")

// OverQuotaError is returned when the index transaction that would record a
// new owner finds that the tenant's usage plus the xorb would pass its quota.
type OverQuotaError struct {
	Tenant     string
	QuotaBytes int64
	UsageBytes int64
	SizeBytes  int64
}

func (e *OverQuotaError) Error() string {
	return fmt.Sprintf("tenant %s: usage %d + %d bytes would pass quota %d", e.Tenant, e.UsageBytes, e.SizeBytes, e.QuotaBytes)
}

func (e *OverQuotaError) Unwrap() error { return ErrOverQuota }

// ShardError says what in a shard disagrees with the stored xorbs.
type ShardError struct {
	Kind   error // ErrMissingXorb or ErrInvalidShard
	Reason string
}

func (e *ShardError) Error() string { return e.Reason }
func (e *ShardError) Unwrap() error { return e.Kind }
