//go:build !amd64

package limits

import "sync/atomic"

// prefetchEntry does nothing here: only amd64 has the instruction wired.
func prefetchEntry(*tatTable, uint64) {}

// prefetchLine does nothing here.
func prefetchLine(*atomic.Int32) {}
