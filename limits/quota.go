package limits

import (
	"fmt"
	"math"
	"strconv"
	"sync"
)

// QuotaVerdict is the outcome of a quota check.
type QuotaVerdict int

const (
	// QuotaOK: the upload fits, counting uploads in flight.
	QuotaOK QuotaVerdict = iota
	// QuotaExceeded: usage + n > quota. The upload can never fit (403).
	QuotaExceeded
	// QuotaPending: usage + n <= quota, but usage + pending + n > quota.
	// It may fit once uploads in flight commit or fail (503, retry).
	QuotaPending
)

func (v QuotaVerdict) String() string {
	switch v {
	case QuotaOK:
		return "ok"
	case QuotaExceeded:
		return "exceeded"
	case QuotaPending:
		return "pending"
	}
	return fmt.Sprintf("QuotaVerdict(%d)", int(v))
}

// byteUnits are the binary units FormatBytes and HumanBytes write, largest
// first.
var byteUnits = [...]struct {
	name string
	size int64
}{{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// FormatBytes writes a byte count exactly, for people and for config
// files alike: in the largest binary unit that keeps it whole ("10GiB"),
// else in bytes ("300048 B"), and "unlimited" for a negative quota. The
// size parser of the command line reads every output back to n.
func FormatBytes(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	for _, u := range byteUnits {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// HumanBytes writes a byte count for a table, rounded: in the largest
// binary unit it reaches, to one decimal without a trailing ".0" ("4.7 GiB",
// "293 KiB", "10 GiB"), in bytes below 1 KiB ("300 B"), and "unlimited" for
// a negative quota. It is not exact; FormatBytes is, where a value must be
// read back.
func HumanBytes(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	for i, u := range byteUnits {
		if n < u.size {
			continue
		}
		v := math.Round(float64(n)/float64(u.size)*10) / 10
		if v >= 1024 && i > 0 { // rounded up into the next unit
			u, v = byteUnits[i-1], math.Round(float64(n)/float64(byteUnits[i-1].size)*10)/10
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + " " + u.name
	}
	return strconv.FormatInt(n, 10) + " B"
}

// CheckQuota decides whether an upload of n bytes fits a tenant's quota,
// given its committed usage and the pending bytes of its uploads in
// flight. All sizes are bytes. quota < 0 means unlimited. Filling the quota
// exactly (usage + n == quota) is allowed. Negative usage, pending or n are
// treated as 0. The arithmetic does not overflow.
func CheckQuota(quota, usage, pending, n int64) QuotaVerdict {
	if quota < 0 {
		return QuotaOK
	}
	usage, pending, n = max(usage, 0), max(pending, 0), max(n, 0)
	// usage + n > quota, written so that it cannot overflow.
	if usage > quota || n > quota-usage {
		return QuotaExceeded
	}
	if pending > quota-usage-n {
		return QuotaPending
	}
	return QuotaOK
}

// QuotaError is a quota refusal. Quota, Usage, Pending and Size are bytes:
// the tenant's quota, its committed usage, the bytes of its uploads in
// flight on this node, and the refused upload's size. Verdict is
// QuotaExceeded or QuotaPending.
type QuotaError struct {
	Tenant  string
	Quota   int64
	Usage   int64
	Pending int64
	Size    int64
	Verdict QuotaVerdict
}

// NewQuotaError returns the error for a verdict: nil for QuotaOK,
// otherwise a *QuotaError.
func NewQuotaError(v QuotaVerdict, tenant string, quota, usage, pending, size int64) error {
	if v == QuotaOK {
		return nil
	}
	return &QuotaError{Tenant: tenant, Quota: quota, Usage: usage, Pending: pending, Size: size, Verdict: v}
}

// Retryable reports whether the refusal is temporary (QuotaPending).
func (e *QuotaError) Retryable() bool { return e.Verdict == QuotaPending }

func (e *QuotaError) Error() string {
	if e.Retryable() {
		return fmt.Sprintf("tenant %q: upload of %d bytes must wait for %d bytes of uploads in progress (quota %d bytes, usage %d bytes)",
			e.Tenant, e.Size, e.Pending, e.Quota, e.Usage)
	}
	return fmt.Sprintf("tenant %q: upload of %d bytes would exceed its quota of %d bytes (usage %d bytes)",
		e.Tenant, e.Size, e.Quota, e.Usage)
}

// Unwrap returns ErrQuotaPending for a retryable refusal, otherwise
// ErrQuotaExceeded.
func (e *QuotaError) Unwrap() error {
	if e.Retryable() {
		return ErrQuotaPending
	}
	return ErrQuotaExceeded
}

// Pending tracks, per tenant, the bytes of uploads admitted on this process
// but not yet committed or failed. An entry is deleted when it returns to
// zero. The zero value is ready to use; a Pending is safe for concurrent
// use.
type Pending struct {
	mu    sync.Mutex
	bytes map[string]int64
}

// Add adds n bytes to tenant's pending total and returns the new total.
func (p *Pending) Add(tenant string, n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addLocked(tenant, n)
}

func (p *Pending) addLocked(tenant string, n int64) int64 {
	if p.bytes == nil {
		p.bytes = make(map[string]int64)
	}
	v := p.bytes[tenant] + n
	if v <= 0 {
		delete(p.bytes, tenant)
		return 0
	}
	p.bytes[tenant] = v
	return v
}

// Done removes n bytes from tenant's pending total, when an upload admitted
// with Add commits or fails. Call it exactly once per admitted
// upload (use defer). The total never goes below zero.
func (p *Pending) Done(tenant string, n int64) {
	p.mu.Lock()
	p.addLocked(tenant, -n)
	p.mu.Unlock()
}

// Get returns tenant's pending bytes.
func (p *Pending) Get(tenant string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes[tenant]
}

// Len returns the number of tenants with pending bytes.
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bytes)
}
