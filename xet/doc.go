// Package xet implements the wire formats of Hugging Face's Xet CAS protocol
// as pure functions: the hash string form, the BLAKE3 keyed hashes (chunk,
// merkle aggregation, file, verification range and keyed dedup hashes), xorb
// validation and building (all at once, or chunk by chunk with XorbWriter),
// the content-defined chunking of docs/protocol.md §4 (ChunkLen over bytes, ChunkReader over
// an io.Reader), shard parsing and building, HTTP Range parsing and the
// reconstruction answer for a byte window of a file.
//
// The reference for every format is docs/protocol.md in this repository;
// comments cite its sections as docs/protocol.md §N.
//
// What this package does not do: no network, no files, no database, no
// clock (functions that need the time take it as an argument), no logging;
// the one reader is ChunkReader, of an io.Reader the caller hands it.
// Inputs arrive as byte slices the caller has already read with a size cap
// (MaxXorbBytes, MaxShardBytes); the parsers never allocate more than a small
// multiple of their input, and never panic on malformed input.
//
// Errors: every refusal wraps exactly one of the sentinels ErrBadHash,
// ErrInvalidXorb, ErrInvalidShard, ErrHashMismatch, ErrTooLarge, ErrBadRange
// or ErrRangeNotSatisfiable, usually inside a *FormatError that says where.
// Test with errors.Is and errors.As, never by message. Errors returned by a
// caller-supplied lookup function (chunks func(Hash) ...) are passed through
// wrapped with %w, so the caller's own "not found" error stays detectable.
//
// All functions are safe for concurrent use; nothing here keeps state
// between calls.
package xet
