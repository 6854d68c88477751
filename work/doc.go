// Package work shares a node's slots for index- and CPU-heavy request work
// fairly among tenants: the sections of a request that read or write the
// index, hash a body or build an answer hold a slot, and one tenant's flood
// of such sections cannot sit ahead of every other tenant's one.
//
// # What it owns
//
// One Pool of Config.Slots slots, of which one tenant may hold at most
// Config.TenantShare (at least one slot). It decides who may hold a slot and
// in what order waiters are served, and counts what happened (Stats). It
// does not know which sections of a request need a slot (the server
// decides: never while reading a body from or writing an answer to the
// network, never while waiting for memory), HTTP status codes or metrics
// registration: a *BusyError becomes 503 in the server. Config comes from
// the cli; this package reads no files, flags or environment and starts no
// goroutines. The tickets, the lines and the entries per tenant are package
// fairq's bookkeeping, shared with package budget; the rules below, which
// decide who is granted when, are this package's.
//
// # Admission and fairness
//
// A tenant's request is granted a slot at once when a slot is free, the
// tenant holds fewer than its share and none of the tenant's own requests
// is waiting; it then costs one short critical section and no allocation.
// Otherwise it waits in its tenant's line, first in, first out.
//
// The tenants with a waiter form a ring. Whenever a slot is released or a
// waiter leaves, the ring is walked from where the last walk stopped and
// each tenant below its share in turn gets one slot for its oldest waiter,
// until no slot is free. A tenant that newly joins the ring goes behind
// every tenant already in it. So a tenant with a thousand requests waiting
// gets one slot per turn of the ring like everyone else: another tenant's
// single request waits for at most one grant to each tenant ahead of it in
// the ring, never behind the whole flood. A tenant at its share is passed
// over without losing its place.
//
// Waiting ends when the slot is granted, when Config.Wait passes
// (*BusyError with a RetryAfter of at least one second), or when the
// caller's ctx ends (ctx.Err()). A waiter that gives up leaves its line at
// once and whoever it held back is reconsidered.
//
// # Release exactly once
//
// Every granted Slot must be released exactly once, on every path: call
// `defer s.Release()` right after a nil error from Acquire. Releasing
// twice, or releasing a copy of a slot already released, is harmless. The
// zero Slot, and what Acquire returns with an error, may be released and do
// nothing. Per-tenant entries live while the tenant holds a slot or waits
// for one; up to 256 idle ones stay for reuse, the oldest leaving first, so
// the bookkeeping is bounded by work in flight plus that constant.
package work
