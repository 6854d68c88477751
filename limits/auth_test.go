package limits

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestAuthFailures(t *testing.T) {
	a := NewAuthFailures(60, 1000)
	const ip, other = "192.0.2.1", "198.51.100.7"
	// 60 failures within 600ms.
	for i := range 60 {
		now := at(time.Duration(i) * 10 * time.Millisecond)
		if d := a.Check(ip, now); !d.Allowed {
			t.Fatalf("attempt %d refused: %+v", i, d)
		}
		a.Fail(ip, now)
	}
	// The 61st attempt is refused, valid token or not: the bucket refills
	// one unit per second, the first at t0+1s.
	now := at(600 * time.Millisecond)
	d := a.Check(ip, now)
	if d.Allowed || d.RetryAfter != 400*time.Millisecond || d.RetryAfterSeconds() != 1 {
		t.Fatalf("61st check: %+v, want refused with RetryAfter 400ms", d)
	}
	if d := a.Check(other, now); !d.Allowed || d.Remaining != 60 {
		t.Fatalf("other IP: %+v, want a full bucket", d)
	}
	// Recovers one attempt at a time...
	if d := a.Check(ip, at(time.Second)); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("at 1s: %+v, want one attempt", d)
	}
	a.Fail(ip, at(time.Second))
	if d := a.Check(ip, at(time.Second)); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("after failing again: %+v, want refused for 1s", d)
	}
	// ...and fully a minute after the failures stop.
	if d := a.Check(ip, at(61*time.Second)); !d.Allowed || d.Remaining != 60 {
		t.Fatalf("at 61s: %+v, want a full bucket", d)
	}
	st := a.Stats()
	if st.Failures != 61 || st.Refused != 2 {
		t.Fatalf("stats %+v, want 61 failures, 2 refusals", st)
	}
}

func TestAuthFailuresDisabled(t *testing.T) {
	a := NewAuthFailures(0, 10)
	for range 1000 {
		a.Fail("ip", t0)
	}
	if d := a.Check("ip", t0); !d.Allowed {
		t.Fatalf("disabled limiter refused: %+v", d)
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
				a.Fail(string(buf), now)
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
