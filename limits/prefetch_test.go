package limits

import (
	"strconv"
	"sync"
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
	var wg sync.WaitGroup
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
		}
	})
	for i := range 20000 {
		tbl.prefetch(tbl.hash("k" + strconv.Itoa(i)))
		tbl.prefetch(uint64(i) * 0x9E3779B97F4A7C15)
	}
	close(stop)
	wg.Wait()
	if n := tbl.Len(); n == 0 || n > 256 {
		t.Fatalf("table holds %d keys, want 1..256", n)
	}
}
