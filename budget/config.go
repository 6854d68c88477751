package budget

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults for the fields of Config. New uses them for zero fields.
const (
	// DefaultCredentialShare is the fraction of the budget one credential may hold.
	DefaultCredentialShare = 0.25
	// DefaultTenantShare is the fraction of the budget one tenant may hold.
	DefaultTenantShare = 0.5
	// DefaultWait is how long a reservation may wait before it is refused as busy.
	DefaultWait = 10 * time.Second
)

// MinShare and MaxShare bound CredentialShare and TenantShare.
const (
	MinShare = 0.01
	MaxShare = 1.0
)

// The configuration keys that Validate names in its errors.
const (
	KeyMemoryBudget    = "server.memory_budget"
	KeyCredentialShare = "server.credential_memory_share"
	KeyTenantShare     = "server.tenant_memory_share"
	KeyMemoryWait      = "server.memory_wait"
)

// Config sizes a Budget. The cli fills it from server.memory_budget,
// server.credential_memory_share, server.tenant_memory_share and server.memory_wait.
type Config struct {
	// TotalBytes is the memory budget for request work on this node, in bytes. Required.
	TotalBytes int64
	// CredentialShare is the fraction of TotalBytes one credential may hold at once,
	// MinShare to MaxShare. Zero means DefaultCredentialShare (for New; Validate
	// refuses zero).
	CredentialShare float64
	// TenantShare is the fraction of TotalBytes one tenant, all its credentials
	// together, may hold at once, MinShare to MaxShare. Zero means DefaultTenantShare
	// (for New; Validate refuses zero).
	TenantShare float64
	// TenantShares give the tenants they name a share of their own,
	// MinShare to MaxShare, instead of TenantShare: the server holds its
	// anonymous readers, all admitted as one tenant, to
	// limits.anonymous_memory_share this way. Nil: every tenant has
	// TenantShare.
	TenantShares map[string]float64
	// Wait is how long a reservation may wait for room before it gets a *BusyError.
	// Zero means DefaultWait (for New; Validate refuses zero).
	Wait time.Duration
}

// WithDefaults returns c with every zero field except TotalBytes set to its default.
func (c Config) WithDefaults() Config {
	if c.CredentialShare == 0 {
		c.CredentialShare = DefaultCredentialShare
	}
	if c.TenantShare == 0 {
		c.TenantShare = DefaultTenantShare
	}
	if c.Wait == 0 {
		c.Wait = DefaultWait
	}
	return c
}

// ConfigError is one problem Validate found: the configuration key, the value
// given and what is wrong with it.
type ConfigError struct {
	Key    string // e.g. "server.credential_memory_share"
	Value  string // the value as given, formatted
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s = %s: %s", e.Key, e.Value, e.Reason)
}

// Validate checks c as an operator wrote it, with every field set (the cli fills
// absent keys with the Default constants first, so a zero here was written
// explicitly and is refused). maxItemBytes is the largest single reservation the
// server makes without splitting, one maximum xorb; both the credential share
// and the tenant share of TotalBytes must hold it. maxItemBytes <= 0 skips that
// check.
//
// Validate reports every problem, each as a *ConfigError naming its key, joined
// with errors.Join; nil means New(c) gives a working Budget.
func (c Config) Validate(maxItemBytes int64) error {
	var errs []error
	bad := func(key, value, reason string) {
		errs = append(errs, &ConfigError{Key: key, Value: value, Reason: reason})
	}
	if c.TotalBytes <= 0 {
		bad(KeyMemoryBudget, fmt.Sprint(c.TotalBytes), "must be a positive number of bytes")
	}
	credOK := validShare(c.CredentialShare)
	if !credOK {
		bad(KeyCredentialShare, fmt.Sprint(c.CredentialShare),
			fmt.Sprintf("must be between %v and %v", MinShare, MaxShare))
	}
	tenantOK := validShare(c.TenantShare)
	if !tenantOK {
		bad(KeyTenantShare, fmt.Sprint(c.TenantShare),
			fmt.Sprintf("must be between %v and %v", MinShare, MaxShare))
	}
	if c.Wait <= 0 {
		bad(KeyMemoryWait, c.Wait.String(), "must be a positive duration")
	}
	for t, share := range c.TenantShares {
		key := fmt.Sprintf("%s of tenant %q", KeyTenantShare, t)
		if !validShare(share) {
			bad(key, fmt.Sprint(share), fmt.Sprintf("must be between %v and %v", MinShare, MaxShare))
		} else if capBytes := shareBytes(c.TotalBytes, share); maxItemBytes > 0 && c.TotalBytes > 0 && capBytes < maxItemBytes {
			bad(key, fmt.Sprint(share), fmt.Sprintf("%s × %v = %d bytes cannot hold one maximum xorb of %d bytes", KeyMemoryBudget, share, capBytes, maxItemBytes))
		}
	}
	if maxItemBytes > 0 && c.TotalBytes > 0 {
		if credOK {
			if capBytes := shareBytes(c.TotalBytes, c.CredentialShare); capBytes < maxItemBytes {
				bad(KeyCredentialShare, fmt.Sprint(c.CredentialShare), fmt.Sprintf(
					"%s × %s = %d bytes cannot hold one maximum xorb of %d bytes; raise %s or %s",
					KeyMemoryBudget, KeyCredentialShare, capBytes, maxItemBytes, KeyMemoryBudget, KeyCredentialShare))
			}
		}
		if tenantOK {
			if capBytes := shareBytes(c.TotalBytes, c.TenantShare); capBytes < maxItemBytes {
				bad(KeyTenantShare, fmt.Sprint(c.TenantShare), fmt.Sprintf(
					"%s × %s = %d bytes cannot hold one maximum xorb of %d bytes; raise %s or %s",
					KeyMemoryBudget, KeyTenantShare, capBytes, maxItemBytes, KeyMemoryBudget, KeyTenantShare))
			}
		}
	}
	return errors.Join(errs...)
}

// validShare reports whether s is within [MinShare, MaxShare]; NaN is not.
func validShare(s float64) bool {
	return s >= MinShare && s <= MaxShare
}

// shareBytes is the whole number of bytes a share of total allows, never more
// than total and never negative.
func shareBytes(total int64, share float64) int64 {
	if total <= 0 || !(share > 0) {
		return 0
	}
	if share >= 1 {
		return total
	}
	f := math.Floor(float64(total) * share)
	if f >= float64(total) {
		return total
	}
	return int64(f)
}
