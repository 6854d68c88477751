package store

import (
	"errors"
	"fmt"

	"openxet/store/fault"
	"openxet/store/index"
	"openxet/store/objects"
)

// ErrNotFound means the thing asked for is not in the index (for a tenant,
// "not visible to that tenant" is the same answer) or not in the bucket. It
// is objects.ErrNotFound, the same value.
var ErrNotFound = objects.ErrNotFound

// ErrOverQuota is the sentinel of *OverQuotaError.
var ErrOverQuota = errors.New("over quota")

// ErrMissingXorb means a shard references a xorb that is not stored.
var ErrMissingXorb = errors.New("missing xorb")

// ErrInvalidShard means a shard does not agree with the stored xorbs it
// references (chunk counts, sizes, verification hashes, file hash).
var ErrInvalidShard = errors.New("invalid shard")

// ErrIndexInUse means reindex found the index held open by a server
// (index.ErrInUse, the same value).
var ErrIndexInUse = index.ErrInUse

// ErrIndexLockLost means this process lost its shared lock on a
// PostgreSQL index and has not taken it again: it refuses writes until it
// holds it again. It comes with ErrUnavailable (errors.Is reaches both).
// It is index.ErrLockLost, the same value.
var ErrIndexLockLost = index.ErrLockLost

// ErrUnavailable means the index or the bucket could not be read or written
// right now: SQLite stayed busy or locked past the busy timeout, or failed
// on storage; the bucket failed in transport or in the service. The call
// changed nothing it reports as done, and the same call may succeed later.
// It wraps the cause (errors.Is/As reach both). It is fault.ErrUnavailable
// (and objects.ErrUnavailable), the same value.
var ErrUnavailable = fault.ErrUnavailable

// ErrNoSpace means the index or the bucket has no room left for a write
// (ENOSPC on a file, SQLite's "database or disk is full", PostgreSQL's
// disk_full, MinIO's storage full). The write changed nothing; it may
// succeed once the operator frees room. It wraps the cause. It is
// fault.ErrNoSpace (and objects.ErrNoSpace), the same value.
var ErrNoSpace = fault.ErrNoSpace

// dbErr marks an index error with ErrUnavailable when a retry may cure it,
// and with ErrNoSpace when the storage under the index is full
// (index.Err), or under the bucket when a bucket call inside an index
// transaction failed for want of room (objects.NoSpace: MinIO's storage
// full).
func dbErr(err error) error {
	if objects.NoSpace(err) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNoSpace) {
		return fmt.Errorf("%w: index: %w", ErrNoSpace, err)
	}
	return index.Err(err)
}

// bucketErr marks an error of a bucket call with ErrUnavailable when it is a
// transport or service failure (objects.Err).
func bucketErr(err error) error { return objects.Err(err) }

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
