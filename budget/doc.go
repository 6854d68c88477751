// Package budget is the process-wide memory budget for request work on one
// node (docs/design.md §6, docs/design.md §13.3): upload bodies being validated, shard
// bodies, reconstruction answers, read buffers and dedup answers reserve their
// bytes here before they hold them.
//
// # What it owns
//
// One Budget of Config.TotalBytes, of which one credential may hold at most
// Config.CredentialShare and one tenant, all its credentials together, at most
// Config.TenantShare. It decides who may hold how much and in what order
// waiters are served, and counts what happened (Stats). It does not own the
// sizes asked for (the server works them out, e.g. a reconstruction from its
// stored term count), HTTP status codes or metrics registration: a *TooLargeError becomes 413, a *BusyError 503 memory_busy with
// Retry-After, in the server. Config comes from the cli; this package reads no
// files, flags or environment and starts no goroutines. The tickets, the
// line and the entries per key are package fairq's bookkeeping, shared with
// package work; the rules below, which decide who is granted when, are this
// package's.
//
// # Admission and fairness
//
// A reservation of n bytes for Key k is granted when n fits in what is left of
// the budget, of k's credential share and of k's tenant share, and nothing
// ahead of it in line says otherwise. A reservation that could never fit, n
// over either share, is refused at once with a *TooLargeError; it never waits.
//
// Waiters form one line in arrival order. Whenever memory is released or a
// waiter leaves, the line is walked oldest first and each waiter is granted if
// it fits, with these rules:
//
//   - A waiter held back by its own credential's share waits on that
//     credential: later reservations of the same credential queue behind it,
//     and nobody else does. Another credential, of the same tenant or not,
//     passes it.
//   - A waiter held back by its tenant's share waits on that tenant: later
//     reservations of the same tenant queue behind it; other tenants pass it.
//     So one tenant's flood never holds another tenant's request behind it.
//   - A waiter that fits its shares but not the budget as a whole stops the
//     line there: no later reservation, of any key, is granted before it. A
//     large waiter is therefore never starved by a stream of small ones (no
//     barging), and since it already fits its shares it needs only releases,
//     which do come, because every holder is capped by its shares.
//
// A new reservation is judged as if it stood at the end of the line, so it
// takes memory at once only if no waiter ahead of it must go first by the
// rules above; in the common case, nobody waiting, that costs one short
// critical section and no allocation.
//
// The price of the third rule is head-of-line blocking: while the oldest
// budget-blocked waiter waits, later reservations of other keys wait too, even
// small ones that would fit. It lasts until enough is released for that
// waiter, and never longer than Config.Wait, after which it leaves with a
// *BusyError and the line moves on. Unless a share is set to 1, no single
// credential or tenant can fill the budget: a flood from one key leaves its
// own waiters held back by its share, which blocks nobody else, and it takes
// several keys together to make the budget itself the limit.
//
// Waiting ends when the reservation is granted, when Config.Wait passes
// (*BusyError, naming the share that held it back when time ran out, and a
// RetryAfter of at least one second), or when the caller's ctx ends
// (ctx.Err()). Either way a waiter that gives up leaves the line at once, and
// whoever it held back is reconsidered.
//
// # Release exactly once
//
// Every granted Reservation must be released exactly once, on every path,
// error paths and panics included: call `defer r.Release()` right after a nil
// error from Reserve. An unreleased reservation is a leak that shrinks the
// budget for the life of the process. Releasing twice, or releasing a copy of
// a reservation already released, is harmless: the bytes are credited back
// only once. The zero Reservation, and what Reserve returns with an error, may
// be released and do nothing.
//
// # Buffers
//
// ReserveBuffer reserves memory and hands it out as one []byte, for bodies
// read whole (xorbs, shards, read buffers). Releasing such a reservation
// keeps its buffer in a pool, by size class (BufferBytes), for the next
// reservation of that class: a storm of 64 MiB uploads reuses the same few
// buffers instead of leaving the garbage collector twice the budget to
// collect. The pool lives inside the budget: pooled and reserved bytes
// together never exceed Config.TotalBytes, any reservation that needs the
// room drops pooled buffers, and TrimBuffers drops the pool once it has gone
// unused, so that an idle process can give the memory back.
//
// Per-credential and per-tenant entries live while they hold bytes or have
// a waiter; up to 256 idle ones of each kind stay for reuse, the oldest
// leaving first, so that a key reserving again finds its entry instead of
// inserting and deleting one per reservation. Memory used by the
// bookkeeping is bounded by work in flight plus that constant.
package budget
