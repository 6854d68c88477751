package budget

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

func TestBufferBytes(t *testing.T) {
	cases := []struct {
		n, want int64
	}{
		{0, 0},
		{1, 1},
		{MinPooledBytes - 1, MinPooledBytes - 1},
		{MinPooledBytes, MinPooledBytes},
		{MinPooledBytes + 1, MinPooledBytes + 4<<10},
		{256 << 10, 256 << 10},
		{1<<20 + 1, 1<<20 + 64<<10},
		{60 << 20, 60 << 20},
		{60<<20 + 1, 61 << 20},
		{64<<20 + 1<<20, 65 << 20}, // the largest xorb is its own class
	}
	for _, c := range cases {
		got := BufferBytes(c.n)
		if got != c.want {
			t.Errorf("BufferBytes(%d) = %d, want %d", c.n, got, c.want)
		}
		if c.n >= MinPooledBytes && (got-c.n)*16 >= c.n {
			t.Errorf("BufferBytes(%d) = %d: 1/16 or more over", c.n, got)
		}
	}
}

// checkPool fails unless pooled and reserved bytes fit the budget together.
func checkPool(t *testing.T, b *Budget, step string) Stats {
	t.Helper()
	s := b.Stats()
	if s.ReservedBytes+s.PooledBytes > s.TotalBytes {
		t.Fatalf("%s: reserved %d + pooled %d > budget %d", step, s.ReservedBytes, s.PooledBytes, s.TotalBytes)
	}
	return s
}

// TestReserveBufferReuses: a released buffer is handed to the next
// reservation of its size class, whoever makes it; another class allocates.
func TestReserveBufferReuses(t *testing.T) {
	b := New(Config{TotalBytes: 16 << 20, CredentialShare: 1, TenantShare: 1})
	ctx := context.Background()

	r1, buf1, err := b.ReserveBuffer(ctx, key("a", "A"), 3<<20-5)
	if err != nil {
		t.Fatal(err)
	}
	if len(buf1) != 3<<20-5 || cap(buf1) != 3<<20 || r1.Bytes() != 3<<20 {
		t.Fatalf("buffer len %d cap %d, reservation %d; want %d, %d, %d", len(buf1), cap(buf1), r1.Bytes(), 3<<20-5, 3<<20, 3<<20)
	}
	if s := checkPool(t, b, "first"); s.BufferMisses != 1 || s.BufferHits != 0 || s.ReservedBytes != 3<<20 {
		t.Fatalf("after the first: %+v", s)
	}
	r1.Release()
	if s := checkPool(t, b, "released"); s.PooledBytes != 3<<20 || s.ReservedBytes != 0 {
		t.Fatalf("after release: %+v", s)
	}

	r2, buf2, err := b.ReserveBuffer(ctx, key("b", "B"), 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	if &buf2[0] != &buf1[0] {
		t.Fatal("the second buffer of the class is not the first one reused")
	}
	if s := checkPool(t, b, "reused"); s.BufferHits != 1 || s.BufferMisses != 1 || s.PooledBytes != 0 {
		t.Fatalf("after reuse: %+v", s)
	}
	r3, buf3, err := b.ReserveBuffer(ctx, key("b", "B"), 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if &buf3[0] == &buf2[0] || b.Stats().BufferMisses != 2 {
		t.Fatalf("another class: %+v", b.Stats())
	}
	r2.Release()
	r2.Release() // a second release neither credits nor pools again
	r3.Release()
	if s := checkPool(t, b, "both released"); s.PooledBytes != 5<<20 || s.ReservedBytes != 0 {
		t.Fatalf("after both: %+v", s)
	}
	checkDrained(t, b)
}

// TestPoolNeverPassesTheBudget: pooled buffers give way to any reservation
// that needs their room, buffer or not.
func TestPoolNeverPassesTheBudget(t *testing.T) {
	b := New(Config{TotalBytes: 8 << 20, CredentialShare: 1, TenantShare: 1})
	ctx := context.Background()
	var held []Reservation
	for range 2 {
		r, _, err := b.ReserveBuffer(ctx, key("a", "A"), 3<<20)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	for _, r := range held {
		r.Release()
	}
	if s := checkPool(t, b, "pooled"); s.PooledBytes != 6<<20 {
		t.Fatalf("pooled %d, want 6MiB", s.PooledBytes)
	}
	// 5 MiB reserved leaves room for one pooled buffer of 3 MiB only.
	r := mustReserve(t, b, key("x", "X"), 5<<20)
	if s := checkPool(t, b, "plain reservation"); s.PooledBytes != 3<<20 || s.BufferDroppedBytes != 3<<20 {
		t.Fatalf("after a plain reservation: %+v", s)
	}
	// A buffer of another class takes the rest.
	r2, _, err := b.ReserveBuffer(ctx, key("y", "Y"), 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s := checkPool(t, b, "other class"); s.PooledBytes != 0 || s.BufferDroppedBytes != 6<<20 {
		t.Fatalf("after another class: %+v", s)
	}
	r.Release()
	r2.Release()
	checkDrained(t, b)
}

// TestTrimBuffers: the pool is dropped at the first trim after a period in
// which nothing was taken from it.
func TestTrimBuffers(t *testing.T) {
	b := New(Config{TotalBytes: 8 << 20, CredentialShare: 1, TenantShare: 1})
	ctx := context.Background()
	steps := []struct {
		name        string
		reuse       bool // take a buffer from the pool and give it back
		wantDropped int64
	}{
		{"nothing pooled", false, 0},
		{"reused since the last trim", true, 0},
		{"idle since the last trim", false, 1 << 20},
		{"empty", false, 0},
	}
	r, _, err := b.ReserveBuffer(ctx, key("a", "A"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.TrimBuffers(); got != 0 {
		t.Fatalf("trim while the buffer is held dropped %d", got)
	}
	r.Release()
	for _, s := range steps[1:] {
		if s.reuse {
			r, _, err := b.ReserveBuffer(ctx, key("a", "A"), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			r.Release()
		}
		if got := b.TrimBuffers(); got != s.wantDropped {
			t.Fatalf("%s: dropped %d, want %d", s.name, got, s.wantDropped)
		}
	}
	if s := b.Stats(); s.PooledBytes != 0 {
		t.Fatalf("pooled %d after the trim", s.PooledBytes)
	}
}

// TestReserveBufferConcurrent: many goroutines reserve, fill, check and
// release buffers of a few classes; no buffer is ever handed to two holders
// and the pool stays within the budget.
func TestReserveBufferConcurrent(t *testing.T) {
	b := New(Config{TotalBytes: 4 << 20, CredentialShare: 0.5, TenantShare: 1})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			k := key(string(rune('a'+g%4)), "T")
			for range 200 {
				n := int64(MinPooledBytes * (1 + rng.IntN(8)))
				r, buf, err := b.ReserveBuffer(ctx, k, n)
				if err != nil {
					t.Error(err)
					return
				}
				mark := byte(g + 1)
				for i := 0; i < len(buf); i += 4096 {
					buf[i] = mark
				}
				runtime.Gosched()
				for i := 0; i < len(buf); i += 4096 {
					if buf[i] != mark {
						t.Errorf("goroutine %d: buffer byte %d changed under it", g, i)
						break
					}
				}
				r.Release()
			}
		}()
	}
	wg.Wait()
	s := checkPool(t, b, "end")
	if s.BufferHits == 0 {
		t.Fatalf("no buffer was reused: %+v", s)
	}
	checkDrained(t, b)
}
