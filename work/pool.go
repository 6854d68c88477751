package work

import (
	"context"
	"sync"
	"time"

	"openxet/fairq"
)

// Pool is a node's work slots, shared fairly among tenants. Create it with
// New (the zero Pool is not usable); it is safe for concurrent use and
// needs no Close (it owns no goroutines).
type Pool struct {
	// Fixed by New.
	slots     int
	tenantCap int
	wait      time.Duration

	mu   sync.Mutex
	held int // slots granted and not yet released
	peak int
	// The entries of tenants; those that fell idle stay for reuse
	// (fairq.Table).
	tenants fairq.Table[tenant]
	// ring is the next tenant to be served, in a circular list of the
	// tenants that have waiters; nil when nobody waits.
	ring    *entry
	waiting int

	tickets fairq.Tickets[slot]

	granted, waited, cancelled, busy uint64
}

// tenant is what one tenant holds and its line of waiters, oldest first.
// Its entry is idle while both are empty.
type tenant struct {
	held int
	line fairq.Line[slot]
	// Ring links while the line is not empty.
	prev, next *entry
}

// entry is the entry of one tenant.
type entry = fairq.Entry[tenant]

// slot is what a ticket of the pool carries: a waiter and then, once
// granted, the slot itself.
type slot struct {
	p *Pool // set once, when the ticket is made
	t *entry
}

// ticket is a waiter or a granted slot. Tickets are recycled; their
// generation tells a live Slot from a stale copy.
type ticket = fairq.Ticket[slot]

// New returns a Pool for c, with zero fields taken as their defaults. It
// does no I/O and starts no goroutines. The caller should have checked c
// with Validate; New clamps what Validate would refuse rather than fail.
func New(c Config) *Pool {
	c = c.WithDefaults()
	if c.Wait < 0 {
		c.Wait = 0
	}
	return &Pool{
		slots:     min(max(c.Slots, 1), MaxSlots),
		tenantCap: c.TenantSlots(),
		wait:      c.Wait,
	}
}

// TenantSlots is how many slots one tenant may hold at once.
func (p *Pool) TenantSlots() int { return p.tenantCap }

// Slot is a slot granted by Acquire. Release it exactly once, on every
// path, when the section of work ends (typically `defer s.Release()`).
// Releasing again, from the same variable or any copy, is a no-op. The
// zero value is no slot; its Release does nothing.
type Slot struct {
	t   *ticket
	gen uint64
}

// Release gives the slot back and grants it to the next waiter in turn.
// Only the first Release of a slot (or of any copy) has an effect.
func (s *Slot) Release() {
	tk := s.t
	if tk == nil {
		return
	}
	p := tk.V.p
	p.mu.Lock()
	if tk.Gen() == s.gen {
		p.credit(tk)
		p.recycle(tk)
		if p.ring != nil {
			p.dispatch()
		}
	}
	p.mu.Unlock()
}

// Acquire waits for a slot for tenantKey (any string, the empty one
// included) and grants it; the caller must Release it. It waits, in the
// order the package documentation describes, for at most Config.Wait, then
// returns a *BusyError; if ctx ends first it returns ctx.Err() and gives up
// its place. ctx is not consulted when a slot is granted at once.
func (p *Pool) Acquire(ctx context.Context, tenantKey string) (Slot, error) {
	return p.acquire(ctx, tenantKey, true)
}

// AcquireUntilDone is Acquire without Config.Wait: it waits in the same
// order until a slot is granted or ctx ends. It is for work that cannot be
// refused any more, such as the next piece of an answer already under way.
func (p *Pool) AcquireUntilDone(ctx context.Context, tenantKey string) (Slot, error) {
	return p.acquire(ctx, tenantKey, false)
}

func (p *Pool) acquire(ctx context.Context, tenantKey string, bounded bool) (Slot, error) {
	p.mu.Lock()
	t := p.tenants.Get(tenantKey)
	if p.held < p.slots && t.V.held < p.tenantCap && t.V.line.Len() == 0 {
		tk := p.newTicket(t)
		p.take(tk)
		gen := tk.Gen()
		p.mu.Unlock()
		return Slot{t: tk, gen: gen}, nil
	}
	if err := ctx.Err(); err != nil {
		p.cancelled++
		p.dropIfIdle(t)
		p.mu.Unlock()
		return Slot{}, err
	}
	tk := p.newTicket(t)
	gen := tk.Gen()
	p.enqueue(tk)
	p.waited++
	p.mu.Unlock()

	wait := p.wait
	if !bounded {
		wait = -1 // never
	}
	if err := fairq.Await(ctx, (*waiting)(p), tk, wait); err != nil {
		return Slot{}, err
	}
	return Slot{t: tk, gen: gen}, nil
}

// waiting is a Pool as fairq.Await sees it.
type waiting Pool

func (w *waiting) Lock()   { w.mu.Lock() }
func (w *waiting) Unlock() { w.mu.Unlock() }

// Undo gives back a slot granted as its waiter's ctx ended.
func (w *waiting) Undo(tk *ticket) {
	p := (*Pool)(w)
	p.cancelled++
	p.granted-- // counted by take, but not handed out after all
	p.credit(tk)
	p.recycle(tk)
	if p.ring != nil {
		p.dispatch()
	}
}

// Leave takes a waiter that gave up out of its line and returns the
// *BusyError of one whose wait ran out.
func (w *waiting) Leave(tk *ticket, waited time.Duration, expired bool) error {
	p := (*Pool)(w)
	t := tk.V.t
	atShare := t.V.held >= p.tenantCap
	p.dequeue(tk)
	p.dropIfIdle(t)
	p.recycle(tk)
	if p.ring != nil {
		p.dispatch()
	}
	if !expired {
		p.cancelled++
		return nil
	}
	p.busy++
	return &BusyError{RetryAfter: RetryAfter, AtShare: atShare, Waited: waited}
}

// dispatch grants free slots to waiters: it walks the ring from its cursor
// and gives each tenant below its share one slot for its oldest waiter,
// moving the cursor past it, until no slot is free or every tenant in the
// ring holds its share. Between calls, no waiter could be granted.
func (p *Pool) dispatch() {
	for p.held < p.slots && p.ring != nil {
		// Find the next tenant in turn that is below its share. At most
		// slots/tenantCap tenants can be at their share, so the walk is short.
		t, start := p.ring, p.ring
		for t.V.held >= p.tenantCap {
			t = t.V.next
			if t == start {
				return
			}
		}
		tk := t.V.line.Front()
		p.ring = t.V.next // t goes to the back of the ring
		p.dequeue(tk)
		p.take(tk)
		tk.Grant()
	}
}

// take grants tk its slot.
func (p *Pool) take(tk *ticket) {
	tk.V.t.V.held++
	p.held++
	p.peak = max(p.peak, p.held)
	p.granted++
}

// credit returns a granted ticket's slot and drops its tenant if idle.
func (p *Pool) credit(tk *ticket) {
	tk.V.t.V.held--
	p.held--
	p.dropIfIdle(tk.V.t)
}

// enqueue puts tk at the end of its tenant's line; a tenant that had no
// waiter joins the ring behind every tenant already in it.
func (p *Pool) enqueue(tk *ticket) {
	t := tk.V.t
	t.V.line.Push(tk)
	p.waiting++
	if t.V.line.Len() == 1 {
		p.joinRing(t)
	}
}

// dequeue takes a waiter out of its tenant's line; a tenant left without
// waiters leaves the ring.
func (p *Pool) dequeue(tk *ticket) {
	t := tk.V.t
	t.V.line.Remove(tk)
	p.waiting--
	if t.V.line.Len() == 0 {
		p.leaveRing(t)
	}
}

// joinRing inserts t just before the cursor: last in the current turn.
func (p *Pool) joinRing(t *entry) {
	if p.ring == nil {
		t.V.prev, t.V.next = t, t
		p.ring = t
		return
	}
	last := p.ring.V.prev
	t.V.prev, t.V.next = last, p.ring
	last.V.next = t
	p.ring.V.prev = t
}

func (p *Pool) leaveRing(t *entry) {
	if t.V.next == t {
		p.ring = nil
	} else {
		t.V.prev.V.next = t.V.next
		t.V.next.V.prev = t.V.prev
		if p.ring == t {
			p.ring = t.V.next
		}
	}
	t.V.prev, t.V.next = nil, nil
}

// dropIfIdle puts t on the idle list once it holds nothing and nobody of
// it waits.
func (p *Pool) dropIfIdle(t *entry) {
	if t.V.held == 0 && t.V.line.Len() == 0 {
		p.tenants.SetIdle(t)
	}
}

func (p *Pool) newTicket(t *entry) *ticket {
	tk, isNew := p.tickets.Get()
	if isNew {
		tk.V.p = p
	}
	tk.V.t = t
	return tk
}

// recycle retires tk: stale Slots that point at it no longer match its
// generation.
func (p *Pool) recycle(tk *ticket) {
	tk.V.t = nil
	p.tickets.Retire(tk)
}

// Held reports how many slots tenantKey holds now.
func (p *Pool) Held(tenantKey string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tenants.Find(tenantKey); t != nil {
		return t.V.held
	}
	return 0
}

// Stats is a snapshot of a Pool, for metrics. Counters count since New.
type Stats struct {
	Slots       int // the node's slots
	TenantSlots int // one tenant's share of them

	Held     int // granted and not yet released, now
	Peak     int // the most ever held at once
	Waiting  int // queued now
	Tenants  int // tenants holding a slot or waiting now
	Granted  uint64
	Waited   uint64 // requests that had to queue, whatever came of it
	Canceled uint64 // requests whose ctx ended before they were granted
	Busy     uint64 // refused with *BusyError
}

// Stats returns a snapshot of p.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Slots: p.slots, TenantSlots: p.tenantCap,
		Held: p.held, Peak: p.peak, Waiting: p.waiting, Tenants: p.tenants.Active(),
		Granted: p.granted, Waited: p.waited, Canceled: p.cancelled, Busy: p.busy,
	}
}
