package limits

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestCheckQuota(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		name                        string
		quota, usage, pending, size int64
		want                        QuotaVerdict
	}{
		{"unlimited", -1, math.MaxInt64, math.MaxInt64, 64 * MiB, QuotaOK},
		{"empty", 100, 0, 0, 10, QuotaOK},
		{"fills exactly", 100, 90, 0, 10, QuotaOK},
		{"one byte over", 100, 90, 0, 11, QuotaExceeded},
		{"already over", 100, 150, 0, 0, QuotaExceeded},
		{"zero-byte at quota", 100, 100, 0, 0, QuotaOK},
		{"zero quota", 0, 0, 0, 1, QuotaExceeded},
		{"fits committed, not pending", 100, 50, 40, 20, QuotaPending},
		{"fits with pending exactly", 100, 50, 40, 10, QuotaOK},
		{"exceeded wins over pending", 100, 95, 40, 10, QuotaExceeded},
		{"no overflow", math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64, 1, QuotaPending},
		{"no overflow exceeded", math.MaxInt64, math.MaxInt64, 0, math.MaxInt64, QuotaExceeded},
		{"negative inputs are zero", 100, -5, -5, -5, QuotaOK},
	} {
		if got := CheckQuota(c.quota, c.usage, c.pending, c.size); got != c.want {
			t.Errorf("%s: CheckQuota(%d, %d, %d, %d) = %v, want %v", c.name, c.quota, c.usage, c.pending, c.size, got, c.want)
		}
	}
}

func TestPending(t *testing.T) {
	var p Pending
	if got := p.Add("a", 10); got != 10 {
		t.Fatalf("Add = %d", got)
	}
	if got := p.Add("a", 5); got != 15 {
		t.Fatalf("Add = %d", got)
	}
	p.Add("b", 7)
	p.Done("a", 10)
	if got := p.Get("a"); got != 5 {
		t.Fatalf("Get(a) = %d, want 5", got)
	}
	p.Done("a", 5)
	p.Done("b", 100) // over-release clamps at zero
	if p.Get("a") != 0 || p.Get("b") != 0 || p.Len() != 0 {
		t.Fatalf("entries left: a=%d b=%d len=%d", p.Get("a"), p.Get("b"), p.Len())
	}
}

func TestErrors(t *testing.T) {
	rate := error(&RateError{Limit: LimitTenant, Decision: Decision{RetryAfter: 1500 * time.Millisecond}})
	var re *RateError
	if !errors.Is(rate, ErrRateLimited) || !errors.As(rate, &re) || RetryAfterSeconds(re.Decision.RetryAfter) != 2 {
		t.Fatalf("RateError: %v", rate)
	}
	for _, c := range []struct {
		v         QuotaVerdict
		sentinel  error
		retryable bool
	}{
		{QuotaExceeded, ErrQuotaExceeded, false},
		{QuotaPending, ErrQuotaPending, true},
	} {
		err := NewQuotaError(c.v, "t", 100, 90, 20, 11)
		var qe *QuotaError
		if !errors.As(err, &qe) || !errors.Is(err, c.sentinel) || qe.Retryable() != c.retryable {
			t.Errorf("%v: %v", c.v, err)
		}
		other := ErrQuotaExceeded
		if c.sentinel == ErrQuotaExceeded {
			other = ErrQuotaPending
		}
		if errors.Is(err, other) || errors.Is(err, ErrRateLimited) {
			t.Errorf("%v matches the wrong sentinel", c.v)
		}
		if qe.Quota != 100 || qe.Usage != 90 || qe.Pending != 20 || qe.Size != 11 || qe.Tenant != "t" {
			t.Errorf("%v: fields %+v", c.v, qe)
		}
	}
	if err := NewQuotaError(QuotaOK, "t", 1, 1, 1, 1); err != nil {
		t.Errorf("QuotaOK gave %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		-1: "unlimited", 0: "0 B", 1000: "1000 B", 1024: "1KiB", 1536: "1536 B", 10 << 30: "10GiB",
		3 << 50: "3PiB", 7 << 60: "7EiB", math.MaxInt64: "9223372036854775807 B",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestHumanBytes: sizes for tables, rounded to one decimal in the largest
// binary unit that is at most the size; "unlimited" below zero.
func TestHumanBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{-1, "unlimited"}, {0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"},
		{300048, "293 KiB"}, {5023741823, "4.7 GiB"}, {10 << 30, "10 GiB"},
		{1<<20 - 1, "1 MiB"}, // 1023.999 KiB rounds up into the next unit
		{7 << 60, "7 EiB"}, {math.MaxInt64, "8 EiB"},
	} {
		if got := HumanBytes(c.n); got != c.want {
			t.Errorf("HumanBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
