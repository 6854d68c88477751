// Package fault holds the sentinels that both layers under store return:
// the bucket (store/objects) and the index (store/index). Each is one
// value, re-exported by objects and store under the same name, so
// errors.Is matches whichever name a caller uses.
//
// It imports no openxet package: store/objects and store/index import
// it, and it must import neither of them nor openxet/store
// (docs/design.md §1).
package fault

import "errors"

// ErrUnavailable means the index or the bucket could not be read or written
// right now: SQLite stayed busy or locked past the busy timeout, or failed
// on storage; the bucket failed in transport or in the service. The call
// changed nothing it reports as done, and the same call may succeed later.
// An error marked with it wraps the cause (errors.Is/As reach both).
var ErrUnavailable = errors.New("storage unavailable")

// ErrNoSpace means the index or the bucket has no room left for a write
// (ENOSPC on a file, SQLite's "database or disk is full", PostgreSQL's
// disk_full, MinIO's storage full). The write changed nothing; it may
// succeed once the operator frees room. An error marked with it wraps the
// cause.
var ErrNoSpace = errors.New("no space left in storage")
