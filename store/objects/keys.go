package objects

import (
	"crypto/sha256"
	"encoding/hex"
)

// HashName returns the hex SHA-256 of a tenant name or credential id, the
// form bucket keys (and limiter keys) use: no name or id appears in a key
// (docs/design.md §3).
func HashName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}
