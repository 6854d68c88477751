// Package accounts owns who may act on a deployment: tenants (their names,
// their limit and quota overrides, the usage the index counts for them),
// their credentials (scopes, tokens shown once, revocation) and the
// deployment's signing key, each as a bucket record and its index rows;
// and people (docs/people.md): users and organizations sharing the
// tenants' name space (people.go, users.go), memberships with roles
// (memberships.go), personal access tokens (tokens.go) and the one access
// decision, Access (rights.go).
//
// It sits on the index (store/index) and the bucket (store/objects) and
// must not import openxet/store: store → accounts. A *store.Store embeds
// an *Accounts, so its callers reach these methods on the Store; reindex
// rebuilds the rows from the records with RestoreCredential and
// RestoreTenantLimits. The credential check itself (a token against its
// stored secret, in constant time) is Credential.CheckSecret; the server
// caches its outcome (server/auth.go).
package accounts

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"openxet/store/index"
	"openxet/store/objects"
)

// Bucket key layout (docs/design.md §3). Tenant names and credential ids
// never appear in keys: their SHA-256 does (objects.HashName).
const (
	PrefixTenantLimits = "tenant-limits/"
	PrefixCredentials  = "credentials/"
)

// TenantLimitsKey is the bucket key of a tenant's limits record.
func TenantLimitsKey(tenant string) string { return PrefixTenantLimits + objects.HashName(tenant) }

// CredentialKey is the bucket key of a credential's record.
func CredentialKey(id string) string { return PrefixCredentials + objects.HashName(id) }

// tenantLimitsRecord is a tenant's limits record, as JSON.
type tenantLimitsRecord struct {
	Tenant     string          `json:"tenant"`
	Limits     json.RawMessage `json:"limits"` // the caller's JSON document
	QuotaBytes *int64          `json:"quota_bytes,omitempty"`
}

// Accounts is the accounts layer over an open index and bucket. It is safe
// for concurrent use.
type Accounts struct {
	idx    *index.DB
	bucket *objects.Bucket
	now    func() time.Time
}

// New returns the accounts of the index and bucket given, which the caller
// opened and closes; now reads the clock.
func New(idx *index.DB, bucket *objects.Bucket, now func() time.Time) *Accounts {
	return &Accounts{idx: idx, bucket: bucket, now: now}
}

const (
	typeBinary = "application/octet-stream"
	typeJSON   = "application/json"
)

// write puts a JSON record under key, replacing any, once this process may
// write (index.DB.Writable).
func (a *Accounts) write(ctx context.Context, key string, data []byte) error {
	if err := a.idx.Writable(); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	_, err := a.bucket.WriteCRC(ctx, key, data, typeJSON, false, nil)
	return err
}

// writeIfAbsent puts data under key only when the key is free; written
// reports whether it did.
func (a *Accounts) writeIfAbsent(ctx context.Context, key string, data []byte) (written bool, err error) {
	if err := a.idx.Writable(); err != nil {
		return false, fmt.Errorf("write %s: %w", key, err)
	}
	return a.bucket.WriteCRC(ctx, key, data, typeBinary, true, nil)
}
