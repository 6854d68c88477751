// Package index owns the engine side of openxet's index, the database
// derived from the bucket: SQLite (modernc.org/sqlite, the embedded
// default) or PostgreSQL. Everything that differs between the two is here:
//   - DB (db.go): an open index: the read pool, the write pool and the one
//     way to write through it (Tx, retried on PostgreSQL while a concurrent
//     SERIALIZABLE transaction wins; Statement, one statement that is its
//     own transaction), snapshot reads (Snapshot), and the rule that a
//     process writes only while it holds its shared lock (Writable);
//   - where an index is (location.go): a file, or a postgres:// URL with
//     its schema;
//   - the index lock (lock.go): servers hold it shared, reindex
//     exclusively; on PostgreSQL a session lock that a server checks and
//     takes again (CheckLock);
//   - SQLite's background checkpoints (checkpoint.go) and its connections
//     that keep the statements they run prepared (stmtcache.go);
//   - PostgreSQL's placeholder rewrite, retries and error classes
//     (postgres.go, errors.go: Err marks what a retry may cure with
//     fault.ErrUnavailable);
//   - the schema: its migrations, their mapping to PostgreSQL and the
//     functions the shared SQL uses there (migrate.go);
//   - reindex's scratch index and the swap of a rebuilt one (swap.go).
//
// It knows nothing of tenants, xorbs, repos or the bucket: package store
// writes the SQL of each operation and decides what goes in which table.
// It must not import openxet/store nor openxet/store/objects: dependencies
// point one way, store → index (docs/design.md §1). It may import
// openxet/store/fault, whose sentinels (ErrUnavailable, ErrNoSpace) the
// index's errors are marked with.
package index
