package index

import (
	"database/sql"
	"errors"
	"fmt"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"openxet/store/fault"
)

// ErrInUse means an exclusive hold on the index (reindex's) was refused
// because a server holds the index open, or a server's shared one because
// a reindex holds it exclusively.
var ErrInUse = errors.New("index in use")

// ErrLockLost means this process lost its shared lock on a PostgreSQL
// index (the session that held it ended: a PostgreSQL restart, a dropped
// connection) and has not taken it again, perhaps because a reindex holds
// it: it refuses writes until it holds it again. It comes with
// fault.ErrUnavailable (errors.Is reaches both).
var ErrLockLost = errors.New("index lock lost")

// Err marks an index error with fault.ErrUnavailable when a retry may cure
// it (SQLite busy, locked or failing on storage; PostgreSQL unreachable,
// shutting down, out of resources, a transaction that kept losing), and
// with fault.ErrNoSpace when the storage under the index is full. Err(nil)
// is nil, and sql.ErrNoRows, every index miss, comes back as it is.
func Err(err error) error {
	if err == nil || err == sql.ErrNoRows || errors.Is(err, fault.ErrUnavailable) || errors.Is(err, fault.ErrNoSpace) {
		return err
	}
	if NoSpace(err) {
		return fmt.Errorf("%w: index: %w", fault.ErrNoSpace, err)
	}
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return pgErr(err)
	}
	switch se.Code() & 0xff { // the primary result code of an extended one
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
		return fmt.Errorf("%w: index: %w", fault.ErrUnavailable, err)
	}
	return err
}

// NoSpace reports whether err says the storage under the index is full:
// ENOSPC or EDQUOT, SQLite's "database or disk is full", PostgreSQL's
// disk_full.
func NoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	if se, ok := errors.AsType[*sqlite.Error](err); ok && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return true
	}
	return pgDiskFull(err)
}

// sqliteBusy reports whether err is SQLITE_BUSY (of any extended code).
func sqliteBusy(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	return ok && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
