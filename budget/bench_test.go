package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchKey is a Key shaped like the server's: a hex SHA-256 credential and a
// tenant name.
func benchKey(i int) Key {
	sum := sha256.Sum256(fmt.Appendf(nil, "credential-%d", i))
	return Key{Credential: hex.EncodeToString(sum[:]), Tenant: fmt.Sprintf("tenant-%d", i%16)}
}

// BenchmarkReserveRelease is the uncontended fast path: one reservation that
// fits at once, with its share bookkeeping, then its release (which drops the
// credential and tenant entries again).
func BenchmarkReserveRelease(b *testing.B) {
	bud := New(Config{TotalBytes: 1 << 30})
	k := benchKey(0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := bud.Reserve(ctx, k, 64<<10)
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

// BenchmarkReserveReleaseParallel is the same from GOMAXPROCS goroutines, each
// with its own credential, sharing the budget's one lock; nobody waits.
func BenchmarkReserveReleaseParallel(b *testing.B) {
	bud := New(Config{TotalBytes: 1 << 40})
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := benchKey(int(next.Add(1)))
		for pb.Next() {
			r, err := bud.Reserve(ctx, k, 64<<10)
			if err != nil {
				b.Error(err)
				return
			}
			r.Release()
		}
	})
}
