// Package store owns openxet's durable state: the bucket (the source of
// truth) and the index derived from it, on SQLite (modernc.org/sqlite in
// WAL mode, the embedded default) or PostgreSQL (the scale-out index),
// whose engine side is package store/index.
//
// The bucket itself is package store/objects (a gocloud.dev/blob bucket:
// opening its URL, the one way to write an object, reads, listings, what its
// errors mean); store decides what goes under which key and never reaches
// into gocloud.dev itself. objects must not import store. ErrNotFound is
// objects' sentinel; ErrUnavailable and ErrNoSpace, which the bucket and
// the index share, are package store/fault's; all three are re-exported
// here as the same values.
//
// The index's engine side is package store/index: store reaches the index
// only through an index.DB (its read pool, its write transactions Tx and
// Statement, its snapshots), writes the SQL of each operation (one text
// for both engines, but for the two PostgreSQL statements of xorbs_pg.go)
// and decides what goes in which table. index must not import store.
//
// The accounts (tenants, their limit overrides, credentials, the signing
// key, users, organizations, memberships and personal tokens) are package
// store/accounts, over index and objects and under store: a Store embeds
// an *accounts.Accounts, so its methods are the Store's, and reindex
// restores their rows through it (accounts.RestoreCredential,
// RestoreTenantLimits, RestoreUser, RestoreOrg, RestoreMembership). accounts must not
// import store.
//
// The bucket holds xorbs, shards, owner records, credentials, tenant-limit
// records, repos and their commits, blobs and file releases, under the key
// prefixes declared in keys.go and beside the code that writes them. The
// index holds what the hot path needs: xorb chunk layouts, owner rows, tenant
// usage counters, the files each tenant may read, the dedup index,
// credentials and tenant limits. Reindex rebuilds the index from the bucket.
//
// Consistency rules (docs/design.md §3, docs/design.md §9):
//   - a tenant's usage counter changes only in the transaction that inserts
//     one of its xorb owner rows (only when that row is new) or in the one
//     that releases it (gc.go), and never goes below zero;
//   - a new owner is written in the order xorb object, owner record in the
//     bucket, index transaction, so a crash leaves the index behind the bucket,
//     never ahead of it;
//   - a repo's records (repo.json last) and a commit's ref record are
//     written inside the index transaction that claims the name or moves
//     the ref: the bucket is never behind what the index serves, and of
//     writers racing for one name or ref only the one that holds it writes;
//   - a xorb object is written only where none is (create-if-absent) and is
//     never replaced or deleted by an upload, so the layout the index has
//     for a xorb is the layout of the bytes in the bucket, across every
//     process and host sharing them; an upload that finds an object indexes
//     that object's layout;
//   - a write refused by its quota withdraws its owner record and leaves no
//     row or counter change; its object stays, owned by nobody, for the next
//     upload of the xorb to adopt (collection removes unowned objects after
//     a grace period);
//   - an owner record without its owner row (a crash in between) counts as
//     ownership for reindex; the tenant's next upload of the xorb completes
//     it, or withdraws it when the quota refuses;
//   - retention and collection (retention.go, touch.go, gc.go): a file is
//     retained until released; a xorb owner no retained file of its tenant
//     needs is released; an object nobody owns or references is collected
//     after a grace period, by one collector at a time. What is kept is
//     one reference graph (refgraph.go: revisions → files → xorbs, and
//     who owns what), which collection, the usage report and reindex
//     read, and the keep rule (package store/keep); a pass plans with them, then acts
//     (gcplan.go, gcexec.go).
//
// Bytes that arrive without Xet (the Hub's LFS transfer, the mirror's
// pull) come in through package store/ingest (ingest.File), which chunks,
// dedups and stores them as xorbs and a shard through the Store's own
// upload operations (DedupAnswer, PutXorb, VerifyShard, PutShard): it
// does not import store, and store does not import it.
//
// CopyFiles (copy.go) gives a tenant files that a revision of a repo it may
// read names (the Hub's lfs-files/duplicate): a shard of the tenant's own
// over the stored xorbs, charged as an upload of the same bytes would be,
// in one index transaction.
//
// Reads use a pool of connections; writes use one connection of their own,
// so a writer waiting for the index's write lock never holds a connection
// that a read needs. A wait past Config.BusyTimeout, or a bucket that fails in
// transport, is ErrUnavailable.
//
// The package knows nothing of HTTP or of rate limits. Errors that callers
// must tell apart are exported sentinels and typed errors: the ones many
// operations share (ErrNotFound, ErrOverQuota, ErrUnavailable, ...) in
// errors.go, the others beside the operation that returns them
// (ErrCollectorBusy in gc.go, ErrRefMoved in
// repos.go, and so on).
package store
