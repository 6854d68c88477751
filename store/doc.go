// Package store owns openxet's durable state: the gocloud.dev/blob bucket
// (the source of truth) and the SQLite index derived from it.
//
// The bucket holds xorbs, shards, owner records, credentials and tenant-limit
// records under the keys listed in Keys. The index (modernc.org/sqlite in WAL
// mode) holds what the hot path needs: xorb chunk layouts, owner rows, tenant
// usage counters, the files each tenant may read, the dedup index,
// credentials and tenant limits. Reindex rebuilds the index from the bucket.
//
// Consistency rules (design §3, §9):
//   - a tenant's usage counter changes only in the transaction that inserts
//     one of its xorb owner rows (only when that row is new) or in the one
//     that releases it (gc.go), and never goes below zero;
//   - a new owner is written in the order xorb object, owner record in the
//     bucket, index transaction, so a crash leaves the index behind the bucket,
//     never ahead of it;
//   - a refused write removes what it put in the bucket and leaves no row;
//   - retention and collection (lifecycle.go, touch.go, gc.go): a file is
//     retained until released; a xorb owner no retained file of its tenant
//     needs is released; an object nobody owns or references is collected
//     after a grace period, by one collector at a time.
//
// The package knows nothing of HTTP or of rate limits. Errors that callers
// must tell apart are the sentinels and typed errors in errors.go.
package store
