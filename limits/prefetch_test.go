package limits

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPrefetchIsOnlyAHint: prefetch reads a table's slots without its
// lock, so it must be safe on an empty table, on any hash, and while other
// goroutines grow and shrink the table (run with -race: the reads are in
// assembly, so the detector must see nothing either).
func TestPrefetchIsOnlyAHint(t *testing.T) {
	tbl := NewTable(256)
	for _, h := range []uint64{1, 2, 1 << 63, ^uint64(0)} {
		tbl.prefetch(h) // empty table: no entries yet
	}
	r := Rate{PerSecond: 1, Burst: 1}
	// The writer adds keys until told to stop; the prefetching goes on
	// until it has added enough to grow and evict, however the two are
	// scheduled.
	var wg sync.WaitGroup
	var added atomic.Int64
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// New keys grow the shards; a second later they are evictable
			// and the next keys replace them.
			tbl.Allow("k"+strconv.Itoa(i), r, t0.Add(time.Duration(i)*time.Millisecond))
			added.Add(1)
		}
	})
	for i := 0; i < 20000 || added.Load() < 2000; i++ {
		tbl.prefetch(tbl.hash("k" + strconv.Itoa(i)))
		tbl.prefetch(uint64(i) * 0x9E3779B97F4A7C15)
	}
	close(stop)
	wg.Wait()
	if n := tbl.Len(); n == 0 || n > 256 {
		t.Fatalf("table holds %d keys, want 1..256", n)
	}
}
