package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"openxet/budget"
	"openxet/store"
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

// holdMemory starts an upload of a xorb of n bytes as token and stalls it
// after two bytes of its body, so that it holds budget.BufferBytes(n) of the
// budget until the returned func drops the connection.
func (e *testEnv) holdMemory(t *testing.T, token string, h string, n int64) (drop func()) {
	t.Helper()
	before := e.srv.budget.Stats().ReservedBytes
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // before the server's Close, which waits for it
	fmt.Fprintf(conn, "POST /v1/xorbs/default/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\nxx", h, token, n)
	want := before + budget.BufferBytes(n)
	waitFor(t, "the stalled upload to hold memory", func() bool { return e.srv.budget.Stats().ReservedBytes == want })
	return func() { conn.Close() }
}

// countTermReads makes the server count the term lists it reads.
func (e *testEnv) countTermReads() *atomic.Int64 {
	var n atomic.Int64
	read := e.srv.readTerms
	e.srv.readTerms = func(ctx context.Context, tenant string, f store.File, start, end uint64) ([]xet.Term, uint64, error) {
		n.Add(1)
		return read(ctx, tenant, f, start, end)
	}
	return &n
}

// manyTermFile registers a file of n one-chunk terms over one xorb and
// returns its hash.
func (e *testEnv) manyTermFile(t *testing.T, token string, n int) xet.Hash {
	t.Helper()
	chunks := make([][]byte, 64)
	for i := range chunks {
		chunks[i] = []byte(fmt.Sprintf("chunk %02d of the many-term file", i))
	}
	body, info := xet.BuildXorb(chunks, false)
	if r := e.postXorb(token, body, info.Hash); r.Status != 200 {
		t.Fatalf("xorb: %d %s", r.Status, r.Body)
	}
	var f xet.FileInfo
	var leaves []xet.Leaf
	for i := range n {
		c := info.Chunks[i%len(chunks)]
		f.Terms = append(f.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: c.Size, ChunkStart: uint32(i % len(chunks)), ChunkEnd: uint32(i%len(chunks) + 1)})
		leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
	}
	f.Hash = xet.FileHash(leaves)
	sh := &xet.Shard{Files: []xet.FileInfo{f}}
	if r := e.do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("shard: %d %s", r.Status, r.Body)
	}
	return f.Hash
}

// TestReconstructionReservesBeforeDecoding: a reconstruction reserves the
// memory its term list takes, from the term count the index stores, before
// it reads the list. When the credential's share cannot hold the list, a
// request for a single byte is refused 503 memory_busy without reading it;
// once memory is free the same request is served.
func TestReconstructionReservesBeforeDecoding(t *testing.T) {
	e := newTestEnv(t, smallBudget)
	alice := e.credential("alice", "write")
	const terms = 8000
	file := e.manyTermFile(t, alice, terms)
	if need := store.FileTermListBytes(terms); need <= 1<<18 {
		t.Fatalf("the term list needs %d bytes; the test wants more than the quarter MiB it leaves free", need)
	}
	reads := e.countTermReads()

	// The two stalled uploads leave a quarter MiB of alice's 70 MiB share.
	drop1 := e.holdMemory(t, alice, strings.Repeat("ef", 32), 65<<20)
	drop2 := e.holdMemory(t, alice, strings.Repeat("ee", 32), 4<<20+3<<18)
	path := "/v1/reconstructions/" + file.String()
	for _, p := range []string{path, "/v2/reconstructions/" + file.String()} {
		r := e.do("GET", p, alice, nil, "Range: bytes=0-0")
		wantError(t, r, 503, "memory_busy")
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the refused requests read %d term lists", n)
	}
	if busy := e.srv.budget.Stats().Busy.Credential; busy != 2 {
		t.Fatalf("%d reservations refused as busy by the credential share, want 2", busy)
	}
	drop1()
	drop2()
	waitFor(t, "the dropped uploads to release their memory", func() bool { return e.srv.budget.Stats().ReservedBytes == 0 })

	r := e.do("GET", path, alice, nil, "Range: bytes=0-0")
	if r.Status != 200 {
		t.Fatalf("with memory free: %d %s", r.Status, r.Body)
	}
	if got := len(r.json(t)["terms"].([]any)); got != 1 {
		t.Fatalf("a one-byte range answered %d terms", got)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d term lists read, want 1", n)
	}
}

// TestTrimMemoryDropsAnIdlePool: the periodic trim keeps the pool of
// released buffers while uploads reuse it and drops it, giving the memory
// back, once a whole interval passed without reuse.
func TestTrimMemoryDropsAnIdlePool(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	released := func() bool { return e.srv.budget.Stats().ReservedBytes == 0 }
	pooled := func() int64 { return e.srv.budget.Stats().PooledBytes }
	for seed := range 2 {
		body, info := xet.BuildXorb(randomChunks(uint64(200+seed), 16, 64<<10), false)
		if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
			t.Fatalf("xorb: %d %s", r.Status, r.Body)
		}
		waitFor(t, "the upload's memory to be released", released)
	}
	if pooled() == 0 {
		t.Fatal("nothing pooled after two uploads")
	}
	steps := []struct {
		name       string
		wantPooled bool
	}{
		{"the pool was reused since the last trim", true},
		{"a whole interval without reuse", false},
	}
	for _, st := range steps {
		returned := e.srv.trimMemory()
		if got := pooled() > 0; got != st.wantPooled {
			t.Fatalf("%s: pooled %d bytes", st.name, pooled())
		}
		if !st.wantPooled && !returned {
			t.Fatalf("%s: the dropped pool was not given back", st.name)
		}
	}
}
