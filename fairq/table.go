package fairq

import "iter"

// MaxIdle bounds the idle entries a Table keeps for reuse.
const MaxIdle = 256

// Entry is one key's entry in a Table. V is the owner's data (what the key
// holds, its waiters).
type Entry[E any] struct {
	V E

	key                string
	idle               bool
	idlePrev, idleNext *Entry[E]
}

// Key is the key the entry is for.
func (e *Entry[E]) Key() string { return e.key }

// Idle reports whether the entry is on its table's idle list.
func (e *Entry[E]) Idle() bool { return e.idle }

// Table is the entries of the keys in use, and up to MaxIdle that fell
// idle, kept for reuse with the oldest leaving first: a key that comes
// back finds its entry instead of inserting and deleting one per request,
// and the memory it uses is bounded by what is in use plus that constant.
// The zero value is empty and ready.
type Table[E any] struct {
	m                  map[string]*Entry[E]
	idleHead, idleTail *Entry[E]
	idle               int
	free               []*Entry[E]
}

// Get returns key's entry, taking it off the idle list, or a new one with
// a zero V if key has none.
func (t *Table[E]) Get(key string) *Entry[E] {
	if e := t.m[key]; e != nil {
		if e.idle {
			t.unidle(e)
		}
		return e
	}
	if t.m == nil {
		t.m = make(map[string]*Entry[E])
	}
	var e *Entry[E]
	if n := len(t.free); n > 0 {
		e = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		e = new(Entry[E])
	}
	e.key = key
	t.m[key] = e
	return e
}

// Find returns key's entry, idle or not, or nil; it changes nothing.
func (t *Table[E]) Find(key string) *Entry[E] { return t.m[key] }

// SetIdle puts e, which the owner found to hold nothing and wait for
// nothing, at the end of the idle list, unless it is there already. When
// the list is over MaxIdle its oldest entry leaves the table.
func (t *Table[E]) SetIdle(e *Entry[E]) {
	if e.idle {
		return
	}
	e.idle, e.idlePrev, e.idleNext = true, t.idleTail, nil
	if t.idleTail != nil {
		t.idleTail.idleNext = e
	} else {
		t.idleHead = e
	}
	t.idleTail = e
	t.idle++
	if t.idle <= MaxIdle {
		return
	}
	old := t.idleHead
	t.unidle(old)
	delete(t.m, old.key)
	if len(t.free) < MaxFree {
		*old = Entry[E]{}
		t.free = append(t.free, old)
	}
}

func (t *Table[E]) unidle(e *Entry[E]) {
	if e.idlePrev != nil {
		e.idlePrev.idleNext = e.idleNext
	} else {
		t.idleHead = e.idleNext
	}
	if e.idleNext != nil {
		e.idleNext.idlePrev = e.idlePrev
	} else {
		t.idleTail = e.idlePrev
	}
	e.idle, e.idlePrev, e.idleNext = false, nil, nil
	t.idle--
}

// Len is how many entries the table holds, idle ones included.
func (t *Table[E]) Len() int { return len(t.m) }

// Active is how many entries are in use: not idle.
func (t *Table[E]) Active() int { return len(t.m) - t.idle }

// All yields every entry, idle ones included, in no particular order.
func (t *Table[E]) All() iter.Seq[*Entry[E]] {
	return func(yield func(*Entry[E]) bool) {
		for _, e := range t.m {
			if !yield(e) {
				return
			}
		}
	}
}
