//go:build !amd64

package limits

// prefetchEntry does nothing here: only amd64 has the instruction wired.
func prefetchEntry(*tatTable, uint64) {}
