package budget

import (
	"context"
	"fmt"
	"sync"
	"time"

	"openxet/fairq"
)

// Key names who a reservation is for. Credential is the SHA-256 of the
// credential id and Tenant the tenant name; both are opaque here and any string,
// the empty one included, is a key like the others.
type Key struct {
	Credential string
	Tenant     string
}

// Budget is the process-wide memory budget for request work, with a share
// per credential and per tenant. Create it with New (the zero Budget is not
// usable); it is safe for concurrent use and needs no Close (it owns no
// goroutines).
type Budget struct {
	// Fixed by New.
	total     int64
	credCap   int64
	tenantCap int64
	wait      time.Duration

	mu        sync.Mutex
	reserved  int64
	highWater int64
	live      int // reservations granted and not yet released
	// The entries of credentials and tenants; those that fell idle stay
	// for reuse (fairq.Table).
	creds, tenants fairq.Table[keyShare]

	// The waiters, oldest first, and what the last walk of them found.
	line    fairq.Line[slip]
	epoch   uint64 // the walk that set the current marks
	blocked bool   // a queued waiter fits its shares but not the budget

	tickets fairq.Tickets[slip]

	// Released buffers of ReserveBuffer, by capacity (see buffers.go).
	// pooledBytes + reserved <= total at all times.
	pool        map[int64][][]byte
	pooledBytes int64
	poolUsed    bool // a buffer was taken from the pool since the last TrimBuffers

	granted, waited, cancelled uint64
	busy, tooLarge             [numKinds]uint64

	bufferHits, bufferMisses uint64
	bufferDropped            int64
}

// keyShare is what one credential or one tenant holds and how many of its
// reservations are queued. Its entry is idle while both are zero.
type keyShare struct {
	held    int64
	waiters int
	// mark == Budget.epoch means a queued waiter of this key is held back by
	// the key's own share (or by an earlier waiter of the key), so later
	// reservations of the key must queue behind it.
	mark uint64
}

// share is the entry of one credential or one tenant.
type share = fairq.Entry[keyShare]

// slip is what a ticket of the budget carries: a queued waiter and then,
// once granted, the reservation itself.
type slip struct {
	b      *Budget // set once, when the ticket is made
	n      int64
	cred   *share
	tenant *share
	// wantBuf: take a pooled buffer of n bytes when granted (ReserveBuffer);
	// buf is the buffer the reservation holds, pooled again on release.
	wantBuf bool
	buf     []byte
	reason  kind // while queued: why it waits
}

// ticket is a waiter or a reservation. Tickets are recycled; their
// generation tells a live Reservation from a stale copy.
type ticket = fairq.Ticket[slip]

// kind is why a reservation cannot be granted yet, or kindFits.
type kind uint8

const (
	kindBudget kind = iota
	kindCredential
	kindTenant
	numKinds
	kindFits = numKinds
)

func (k kind) String() string {
	switch k {
	case kindBudget:
		return ShareBudget
	case kindCredential:
		return ShareCredential
	case kindTenant:
		return ShareTenant
	}
	return "fits"
}

// New returns a Budget for c, with zero fields taken as their defaults (see
// Config.WithDefaults). It does no I/O and starts no goroutines. The caller
// should have checked c with Validate; New clamps what Validate would refuse
// rather than fail (shares into [MinShare, MaxShare], a non-positive
// TotalBytes to 0, which refuses every non-empty reservation as too large).
func New(c Config) *Budget {
	c = c.WithDefaults()
	if c.TotalBytes < 0 {
		c.TotalBytes = 0
	}
	if c.Wait < 0 {
		c.Wait = 0
	}
	return &Budget{
		total:     c.TotalBytes,
		credCap:   shareBytes(c.TotalBytes, clampShare(c.CredentialShare)),
		tenantCap: shareBytes(c.TotalBytes, clampShare(c.TenantShare)),
		wait:      c.Wait,
		epoch:     1, // fresh keyShares carry mark 0, which must not match
	}
}

func clampShare(s float64) float64 {
	switch {
	case s >= MinShare && s <= MaxShare:
		return s
	case s > MaxShare:
		return MaxShare
	}
	return MinShare // below the range, or NaN
}

// Reservation is memory granted by Reserve. Release it exactly once, on every
// path, when the memory is no longer used (typically `defer r.Release()`).
// Releasing again, from the same variable or any copy of it, even from another
// goroutine, is a no-op: the bytes are credited back once. The zero value is an
// empty reservation whose Release does nothing.
type Reservation struct {
	t   *ticket
	gen uint64
	n   int64
}

// Bytes is the size of the reservation as granted, whether or not it has since
// been released.
func (r *Reservation) Bytes() int64 { return r.n }

// Release credits the reservation back to the budget and to its credential and
// tenant shares, and admits whatever waiters now fit. Only the first Release
// of a reservation (or of any copy) has an effect.
func (r *Reservation) Release() {
	tk := r.t
	if tk == nil {
		return
	}
	b := tk.V.b
	b.mu.Lock()
	if tk.Gen() == r.gen {
		b.giveBack(tk)
		if b.line.Len() > 0 {
			b.settle()
		}
	}
	b.mu.Unlock()
}

// Reserve waits until n bytes fit in the budget, in k's credential share and
// in k's tenant share, and grants them. The caller must Release the result.
//
//   - n = 0 grants an empty reservation at once; n < 0 is an error.
//   - n larger than the credential share, the tenant share or the budget is
//     refused at once, never after waiting, with a *TooLargeError.
//   - A reservation that cannot be granted waits in line (see the package
//     documentation for the order) for at most Config.Wait, then is refused with
//     a *BusyError.
//   - If ctx ends while waiting, Reserve returns ctx.Err() and gives up its
//     place in line. ctx is not consulted when the reservation fits at once.
func (b *Budget) Reserve(ctx context.Context, k Key, n int64) (Reservation, error) {
	return b.reserve(ctx, k, n, false)
}

// reserve is Reserve; with wantBuf the granted ticket takes a pooled buffer
// of n bytes if there is one (ReserveBuffer).
func (b *Budget) reserve(ctx context.Context, k Key, n int64, wantBuf bool) (Reservation, error) {
	if n <= 0 {
		if n == 0 {
			return Reservation{}, nil
		}
		return Reservation{}, fmt.Errorf("budget: reserve %d bytes: negative size", n)
	}
	if n > b.credCap || n > b.tenantCap || n > b.total {
		return Reservation{}, b.refuseTooLarge(n)
	}
	b.mu.Lock()
	c := b.creds.Get(k.Credential)
	t := b.tenants.Get(k.Tenant)
	why := b.place(&c.V, &t.V, n)
	if why == kindFits {
		tk := b.newTicket(c, t, n, wantBuf)
		b.take(tk)
		gen := tk.Gen()
		b.mu.Unlock()
		return Reservation{t: tk, gen: gen, n: n}, nil
	}
	return b.await(ctx, c, t, n, wantBuf, why)
}

// refuseTooLarge counts and builds the error for a reservation no share can hold.
func (b *Budget) refuseTooLarge(n int64) error {
	limit, k := b.credCap, kindCredential
	if b.tenantCap < limit {
		limit, k = b.tenantCap, kindTenant
	}
	if b.total < limit {
		limit, k = b.total, kindBudget
	}
	b.mu.Lock()
	b.tooLarge[k]++
	b.mu.Unlock()
	return &TooLargeError{N: n, Limit: limit, Share: k.String()}
}

// await queues a reservation that place could not grant and waits for it.
// b.mu is held on entry and released before waiting.
func (b *Budget) await(ctx context.Context, c, t *share, n int64, wantBuf bool, why kind) (Reservation, error) {
	if err := ctx.Err(); err != nil {
		// place marked c, t or the budget as if this waiter were queued; it
		// will not be, so work the marks out again.
		b.cancelled++
		b.dropIfIdle(c, &b.creds)
		b.dropIfIdle(t, &b.tenants)
		b.settle()
		b.mu.Unlock()
		return Reservation{}, err
	}
	tk := b.newTicket(c, t, n, wantBuf)
	gen := tk.Gen()
	tk.V.reason = why
	b.enqueue(tk)
	b.waited++
	b.mu.Unlock()

	if err := fairq.Await(ctx, (*waiting)(b), tk, b.wait); err != nil {
		return Reservation{}, err
	}
	return Reservation{t: tk, gen: gen, n: n}, nil
}

// waiting is a Budget as fairq.Await sees it.
type waiting Budget

func (w *waiting) Lock()   { w.mu.Lock() }
func (w *waiting) Unlock() { w.mu.Unlock() }

// Undo gives back a reservation granted as its waiter's ctx ended.
func (w *waiting) Undo(tk *ticket) {
	b := (*Budget)(w)
	b.cancelled++
	b.granted-- // counted by take, but not handed out after all
	b.giveBack(tk)
	if b.line.Len() > 0 {
		b.settle()
	}
}

// Leave takes a waiter that gave up out of line and returns the *BusyError
// of one whose wait ran out.
func (w *waiting) Leave(tk *ticket, waited time.Duration, expired bool) error {
	b := (*Budget)(w)
	c, t, n, reason := tk.V.cred, tk.V.tenant, tk.V.n, tk.V.reason
	b.dequeue(tk)
	b.dropIfIdle(c, &b.creds)
	b.dropIfIdle(t, &b.tenants)
	b.recycle(tk)
	// This waiter may have held others back, and its marks must go even when
	// the line is now empty.
	b.settle()
	if !expired {
		b.cancelled++
		return nil
	}
	b.busy[reason]++
	return &BusyError{RetryAfter: RetryAfter, Share: reason.String(), N: n, Waited: waited}
}

// place decides for a reservation standing at the end of the line: it fits,
// or the kind of share that holds it back. Called for each waiter in turn by
// settle, and for a new reservation (which arrives after every waiter), it
// sets the marks that make later reservations of a held-back key queue behind
// it, and b.blocked when the budget as a whole holds a waiter back.
func (b *Budget) place(c, t *keyShare, n int64) kind {
	e := b.epoch
	switch {
	case c.mark == e: // an earlier reservation of this credential waits
		return kindCredential
	case t.mark == e: // an earlier reservation of this tenant waits for its share
		c.mark = e
		return kindTenant
	case c.held+n > b.credCap:
		c.mark = e
		return kindCredential
	case t.held+n > b.tenantCap:
		c.mark, t.mark = e, e
		return kindTenant
	case b.blocked || b.reserved+n > b.total:
		b.blocked = true
		return kindBudget
	}
	return kindFits
}

// settle walks the waiters oldest first, grants each that place says fits and
// records why the others wait. It runs whenever room may have appeared or a
// waiter left, so between calls no queued waiter could be granted.
func (b *Budget) settle() {
	b.epoch++
	b.blocked = false
	for w := b.line.Front(); w != nil; {
		next := w.Next()
		why := b.place(&w.V.cred.V, &w.V.tenant.V, w.V.n)
		if why == kindFits {
			b.dequeue(w)
			b.take(w)
			w.Grant()
		} else {
			w.V.reason = why
		}
		w = next
	}
}

// take grants tk's bytes.
func (b *Budget) take(tk *ticket) {
	s := &tk.V
	s.cred.V.held += s.n
	s.tenant.V.held += s.n
	b.reserved += s.n
	if b.reserved > b.highWater {
		b.highWater = b.reserved
	}
	b.live++
	b.granted++
	if s.wantBuf {
		s.buf = b.popBuffer(s.n)
	}
	if b.pooledBytes > 0 && b.reserved+b.pooledBytes > b.total {
		b.makeRoom()
	}
}

// giveBack credits a granted ticket, pools its buffer and retires it.
func (b *Budget) giveBack(tk *ticket) {
	buf := tk.V.buf
	b.credit(tk)
	if buf != nil {
		b.pushBuffer(buf)
	}
	b.recycle(tk)
}

// credit returns a granted ticket's bytes and drops shares that fall idle.
func (b *Budget) credit(tk *ticket) {
	s := &tk.V
	s.cred.V.held -= s.n
	s.tenant.V.held -= s.n
	b.reserved -= s.n
	b.live--
	b.dropIfIdle(s.cred, &b.creds)
	b.dropIfIdle(s.tenant, &b.tenants)
}

func (b *Budget) enqueue(tk *ticket) {
	b.line.Push(tk)
	tk.V.cred.V.waiters++
	tk.V.tenant.V.waiters++
}

func (b *Budget) dequeue(tk *ticket) {
	b.line.Remove(tk)
	tk.V.cred.V.waiters--
	tk.V.tenant.V.waiters--
}

// dropIfIdle puts s on its table's idle list once it holds nothing and has
// no waiters.
func (b *Budget) dropIfIdle(s *share, tab *fairq.Table[keyShare]) {
	if s.V.held == 0 && s.V.waiters == 0 {
		s.V.mark = 0
		tab.SetIdle(s)
	}
}

func (b *Budget) newTicket(c, t *share, n int64, wantBuf bool) *ticket {
	tk, isNew := b.tickets.Get()
	if isNew {
		tk.V.b = b
	}
	tk.V.n, tk.V.cred, tk.V.tenant, tk.V.wantBuf = n, c, t, wantBuf
	return tk
}

// recycle retires tk: stale Reservations that point at it no longer match its
// generation.
func (b *Budget) recycle(tk *ticket) {
	s := &tk.V
	s.n, s.cred, s.tenant, s.wantBuf, s.buf, s.reason = 0, nil, nil, false, nil, 0
	b.tickets.Retire(tk)
}

// Held reports the bytes k's credential and k's tenant hold now.
func (b *Budget) Held(k Key) (credentialBytes, tenantBytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.creds.Find(k.Credential); c != nil {
		credentialBytes = c.V.held
	}
	if t := b.tenants.Find(k.Tenant); t != nil {
		tenantBytes = t.V.held
	}
	return credentialBytes, tenantBytes
}

// ByShare counts events by the share kind they concern.
type ByShare struct {
	Budget     uint64 // ShareBudget
	Credential uint64 // ShareCredential
	Tenant     uint64 // ShareTenant
}

func byShare(a [numKinds]uint64) ByShare {
	return ByShare{Budget: a[kindBudget], Credential: a[kindCredential], Tenant: a[kindTenant]}
}

// Stats is a snapshot of a Budget, for metrics. Counters count since New.
// Nothing is broken down per key.
type Stats struct {
	TotalBytes      int64 // the budget
	CredentialBytes int64 // one credential's share of it
	TenantBytes     int64 // one tenant's share of it

	ReservedBytes  int64 // held now
	HighWaterBytes int64 // the most ever held at once
	Reservations   int   // granted and not yet released
	Waiting        int   // queued now
	Credentials    int   // credentials holding bytes or waiting now
	Tenants        int   // tenants holding bytes or waiting now

	Granted   uint64  // reservations granted, at once or after waiting
	Waited    uint64  // reservations that had to queue, whatever came of it
	Cancelled uint64  // reservations whose ctx ended before they were granted
	Busy      ByShare // refused with *BusyError, by the share that held them back
	TooLarge  ByShare // refused with *TooLargeError, by the binding share

	PooledBytes        int64  // released buffers kept for reuse now (not reserved)
	BufferHits         uint64 // ReserveBuffer calls served from the pool
	BufferMisses       uint64 // ReserveBuffer calls that allocated
	BufferDroppedBytes int64  // pooled bytes dropped to make room or by TrimBuffers
}

// Stats returns a snapshot of b.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{
		TotalBytes:      b.total,
		CredentialBytes: b.credCap,
		TenantBytes:     b.tenantCap,
		ReservedBytes:   b.reserved,
		HighWaterBytes:  b.highWater,
		Reservations:    b.live,
		Waiting:         b.line.Len(),
		Credentials:     b.creds.Active(),
		Tenants:         b.tenants.Active(),
		Granted:         b.granted,
		Waited:          b.waited,
		Cancelled:       b.cancelled,
		Busy:            byShare(b.busy),
		TooLarge:        byShare(b.tooLarge),

		PooledBytes:        b.pooledBytes,
		BufferHits:         b.bufferHits,
		BufferMisses:       b.bufferMisses,
		BufferDroppedBytes: b.bufferDropped,
	}
}
