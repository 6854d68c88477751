// Package fairq is the bookkeeping that the node's fair queues share: the
// memory budget (package budget) and the work slots (package work) both
// keep waiters as recycled tickets in first-in first-out lines, keep an
// entry per key (credential, tenant) with a bounded list of idle ones for
// reuse, and wait for a grant with a deadline and a ctx, resolving a grant
// that comes in the instant the wait ends.
//
// # What it owns
//
//   - Ticket and Tickets: a waiter that becomes, once granted, the holder's
//     handle, with a generation that tells a live handle from a stale copy,
//     and a bounded free list of them.
//   - Line: a first-in first-out line of tickets that any ticket can leave
//     in constant time.
//   - Table and Entry: the entry of each key, created on first use and kept
//     while in use; entries that fall idle stay for reuse, oldest first, at
//     most MaxIdle, so a key that comes back finds its entry.
//   - Await: the wait itself, and what happens when it ends.
//
// # What it does not own
//
// Fairness itself. Who is granted when (the rules the budget and work
// package docs state) is the owner's: the budget walks one line of all
// waiters in arrival order against two shares of bytes, the work pool
// serves per-tenant lines round robin against one share of slots. The
// owner also keeps its own counts, sizes and errors. Nothing here locks:
// every method is called with the owner's lock held (Await takes and
// releases it through its Owner), and the zero value of each type is ready
// to use. It starts no goroutines and reads no clock but Await's timer.
package fairq
