package server

import (
	"testing"

	"openxet/budget"
	"openxet/xet"
)

// TestBodyBuffersAreReused: xorb bodies, shard bodies and fetch buffers are
// read into buffers of the budget's pool; the second body of a size class
// reuses the first one's buffer instead of allocating.
func TestBodyBuffersAreReused(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	released := func() bool { return e.srv.budget.Stats().ReservedBytes == 0 }

	// Two xorbs of 16 chunks of 64 KiB: the same size class.
	var bodies [][]byte
	for seed := range 2 {
		body, _ := xet.BuildXorb(randomChunks(uint64(100+seed), 16, 64<<10), false)
		bodies = append(bodies, body)
	}
	if budget.BufferBytes(int64(len(bodies[0]))) != budget.BufferBytes(int64(len(bodies[1]))) {
		t.Fatal("the test xorbs are not of one size class")
	}
	before := e.srv.budget.Stats()
	f := e.upload(alice, bodies[0])
	waitFor(t, "the first upload's memory to be released", released)
	e.upload(alice, bodies[1])
	waitFor(t, "the second upload's memory to be released", released)
	s := e.srv.budget.Stats()
	// Xorb 1 misses, xorb 2 hits (the shards are too small to pool).
	if hits := s.BufferHits - before.BufferHits; hits < 1 {
		t.Fatalf("uploads: %d pool hits, %d misses; want the second xorb served from the pool", hits, s.BufferMisses-before.BufferMisses)
	}
	if s.PooledBytes == 0 || s.ReservedBytes+s.PooledBytes > s.TotalBytes {
		t.Fatalf("pool after the uploads: %+v", s)
	}

	// Fetches read through a pooled buffer of their own.
	r := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	if r.Status != 200 {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	before = e.srv.budget.Stats()
	for range 2 {
		e.assemble(r.Body)
		waitFor(t, "the fetch's memory to be released", released)
	}
	if s := e.srv.budget.Stats(); s.BufferHits-before.BufferHits < 1 {
		t.Fatalf("fetches: %d pool hits, %d misses; want the second fetch served from the pool", s.BufferHits-before.BufferHits, s.BufferMisses-before.BufferMisses)
	}
}
