package limits

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fail makes one failed attempt from ip at now and reports whether the
// attempt was admitted to have its token checked.
func fail(a *AuthFailures, ip string, now time.Time) bool {
	att, d := a.Begin(ip, now)
	if !d.Allowed {
		return false
	}
	att.Failed(now)
	return true
}

func TestAuthFailures(t *testing.T) {
	a := NewAuthFailures(60, 1000)
	const ip, other = "192.0.2.1", "198.51.100.7"
	// 60 failures within 600ms.
	for i := range 60 {
		if !fail(a, ip, at(time.Duration(i)*10*time.Millisecond)) {
			t.Fatalf("attempt %d refused", i)
		}
	}
	// The 61st attempt is refused, valid token or not: the bucket refills
	// one unit per second, the first at t0+1s.
	now := at(600 * time.Millisecond)
	_, d := a.Begin(ip, now)
	if d.Allowed || d.RetryAfter != 400*time.Millisecond || RetryAfterSeconds(d.RetryAfter) != 1 {
		t.Fatalf("61st attempt: %+v, want refused with RetryAfter 400ms", d)
	}
	ok, d := a.Begin(other, now)
	if !d.Allowed || d.Remaining != 59 {
		t.Fatalf("other IP: %+v, want a full bucket less this attempt", d)
	}
	ok.Refund()
	// Recovers one attempt at a time...
	if !fail(a, ip, at(time.Second)) {
		t.Fatal("at 1s: refused, want one attempt")
	}
	if _, d := a.Begin(ip, at(time.Second)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("after failing again: %+v, want refused for 1s", d)
	}
	// ...and fully a minute after the failures stop: 60 attempts again.
	for i := range 60 {
		if !fail(a, ip, at(61*time.Second)) {
			t.Fatalf("at 61s: attempt %d refused", i)
		}
	}
	st := a.Stats()
	if st.Failures != 121 || st.Refused != 2 || st.Unrecorded != 0 {
		t.Fatalf("stats %+v, want 121 failures, 2 refusals", st)
	}
}

// TestAuthSuccessCostsNothing: an attempt whose token verifies gives its
// unit back, so a client that never fails is never refused, and its
// failures are counted as if the successes had not happened.
func TestAuthSuccessCostsNothing(t *testing.T) {
	a := NewAuthFailures(3, 1000)
	const ip = "192.0.2.1"
	for i := range 1000 {
		att, d := a.Begin(ip, t0)
		if !d.Allowed {
			t.Fatalf("success %d refused: %+v", i, d)
		}
		att.Refund()
	}
	for i := range 3 {
		if !fail(a, ip, t0) {
			t.Fatalf("failure %d refused", i)
		}
	}
	if _, d := a.Begin(ip, t0); d.Allowed {
		t.Fatal("4th attempt after 3 failures admitted")
	}
}

// TestAuthFailuresConcurrent: 400 attempts from one IP released at once
// against a limit of 60 at a fixed instant: exactly 60 get their (bad)
// token checked, however the goroutines interleave. Before spend-first,
// a check that spent nothing let 118 of 400 through at GOMAXPROCS=32.
func TestAuthFailuresConcurrent(t *testing.T) {
	for _, good := range []bool{false, true} {
		t.Run(fmt.Sprintf("good_tokens=%v", good), func(t *testing.T) {
			a := NewAuthFailures(60, 1000)
			const n = 400
			var checked, refused atomic.Int64
			var start, done sync.WaitGroup
			start.Add(1)
			for range n {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					att, d := a.Begin("192.0.2.1", t0)
					if !d.Allowed {
						refused.Add(1)
						return
					}
					checked.Add(1)
					runtime.Gosched() // the token is being checked
					if good {
						att.Refund()
					} else {
						att.Failed(t0)
					}
				}()
			}
			start.Done()
			done.Wait()
			if !good && (checked.Load() != 60 || refused.Load() != n-60) {
				t.Fatalf("%d checked, %d refused; want exactly 60 checked", checked.Load(), refused.Load())
			}
			// Good tokens are never refused, however many authenticate at
			// once: an attempt past the allowance waits for those in
			// progress, whose refunds let it in.
			if good && (checked.Load() != n || refused.Load() != 0) {
				t.Fatalf("%d checked, %d refused; want every good token checked", checked.Load(), refused.Load())
			}
			wantLeft := 0
			if good {
				wantLeft = 60
			}
			left := 0
			for {
				if !fail(a, "192.0.2.1", t0) {
					break
				}
				left++
			}
			if left != wantLeft {
				t.Fatalf("%d attempts left afterwards, want %d", left, wantLeft)
			}
		})
	}
}

// TestAuthFailuresFullTable: when the table is full of throttled IPs, an
// IP that never failed is still admitted (with any token), the throttled
// IPs stay throttled (nothing is evicted), and a new IP's failure that
// cannot be recorded is refused.
func TestAuthFailuresFullTable(t *testing.T) {
	a := NewAuthFailures(2, 1) // one shard, one key
	const attacker, innocent, newcomer = "192.0.2.1", "198.51.100.7", "203.0.113.9"
	for range 2 {
		if !fail(a, attacker, t0) {
			t.Fatal("attacker refused within its limit")
		}
	}
	if _, d := a.Begin(attacker, t0); d.Allowed {
		t.Fatal("attacker admitted past its limit")
	}
	for i := range 100 {
		att, d := a.Begin(innocent, at(time.Duration(i)*time.Millisecond))
		if !d.Allowed {
			t.Fatalf("innocent IP refused on attempt %d: %+v", i, d)
		}
		att.Refund()
	}
	att, d := a.Begin(newcomer, t0)
	if !d.Allowed {
		t.Fatalf("newcomer's first attempt refused: %+v", d)
	}
	if d := att.Failed(t0); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("unrecordable failure: %+v, want refused with a wait", d)
	}
	if _, d := a.Begin(attacker, at(time.Millisecond)); d.Allowed {
		t.Fatal("attacker forgotten to make room")
	}
	st := a.Stats()
	if st.Table.Keys != 1 || st.Unrecorded != 1 || st.Table.Full != 1 {
		t.Fatalf("stats %+v, want one key tracked and one unrecorded failure", st)
	}
	// Once the attacker's bucket is full again it is evicted for the next
	// failing newcomer, which is then recorded and limited.
	if !fail(a, newcomer, at(time.Minute)) || !fail(a, newcomer, at(time.Minute)) || fail(a, newcomer, at(time.Minute)) {
		t.Fatal("newcomer not limited once the table had room")
	}
}

func TestAuthFailuresKeys(t *testing.T) {
	for _, c := range []struct{ ip, key string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"::1", "::/64"},
		{"not an ip", "not an ip"},
	} {
		if got := ipKey(c.ip); got != c.key {
			t.Errorf("ipKey(%q) = %q, want %q", c.ip, got, c.key)
		}
	}
	a := NewAuthFailures(2, 1000)
	fail(a, "2001:db8:1:2::1", t0)
	fail(a, "2001:db8:1:2:ffff:ffff:ffff:ffff", t0)
	if _, d := a.Begin("2001:db8:1:2::abcd", t0); d.Allowed {
		t.Fatal("a third address of the same /64 admitted past the limit of 2")
	}
	if att, d := a.Begin("2001:db8:1:3::1", t0); !d.Allowed {
		t.Fatal("the next /64 refused")
	} else {
		att.Refund()
	}
	fail(a, "192.0.2.1", t0)
	fail(a, "::ffff:192.0.2.1", t0)
	if _, d := a.Begin("192.0.2.1", t0); d.Allowed {
		t.Fatal("an IPv4-mapped address got its own bucket")
	}
}

func TestAuthFailuresDisabled(t *testing.T) {
	a := NewAuthFailures(0, 10)
	for range 1000 {
		if !fail(a, "ip", t0) {
			t.Fatal("disabled limiter refused")
		}
	}
	if a.Len() != 0 {
		t.Fatal("disabled limiter tracked IPs")
	}
}

// TestAuthFailuresBoundedMemory sprays 1M distinct IPs: the table never
// tracks more than its cap, and the heap grows by no more than the cap
// times a few hundred bytes.
func TestAuthFailuresBoundedMemory(t *testing.T) {
	const maxIPs = 20_000
	n := 1_000_000
	if raceEnabled {
		n = 100_000 // the race detector makes each call ~20x slower
	}
	for _, c := range []struct {
		name string
		step time.Duration // between IPs; one failure refills in 1s
	}{
		{"all at once", 0},           // nothing refills: the table fills and refuses newcomers
		{"spread", time.Millisecond}, // entries refill and are evicted
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			a := NewAuthFailures(60, maxIPs)
			buf := make([]byte, 0, 16)
			for i := range n {
				buf = append(buf[:0], "10."...)
				buf = strconv.AppendInt(buf, int64(i>>16&255), 10)
				buf = append(buf, '.')
				buf = strconv.AppendInt(buf, int64(i>>8&255), 10)
				buf = append(buf, '.')
				buf = strconv.AppendInt(buf, int64(i&255), 10)
				now := t0.Add(time.Duration(i) * c.step)
				fail(a, string(buf), now)
				if i%100_000 == 0 {
					if l := a.Len(); l > maxIPs {
						t.Fatalf("after %d IPs: %d tracked, cap %d", i, l, maxIPs)
					}
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			st := a.Stats()
			t.Logf("%+v, heap %+d B", st, int64(after.HeapAlloc)-int64(before.HeapAlloc))
			if st.Table.Keys > maxIPs {
				t.Fatalf("%d tracked, cap %d", st.Table.Keys, maxIPs)
			}
			if growth := int64(after.HeapAlloc) - int64(before.HeapAlloc); growth > maxIPs*300 {
				t.Errorf("heap grew %d B for %d IPs, more than 300 B per tracked IP", growth, maxIPs)
			}
			runtime.KeepAlive(a)
		})
	}
}
