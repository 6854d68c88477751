// Package index owns the engine side of openxet's index, the database
// derived from the bucket: SQLite (modernc.org/sqlite, the embedded
// default) or PostgreSQL. It is being moved here from package store in
// slices (issue 46); so far it holds the SQLite connections that keep the
// statements they run prepared (stmtcache.go) and the index schema: its
// migrations, their mapping to PostgreSQL and the functions the shared SQL
// uses there (migrate.go).
//
// It knows nothing of tenants, xorbs, repos or the bucket: package store
// writes the SQL of each operation and decides what goes in which table.
// It must not import openxet/store nor openxet/store/objects: dependencies
// point one way, store → index (docs/design.md §1). It may import
// openxet/store/fault, whose sentinels (ErrUnavailable, ErrNoSpace) the
// index's errors are marked with.
package index
