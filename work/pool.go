package work

import (
	"context"
	"sync"
	"time"
)

// Pool is a node's work slots, shared fairly among tenants. Create it with
// New (the zero Pool is not usable); it is safe for concurrent use and
// needs no Close (it owns no goroutines).
type Pool struct {
	// Fixed by New.
	slots     int
	tenantCap int
	wait      time.Duration

	mu      sync.Mutex
	held    int // slots granted and not yet released
	peak    int
	tenants map[string]*tenant
	// Entries of tenants that hold nothing and wait for nothing stay in
	// the map for reuse, oldest first, at most maxIdle: a tenant that comes
	// back finds its entry instead of inserting and deleting one per slot.
	idleHead, idleTail *tenant
	idle               int
	// ring is the next tenant to be served, in a circular list of the
	// tenants that have waiters; nil when nobody waits.
	ring    *tenant
	waiting int

	freeTickets []*ticket
	freeTenants []*tenant

	granted, waited, cancelled, busy uint64
}

// tenant is what one tenant holds and its line of waiters, oldest first.
// It lives in its map while either is non-empty.
type tenant struct {
	key        string
	held       int
	head, tail *ticket
	waiters    int
	// Ring links while waiters > 0.
	prev, next *tenant
	// Idle-list links while it holds and waits for nothing.
	isIdle             bool
	idlePrev, idleNext *tenant
}

// ticket is a waiter and then, once granted, the slot itself. Tickets are
// recycled; gen tells a live Slot from a stale copy.
type ticket struct {
	p   *Pool
	gen uint64
	t   *tenant

	// While waiting: the tenant's line.
	prev, next *ticket
	ready      chan struct{} // closed when granted
	granted    bool
}

// maxFree bounds the recycled tickets and tenants kept for reuse, maxIdle
// the idle entries kept in the map.
const (
	maxFree = 256
	maxIdle = 256
)

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
		tenants:   make(map[string]*tenant),
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
	p := tk.p
	p.mu.Lock()
	if tk.gen == s.gen {
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
	t := p.tenant(tenantKey)
	if p.held < p.slots && t.held < p.tenantCap && t.waiters == 0 {
		tk := p.newTicket(t)
		p.take(tk)
		gen := tk.gen
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
	gen := tk.gen
	tk.ready = make(chan struct{})
	p.enqueue(tk)
	p.waited++
	p.mu.Unlock()

	start := time.Now()
	var expired <-chan time.Time // nil: never
	if bounded {
		timer := time.NewTimer(p.wait)
		defer timer.Stop()
		expired = timer.C
	}
	timedOut := false
	select {
	case <-tk.ready:
		return Slot{t: tk, gen: gen}, nil
	case <-expired:
		timedOut = true
	case <-ctx.Done():
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if tk.granted {
		// Granted in the instant the wait ended.
		if timedOut {
			return Slot{t: tk, gen: gen}, nil
		}
		p.cancelled++
		p.granted-- // counted by take, but not handed out after all
		p.credit(tk)
		p.recycle(tk)
		if p.ring != nil {
			p.dispatch()
		}
		return Slot{}, ctx.Err()
	}
	atShare := t.held >= p.tenantCap
	p.dequeue(tk)
	p.dropIfIdle(t)
	p.recycle(tk)
	if p.ring != nil {
		p.dispatch()
	}
	if !timedOut {
		p.cancelled++
		return Slot{}, ctx.Err()
	}
	p.busy++
	return Slot{}, &BusyError{RetryAfter: RetryAfter, AtShare: atShare, Waited: time.Since(start)}
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
		for t.held >= p.tenantCap {
			t = t.next
			if t == start {
				return
			}
		}
		tk := t.head
		p.ring = t.next // t goes to the back of the ring
		p.dequeue(tk)
		p.take(tk)
		tk.granted = true
		close(tk.ready)
	}
}

// take grants tk its slot.
func (p *Pool) take(tk *ticket) {
	tk.t.held++
	p.held++
	p.peak = max(p.peak, p.held)
	p.granted++
}

// credit returns a granted ticket's slot and drops its tenant if idle.
func (p *Pool) credit(tk *ticket) {
	tk.t.held--
	p.held--
	p.dropIfIdle(tk.t)
}

// enqueue puts tk at the end of its tenant's line; a tenant that had no
// waiter joins the ring behind every tenant already in it.
func (p *Pool) enqueue(tk *ticket) {
	t := tk.t
	tk.prev = t.tail
	if t.tail != nil {
		t.tail.next = tk
	} else {
		t.head = tk
	}
	t.tail = tk
	t.waiters++
	p.waiting++
	if t.waiters == 1 {
		p.joinRing(t)
	}
}

// dequeue takes a waiter out of its tenant's line; a tenant left without
// waiters leaves the ring.
func (p *Pool) dequeue(tk *ticket) {
	t := tk.t
	if tk.prev != nil {
		tk.prev.next = tk.next
	} else {
		t.head = tk.next
	}
	if tk.next != nil {
		tk.next.prev = tk.prev
	} else {
		t.tail = tk.prev
	}
	tk.prev, tk.next = nil, nil
	t.waiters--
	p.waiting--
	if t.waiters == 0 {
		p.leaveRing(t)
	}
}

// joinRing inserts t just before the cursor: last in the current turn.
func (p *Pool) joinRing(t *tenant) {
	if p.ring == nil {
		t.prev, t.next = t, t
		p.ring = t
		return
	}
	last := p.ring.prev
	t.prev, t.next = last, p.ring
	last.next = t
	p.ring.prev = t
}

func (p *Pool) leaveRing(t *tenant) {
	if t.next == t {
		p.ring = nil
	} else {
		t.prev.next = t.next
		t.next.prev = t.prev
		if p.ring == t {
			p.ring = t.next
		}
	}
	t.prev, t.next = nil, nil
}

// tenant returns the entry for key, creating it if absent.
func (p *Pool) tenant(key string) *tenant {
	if t := p.tenants[key]; t != nil {
		if t.isIdle {
			p.unidle(t)
		}
		return t
	}
	var t *tenant
	if n := len(p.freeTenants); n > 0 {
		t = p.freeTenants[n-1]
		p.freeTenants = p.freeTenants[:n-1]
	} else {
		t = new(tenant)
	}
	t.key = key
	p.tenants[key] = t
	return t
}

// dropIfIdle puts t on the idle list once it holds nothing and nobody of
// it waits, and removes the oldest idle entry from the map when the list
// is over maxIdle.
func (p *Pool) dropIfIdle(t *tenant) {
	if t.held != 0 || t.waiters != 0 || t.isIdle {
		return
	}
	t.isIdle, t.idlePrev, t.idleNext = true, p.idleTail, nil
	if p.idleTail != nil {
		p.idleTail.idleNext = t
	} else {
		p.idleHead = t
	}
	p.idleTail = t
	p.idle++
	if p.idle <= maxIdle {
		return
	}
	old := p.idleHead
	p.unidle(old)
	delete(p.tenants, old.key)
	if len(p.freeTenants) < maxFree {
		*old = tenant{}
		p.freeTenants = append(p.freeTenants, old)
	}
}

// unidle takes t off the idle list.
func (p *Pool) unidle(t *tenant) {
	if t.idlePrev != nil {
		t.idlePrev.idleNext = t.idleNext
	} else {
		p.idleHead = t.idleNext
	}
	if t.idleNext != nil {
		t.idleNext.idlePrev = t.idlePrev
	} else {
		p.idleTail = t.idlePrev
	}
	t.isIdle, t.idlePrev, t.idleNext = false, nil, nil
	p.idle--
}

func (p *Pool) newTicket(t *tenant) *ticket {
	var tk *ticket
	if n := len(p.freeTickets); n > 0 {
		tk = p.freeTickets[n-1]
		p.freeTickets = p.freeTickets[:n-1]
	} else {
		tk = &ticket{p: p, gen: 1}
	}
	tk.t = t
	return tk
}

// recycle retires tk: stale Slots that point at it no longer match its
// generation.
func (p *Pool) recycle(tk *ticket) {
	tk.gen++
	tk.t, tk.prev, tk.next, tk.ready, tk.granted = nil, nil, nil, nil, false
	if len(p.freeTickets) < maxFree {
		p.freeTickets = append(p.freeTickets, tk)
	}
}

// Held reports how many slots tenantKey holds now.
func (p *Pool) Held(tenantKey string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tenants[tenantKey]; t != nil {
		return t.held
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
		Held: p.held, Peak: p.peak, Waiting: p.waiting, Tenants: len(p.tenants) - p.idle,
		Granted: p.granted, Waited: p.waited, Canceled: p.cancelled, Busy: p.busy,
	}
}
