package work

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireRelease is the fast path every index section of a
// request pays: a slot free, the tenant below its share, nobody waiting.
func BenchmarkAcquireRelease(b *testing.B) {
	p := New(Config{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := p.Acquire(ctx, "tenant-0")
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

// BenchmarkAcquireReleaseParallel is the same from GOMAXPROCS goroutines,
// each its own tenant, sharing the pool's one lock.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := New(Config{})
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		tenant := fmt.Sprintf("tenant-%d", next.Add(1))
		for pb.Next() {
			s, err := p.Acquire(ctx, tenant)
			if err != nil {
				b.Error(err)
				return
			}
			s.Release()
		}
	})
}
