package fairq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// names lists the V of l's tickets, front to back.
func names(l *Line[string]) []string {
	var got []string
	for tk := l.Front(); tk != nil; tk = tk.Next() {
		got = append(got, tk.V)
	}
	return got
}

// TestLineOrder: tickets leave a Line in the order they came, whichever
// of them leaves early.
func TestLineOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		push   []string
		remove []string // taken out, in this order, after every push
		want   []string
	}{
		{"empty", nil, nil, nil},
		{"one", []string{"a"}, nil, []string{"a"}},
		{"arrival order", []string{"a", "b", "c"}, nil, []string{"a", "b", "c"}},
		{"front leaves", []string{"a", "b", "c"}, []string{"a"}, []string{"b", "c"}},
		{"middle leaves", []string{"a", "b", "c"}, []string{"b"}, []string{"a", "c"}},
		{"back leaves", []string{"a", "b", "c"}, []string{"c"}, []string{"a", "b"}},
		{"all leave", []string{"a", "b", "c"}, []string{"b", "a", "c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Line[string]
			var f Tickets[string]
			byName := map[string]*Ticket[string]{}
			for _, n := range tc.push {
				tk, _ := f.Get()
				tk.V = n // a reused ticket keeps its V
				byName[n] = tk
				l.Push(tk)
			}
			for _, n := range tc.remove {
				l.Remove(byName[n])
				f.Retire(byName[n])
			}
			if got := names(&l); !slices.Equal(got, tc.want) || l.Len() != len(tc.want) {
				t.Errorf("line %v (Len %d), want %v", got, l.Len(), tc.want)
			}
			// Pushing again after removals goes to the back.
			z, _ := f.Get()
			z.V = "z"
			l.Push(z)
			if got := names(&l); got[len(got)-1] != "z" || l.Len() != len(tc.want)+1 {
				t.Errorf("after a push: %v (Len %d), want %v then z", got, l.Len(), tc.want)
			}
		})
	}
}

// TestTicketGenerations: a retired ticket is reused with a new generation,
// so a handle to its old one no longer matches, and keeps its V; at most
// MaxFree are kept.
func TestTicketGenerations(t *testing.T) {
	var f Tickets[string]
	tk, isNew := f.Get()
	if !isNew || tk.Gen() != 1 || tk.V != "" || tk.Granted() {
		t.Fatalf("new ticket: new %v, gen %d, V %q, granted %v", isNew, tk.Gen(), tk.V, tk.Granted())
	}
	tk.V = "owner"
	var l Line[string]
	l.Push(tk)
	l.Remove(tk)
	tk.Grant()
	handle := tk.Gen()
	f.Retire(tk)
	again, isNew := f.Get()
	if again != tk || isNew || again.Gen() == handle || again.V != "owner" || again.Granted() {
		t.Errorf("reused ticket: same %v, new %v, gen %d (handle %d), V %q, granted %v; want the same ticket, not new, a new generation, V kept, not granted",
			again == tk, isNew, again.Gen(), handle, again.V, again.Granted())
	}
	var many []*Ticket[string]
	for range MaxFree + 10 {
		tk, _ := f.Get()
		many = append(many, tk)
	}
	for _, tk := range many {
		f.Retire(tk)
	}
	if len(f.free) != MaxFree {
		t.Errorf("%d tickets kept, want %d", len(f.free), MaxFree)
	}
}

// TestTableIdle: entries stay while in use, idle ones stay for reuse up
// to MaxIdle with the oldest leaving first, and a key that comes back
// finds its entry as it left it.
func TestTableIdle(t *testing.T) {
	type step struct {
		op     string // "get" or "idle"
		key    string
		active int
		len    int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in use", []step{{"get", "a", 1, 1}, {"get", "b", 2, 2}, {"get", "a", 2, 2}}},
		{"idle stays", []step{{"get", "a", 1, 1}, {"idle", "a", 0, 1}, {"idle", "a", 0, 1}, {"get", "a", 1, 1}}},
		{"idle order", []step{{"get", "a", 1, 1}, {"get", "b", 2, 2}, {"idle", "b", 1, 2}, {"idle", "a", 0, 2}, {"get", "b", 1, 2}, {"idle", "b", 0, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tab Table[int]
			for i, s := range tc.steps {
				switch s.op {
				case "get":
					e := tab.Get(s.key)
					if e.Key() != s.key || e.Idle() {
						t.Fatalf("step %d: Get(%q) = key %q, idle %v", i, s.key, e.Key(), e.Idle())
					}
					e.V++
				case "idle":
					tab.SetIdle(tab.Find(s.key))
				}
				if tab.Active() != s.active || tab.Len() != s.len {
					t.Errorf("step %d (%s %s): active %d, len %d; want %d, %d", i, s.op, s.key, tab.Active(), tab.Len(), s.active, s.len)
				}
				if err := check(&tab); err != nil {
					t.Errorf("step %d: %v", i, err)
				}
			}
		})
	}

	t.Run("bounded", func(t *testing.T) {
		var tab Table[int]
		n := MaxIdle + 10
		for i := range n {
			e := tab.Get(fmt.Sprint(i))
			e.V = i
			tab.SetIdle(e)
		}
		if err := check(&tab); err != nil {
			t.Fatal(err)
		}
		if tab.Len() != MaxIdle || tab.Active() != 0 {
			t.Errorf("len %d, active %d; want %d, 0", tab.Len(), tab.Active(), MaxIdle)
		}
		if tab.Find("0") != nil || tab.Find("9") != nil || tab.Find("10") == nil {
			t.Errorf("the 10 oldest should have left, the 11th stayed")
		}
		// A key that left comes back fresh, one that stayed as it was.
		if e := tab.Get("0"); e.V != 0 {
			t.Errorf("a key that left came back with V %d, want 0", e.V)
		}
		if e := tab.Get(fmt.Sprint(n - 1)); e.V != n-1 {
			t.Errorf("a kept key came back with V %d, want %d", e.V, n-1)
		}
		if err := check(&tab); err != nil {
			t.Error(err)
		}
		var seen int
		for range tab.All() {
			seen++
		}
		if seen != tab.Len() {
			t.Errorf("All yielded %d entries, Len %d", seen, tab.Len())
		}
	})
}

// owner is a queue with one line, for Await: a lock made of a channel
// (so that a goroutine waiting for it is durably blocked in a synctest
// bubble) and a record of what Await asked of it.
type owner struct {
	lk      chan struct{}
	line    Line[string]
	tickets Tickets[string]
	undone  []string
	left    []string
	expired []bool
	waited  []time.Duration
}

var errBusy = errors.New("busy")

func newOwner() *owner { return &owner{lk: make(chan struct{}, 1)} }

func (o *owner) Lock()   { o.lk <- struct{}{} }
func (o *owner) Unlock() { <-o.lk }

func (o *owner) Undo(tk *Ticket[string]) {
	o.undone = append(o.undone, tk.V)
	o.tickets.Retire(tk)
}

func (o *owner) Leave(tk *Ticket[string], waited time.Duration, expired bool) error {
	o.line.Remove(tk)
	o.left = append(o.left, tk.V)
	o.expired = append(o.expired, expired)
	o.waited = append(o.waited, waited)
	o.tickets.Retire(tk)
	return errBusy
}

// queue makes a waiting ticket, as an owner does before Await.
func (o *owner) queue(name string) *Ticket[string] {
	o.Lock()
	defer o.Unlock()
	tk, _ := o.tickets.Get()
	tk.V = name
	o.line.Push(tk)
	return tk
}

// grant grants the oldest waiter, as an owner's release does.
func (o *owner) grant() {
	tk := o.line.Front()
	o.line.Remove(tk)
	tk.Grant()
}

// TestAwait: each way a wait can end, including a grant that comes in the
// same instant as the end of the wait; nothing is given back or taken out
// of line twice.
func TestAwait(t *testing.T) {
	const wait = 10 * time.Second
	for _, tc := range []struct {
		name string
		wait time.Duration
		// end ends the wait, with the lock held; then advance passes.
		end       func(o *owner, cancel context.CancelFunc)
		advance   time.Duration
		wantErr   error
		wantUndo  bool
		wantLeave bool
		expired   bool
		waited    time.Duration
	}{
		{name: "granted", wait: wait, end: func(o *owner, _ context.CancelFunc) { o.grant() }},
		{name: "expired", wait: wait, advance: wait, wantErr: errBusy, wantLeave: true, expired: true, waited: wait},
		{name: "cancelled", wait: wait, end: func(_ *owner, cancel context.CancelFunc) { cancel() },
			wantErr: context.Canceled, wantLeave: true},
		{name: "unbounded never expires", wait: -1, advance: 1000 * wait,
			end: func(_ *owner, cancel context.CancelFunc) { cancel() }, wantErr: context.Canceled, wantLeave: true, waited: 1000 * wait},
		{name: "zero wait expires at once", wait: 0, wantErr: errBusy, wantLeave: true, expired: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := newOwner()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				tk := o.queue("w")
				done := make(chan error, 1)
				go func() { done <- Await(ctx, o, tk, tc.wait) }()
				synctest.Wait()
				<-time.After(tc.advance)
				if tc.end != nil {
					o.Lock()
					tc.end(o, cancel)
					o.Unlock()
				}
				err := <-done
				checkAwait(t, o, err, tc.wantErr, tc.wantUndo, tc.wantLeave, tc.expired, tc.waited)
			})
		})
	}

	// A grant as the wait ends: Await wakes for ctx or the timer, finds
	// the lock held, and the holder grants before letting go.
	for _, tc := range []struct {
		name     string
		expire   bool // the timer ends the wait; else ctx does
		wantErr  error
		wantUndo bool
	}{
		{"granted as ctx ends: undone", false, context.Canceled, true},
		{"granted as the wait expires: kept", true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := newOwner()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				tk := o.queue("w")
				done := make(chan error, 1)
				go func() { done <- Await(ctx, o, tk, wait) }()
				synctest.Wait()
				o.Lock()
				if tc.expire {
					<-time.After(wait)
				} else {
					cancel()
				}
				synctest.Wait() // Await has woken and waits for the lock
				o.grant()
				o.Unlock()
				err := <-done
				checkAwait(t, o, err, tc.wantErr, tc.wantUndo, false, false, 0)
			})
		})
	}
}

func checkAwait(t *testing.T, o *owner, err, wantErr error, wantUndo, wantLeave, expired bool, waited time.Duration) {
	t.Helper()
	if !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
		t.Errorf("Await = %v, want %v", err, wantErr)
	}
	if got := len(o.undone) == 1; got != wantUndo || len(o.undone) > 1 {
		t.Errorf("Undo called %d times, want %v", len(o.undone), wantUndo)
	}
	if got := len(o.left) == 1; got != wantLeave || len(o.left) > 1 {
		t.Fatalf("Leave called %d times, want %v", len(o.left), wantLeave)
	}
	if wantLeave && (o.expired[0] != expired || o.waited[0] != waited) {
		t.Errorf("Leave(expired %v, waited %v), want %v, %v", o.expired[0], o.waited[0], expired, waited)
	}
	if o.line.Len() != 0 {
		t.Errorf("%d tickets still in line", o.line.Len())
	}
}

// check reports the first inconsistency of a table's bookkeeping: an
// entry under another key, an idle list that disagrees with the idle marks
// or its count, or more than MaxIdle idle entries.
func check[E any](t *Table[E]) error {
	marked := 0
	for k, e := range t.m {
		if e.key != k {
			return fmt.Errorf("entry %q has key %q", k, e.key)
		}
		if e.idle {
			marked++
		}
	}
	n := 0
	for e := t.idleHead; e != nil; e = e.idleNext {
		n++
		if !e.idle || t.m[e.key] != e {
			return fmt.Errorf("idle list holds %q, idle %v, in the table %v", e.key, e.idle, t.m[e.key] == e)
		}
		if n > t.idle {
			break
		}
	}
	if n != t.idle || marked != t.idle || t.idle > MaxIdle {
		return fmt.Errorf("idle list has %d entries, %d are marked idle, count %d, at most %d", n, marked, t.idle, MaxIdle)
	}
	return nil
}
