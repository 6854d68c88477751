package budget

import (
	"errors"
	"fmt"
	"time"
)

// The share kinds that errors and Stats name: the whole budget, one credential's
// share of it, or one tenant's share of it. They are fit for metric labels.
const (
	ShareBudget     = "budget"
	ShareCredential = "credential"
	ShareTenant     = "tenant"
)

var (
	// ErrBusy matches a *BusyError: the reservation waited Config.Wait and
	// still did not fit. The server answers 503 memory_busy.
	ErrBusy = errors.New("memory busy")
	// ErrTooLarge matches a *TooLargeError: the reservation can never fit, so it was
	// refused without waiting. The server answers 413.
	ErrTooLarge = errors.New("reservation too large")
)

// RetryAfter is the RetryAfter of every *BusyError: the budget cannot predict when
// memory frees, so it asks for a prompt retry in the smallest whole second.
const RetryAfter = time.Second

// BusyError is returned by Reserve when the reservation waited Config.Wait
// without fitting. errors.Is(err, ErrBusy) reports true for it.
type BusyError struct {
	// RetryAfter is how long the caller should tell the client to wait, at
	// least one second.
	RetryAfter time.Duration
	// Share is what held the reservation back when the wait ended: ShareBudget,
	// ShareCredential or ShareTenant.
	Share string
	// N is the reservation size in bytes; Waited how long it waited.
	N      int64
	Waited time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("memory busy: %d bytes did not fit the %s share within %v; retry after %v",
		e.N, e.Share, e.Waited, e.RetryAfter)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// TooLargeError is returned by Reserve, at once, when N bytes exceed the largest
// amount the key may ever hold. errors.Is(err, ErrTooLarge) reports true for it.
type TooLargeError struct {
	N     int64  // bytes asked for
	Limit int64  // bytes the binding share allows
	Share string // the binding share: ShareCredential, ShareTenant or ShareBudget
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("reservation too large: %d bytes exceed the %s share of %d bytes", e.N, e.Share, e.Limit)
}

// Unwrap returns ErrTooLarge.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }
