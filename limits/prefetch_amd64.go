package limits

import "sync/atomic"

// prefetchEntry hints the CPU to load the entry of t where a lookup of h
// starts (tatTable.home), reading t's fields without synchronisation. It
// is in assembly because Go has no prefetch, and because a Go read of the
// fields outside the shard's lock would be a data race; a PREFETCH of a
// stale address is harmless.
//
//go:noescape
func prefetchEntry(t *tatTable, h uint64)

// prefetchLine hints the CPU to load the cache line of p.
//
//go:noescape
func prefetchLine(p *atomic.Int32)
