package xet

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (errors.Is), except errors passed through from caller-supplied lookups.
var (
	// ErrBadHash: a hash string is not 64 lowercase hex digits.
	ErrBadHash = errors.New("xet: malformed hash")
	// ErrInvalidXorb: a serialized xorb breaks the format of docs/protocol.md §5.
	ErrInvalidXorb = errors.New("xet: invalid xorb")
	// ErrInvalidShard: a serialized shard breaks the format of docs/protocol.md §6, or a
	// shard's file or CAS entry disagrees with the xorbs it references.
	ErrInvalidShard = errors.New("xet: invalid shard")
	// ErrHashMismatch: a recomputed hash (xorb hash, file hash, verification
	// range hash, chunk hash) differs from the one claimed.
	ErrHashMismatch = errors.New("xet: hash mismatch")
	// ErrTooLarge: an input is over its size cap (MaxXorbBytes, MaxShardBytes).
	ErrTooLarge = errors.New("xet: input too large")
	// ErrBadRange: an HTTP Range header is syntactically invalid or asks for
	// several ranges (HTTP 400).
	ErrBadRange = errors.New("xet: malformed range")
	// ErrRangeNotSatisfiable: a Range starts at or after the end of the file
	// (HTTP 416, which the client reads as end of file).
	ErrRangeNotSatisfiable = errors.New("xet: range not satisfiable")
)

// FormatError describes why an input was refused and where.
//
// Kind is one of the package sentinels and is what Unwrap returns, so
// errors.Is(err, ErrInvalidXorb) works through a *FormatError.
// Offset is the byte offset in the input where the problem was found
// (into the body for xorbs and shards, into the string for hashes and Range
// headers), or -1 when the problem concerns the input as a whole.
type FormatError struct {
	Kind   error
	Offset int64
	Reason string
}

// Error returns "<kind>: <reason> (at offset N)".
func (e *FormatError) Error() string {
	kind := "xet: error"
	if e.Kind != nil {
		kind = e.Kind.Error()
	}
	s := kind + ": " + e.Reason
	if e.Offset >= 0 {
		s += " (at offset " + strconv.FormatInt(e.Offset, 10) + ")"
	}
	return s
}

// Unwrap returns Kind.
func (e *FormatError) Unwrap() error { return e.Kind }

func formatErr(kind error, off int, reason string) error {
	return &FormatError{Kind: kind, Offset: int64(off), Reason: reason}
}

func xorbErr(off int, reason string) error  { return formatErr(ErrInvalidXorb, off, reason) }
func shardErr(off int, reason string) error { return formatErr(ErrInvalidShard, off, reason) }
