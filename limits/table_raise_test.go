package limits

import (
	"testing"
	"time"
)

// TestRaisedRateAppliesAtOnce: a key throttled under a slow rate is judged
// by a raised rate on its next request, not after the old debt.
func TestRaisedRateAppliesAtOnce(t *testing.T) {
	tb := NewTable(100)
	now := time.Now()
	slow := Rate{PerSecond: 0.01, Burst: 1}
	if !tb.Allow("k", slow, now).Allowed {
		t.Fatal("first request refused")
	}
	if d := tb.Allow("k", slow, now); d.Allowed || d.RetryAfter < 99*time.Second {
		t.Fatalf("second request under the slow rate: %+v", d)
	}
	fast := Rate{PerSecond: 1000, Burst: 1000}
	// Under the raised rate the bucket counts as just emptied: one
	// interval (1ms) later a request is admitted.
	if d := tb.Peek("k", fast, now); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("peek under the raised rate: %+v", d)
	}
	if d := tb.Allow("k", fast, now); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("allow under the raised rate: %+v", d)
	}
	for i := 1; i <= 5; i++ {
		if d := tb.Allow("k", fast, now.Add(time.Duration(i)*time.Millisecond)); !d.Allowed {
			t.Fatalf("request %d under the raised rate: %+v", i, d)
		}
	}
	// Lowering the rate again is stricter at once too.
	if d := tb.Allow("k", slow, now.Add(10*time.Millisecond)); d.Allowed {
		t.Fatalf("lowered rate admitted: %+v", d)
	}
}
