package fairq

import (
	"context"
	"sync"
	"time"
)

// MaxFree bounds the recycled tickets a Tickets keeps, and the recycled
// entries a Table keeps besides its idle ones.
const MaxFree = 256

// Ticket is one request: queued in a Line while it waits, then, once
// granted, the holder's handle. V is the owner's data (size, keys, a
// pointer back to the owner). Tickets are recycled; Gen tells a live
// handle from a stale copy: a handle records Gen when handed out, and a
// Release that finds another generation does nothing.
type Ticket[T any] struct {
	V T

	gen        uint64
	prev, next *Ticket[T]
	ready      chan struct{} // closed by Grant; nil unless the ticket waits
	granted    bool
}

// Gen is the ticket's generation: it changes when the ticket is retired.
func (tk *Ticket[T]) Gen() uint64 { return tk.gen }

// Next is the ticket behind tk in its Line, or nil.
func (tk *Ticket[T]) Next() *Ticket[T] { return tk.next }

// Granted reports whether Grant was called since the ticket last waited.
func (tk *Ticket[T]) Granted() bool { return tk.granted }

// Grant marks a waiting ticket granted and wakes its waiter in Await. The
// owner takes tk out of its Line first.
func (tk *Ticket[T]) Grant() {
	tk.granted = true
	close(tk.ready)
}

// Tickets is a free list of tickets, at most MaxFree. The zero value is
// empty and ready.
type Tickets[T any] struct {
	free []*Ticket[T]
}

// Get returns a retired ticket, its V as the owner left it, or a new one
// with a zero V and isNew true: the owner then sets the fields of V that
// never change (a pointer back to the owner, read without the lock by a
// handle's Release).
func (f *Tickets[T]) Get() (tk *Ticket[T], isNew bool) {
	if n := len(f.free); n > 0 {
		tk = f.free[n-1]
		f.free = f.free[:n-1]
		return tk, false
	}
	return &Ticket[T]{gen: 1}, true
}

// Retire ends tk's generation, so that handles of it no longer match, and
// keeps it for Get. tk must be out of every Line; the owner clears what
// of V it must first.
func (f *Tickets[T]) Retire(tk *Ticket[T]) {
	tk.gen++
	tk.prev, tk.next, tk.ready, tk.granted = nil, nil, nil, false
	if len(f.free) < MaxFree {
		f.free = append(f.free, tk)
	}
}

// Line is a first-in first-out line of tickets. The zero value is empty.
type Line[T any] struct {
	head, tail *Ticket[T]
	n          int
}

// Front is the oldest ticket in l, or nil.
func (l *Line[T]) Front() *Ticket[T] { return l.head }

// Len is how many tickets l holds.
func (l *Line[T]) Len() int { return l.n }

// Push puts tk at the back of l and makes it a waiter that Grant can wake.
func (l *Line[T]) Push(tk *Ticket[T]) {
	tk.ready = make(chan struct{})
	tk.prev, tk.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = tk
	} else {
		l.head = tk
	}
	l.tail = tk
	l.n++
}

// Remove takes tk, which must be in l, out of it.
func (l *Line[T]) Remove(tk *Ticket[T]) {
	if tk.prev != nil {
		tk.prev.next = tk.next
	} else {
		l.head = tk.next
	}
	if tk.next != nil {
		tk.next.prev = tk.prev
	} else {
		l.tail = tk.prev
	}
	tk.prev, tk.next = nil, nil
	l.n--
}

// Owner is what Await needs of the queue a ticket waits in. Await calls
// Undo and Leave with the lock held.
type Owner[T any] interface {
	sync.Locker
	// Undo gives back tk, granted in the instant its waiter gave up
	// because ctx ended, as a release would, and retires it.
	Undo(tk *Ticket[T])
	// Leave takes tk, still waiting, out of its line, retires it and
	// reconsiders whoever it held back. When expired is true the wait ran
	// out after waited, and Leave returns the error the waiter returns
	// (the owner's busy error); otherwise ctx ended, and its result is
	// ignored.
	Leave(tk *Ticket[T], waited time.Duration, expired bool) error
}

// Await waits, without the lock, for tk, pushed into a Line by the caller
// and the lock then released, to be granted, for wait to pass (never, if
// wait is negative) or for ctx to end. It returns nil when tk is granted:
// the caller holds it. It returns ctx.Err() if ctx ended first, after
// Owner.Undo if a grant came in the same instant; and Owner.Leave's error
// if wait passed first. A grant in the instant wait passes is kept.
func Await[T any](ctx context.Context, o Owner[T], tk *Ticket[T], wait time.Duration) error {
	start := time.Now()
	var expire <-chan time.Time // nil: never
	if wait >= 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		expire = timer.C
	}
	expired := false
	select {
	case <-tk.ready:
		return nil
	case <-expire:
		expired = true
	case <-ctx.Done():
	}

	o.Lock()
	defer o.Unlock()
	if tk.granted {
		if expired {
			return nil
		}
		o.Undo(tk)
		return ctx.Err()
	}
	err := o.Leave(tk, time.Since(start), expired)
	if !expired {
		return ctx.Err()
	}
	return err
}
