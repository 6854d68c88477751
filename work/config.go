package work

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults for the fields of Config. New uses them for zero fields.
const (
	// DefaultSlots is the number of slots on a node: as many as the index
	// has read connections, so that sections holding a slot never queue
	// for one in the connection pool, where the order is random.
	DefaultSlots = 8
	// DefaultTenantShare is the fraction of the slots one tenant may hold:
	// two of the default eight.
	DefaultTenantShare = 0.25
	// DefaultWait is how long a request may wait for a slot before it is
	// refused as busy.
	DefaultWait = 10 * time.Second
)

// Bounds of the Config fields.
const (
	MinShare = 0.01
	MaxShare = 1.0
	MaxSlots = 4096
)

// The configuration keys that Validate names in its errors.
const (
	KeySlots       = "server.work_slots"
	KeyTenantShare = "server.tenant_work_share"
	KeyWait        = "server.work_wait"
)

// Config sizes a Pool. The cli fills it from server.work_slots,
// server.tenant_work_share and server.work_wait.
type Config struct {
	// Slots is how many sections of request work may run at once on the
	// node, 1 to MaxSlots. Zero means DefaultSlots (for New; Validate
	// refuses zero).
	Slots int
	// TenantShare is the fraction of Slots one tenant, all its credentials
	// together, may hold at once, MinShare to MaxShare; the share is never
	// less than one slot. Zero means DefaultTenantShare (for New; Validate
	// refuses zero).
	TenantShare float64
	// Wait is how long a request may wait for a slot before it gets a
	// *BusyError. Zero means DefaultWait (for New; Validate refuses zero).
	Wait time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.TenantShare == 0 {
		c.TenantShare = DefaultTenantShare
	}
	if c.Wait == 0 {
		c.Wait = DefaultWait
	}
	return c
}

// TenantSlots is how many slots one tenant may hold under c: Slots ×
// TenantShare rounded down, at least one, at most Slots. Out-of-range
// values are clamped as New clamps them.
func (c Config) TenantSlots() int {
	c = c.WithDefaults()
	slots := min(max(c.Slots, 1), MaxSlots)
	share := c.TenantShare
	switch {
	case share > MaxShare:
		share = MaxShare
	case !(share >= MinShare): // below the range, or NaN
		share = MinShare
	}
	return min(max(int(math.Floor(float64(slots)*share)), 1), slots)
}

// ConfigError is one problem Validate found: the configuration key, the
// value given and what is wrong with it.
type ConfigError struct {
	Key    string // e.g. "server.work_slots"
	Value  string // the value as given, formatted
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s = %s: %s", e.Key, e.Value, e.Reason)
}

// Validate checks c as an operator wrote it, with every field set (the cli
// fills absent keys with the Default constants first, so a zero here was
// written explicitly and is refused). It reports every problem, each as a
// *ConfigError naming its key, joined with errors.Join; nil means New(c)
// gives a working Pool.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, value, reason string) {
		errs = append(errs, &ConfigError{Key: key, Value: value, Reason: reason})
	}
	if c.Slots < 1 || c.Slots > MaxSlots {
		bad(KeySlots, fmt.Sprint(c.Slots), fmt.Sprintf("must be between 1 and %d", MaxSlots))
	}
	if !(c.TenantShare >= MinShare && c.TenantShare <= MaxShare) {
		bad(KeyTenantShare, fmt.Sprint(c.TenantShare), fmt.Sprintf("must be between %v and %v", MinShare, MaxShare))
	}
	if c.Wait <= 0 {
		bad(KeyWait, c.Wait.String(), "must be a positive duration")
	}
	return errors.Join(errs...)
}

// ErrBusy matches a *BusyError: the request waited Config.Wait for a slot
// and did not get one. The server answers 503.
var ErrBusy = errors.New("work slots busy")

// RetryAfter is the RetryAfter of every *BusyError.
const RetryAfter = time.Second

// BusyError is returned by Acquire when the request waited Config.Wait
// without being granted a slot. errors.Is(err, ErrBusy) reports true for it.
type BusyError struct {
	// RetryAfter is how long the caller should tell the client to wait, at
	// least one second.
	RetryAfter time.Duration
	// AtShare reports that the tenant held its whole share when the wait
	// ended (its own requests kept it waiting), rather than the node's
	// slots being busy with other tenants' work.
	AtShare bool
	Waited  time.Duration
}

func (e *BusyError) Error() string {
	why := "every slot of the node was busy"
	if e.AtShare {
		why = "the tenant held its whole share of the slots"
	}
	return fmt.Sprintf("work busy: no slot within %v (%s); retry after %v", e.Waited, why, e.RetryAfter)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }
