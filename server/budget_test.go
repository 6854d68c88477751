package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"openxet/budget"
	"openxet/xet"
)

// smallBudget: the credential share (70MiB) holds one maximum xorb, as
// start-up requires, and little more.
func smallBudget(c *Config) {
	c.Budget = budget.Config{TotalBytes: 280 << 20, CredentialShare: 0.25, TenantShare: 0.5, Wait: 50 * time.Millisecond}
}

// TestManyTermsAnswerTooLargeButRangesWork: a full-file answer that cannot
// fit in the credential's share is refused at once with 413 and a hint to
// ask a smaller Range; ranged requests of the same file are served.
func TestManyTermsAnswerTooLargeButRangesWork(t *testing.T) {
	e := newTestEnv(t, smallBudget)
	alice := e.credential("alice", "write")
	const perXorb = 50_000
	var infos []xet.XorbInfo
	var chunks [2][][]byte
	for x := range chunks {
		chunks[x] = make([][]byte, perXorb)
		for i := range chunks[x] {
			chunks[x][i] = []byte(fmt.Sprintf("xorb %d chunk %06d padding to 32B", x, i))
		}
		body, info := xet.BuildXorb(chunks[x], false)
		if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
			t.Fatalf("xorb: %d %s", r.Status, r.Body)
		}
		infos = append(infos, info)
	}
	// 100k one-chunk terms, alternating between the two xorbs.
	var f xet.FileInfo
	var leaves []xet.Leaf
	var whole []byte
	for i := 0; i < perXorb; i++ {
		for x := range infos {
			c := infos[x].Chunks[i]
			f.Terms = append(f.Terms, xet.Term{Xorb: infos[x].Hash, UnpackedBytes: c.Size, ChunkStart: uint32(i), ChunkEnd: uint32(i + 1)})
			f.Verification = append(f.Verification, xet.RangeHash([]xet.Hash{c.Hash}))
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
			whole = append(whole, chunks[x][i]...)
		}
	}
	f.Hash, f.Flags = xet.FileHash(leaves), xet.FileFlagVerification
	sh := &xet.Shard{Files: []xet.FileInfo{f}}
	if r := e.do("POST", "/v1/shards", alice, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("shard: %d %s", r.Status, r.Body)
	}
	path := "/v1/reconstructions/" + f.Hash.String()
	start := time.Now()
	r := e.do("GET", path, alice, nil)
	wantError(t, r, 413, "answer_too_large")
	if !strings.Contains(r.json(t)["hint"].(string), "Range") {
		t.Fatalf("hint: %s", r.Body)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Logf("the refusal took %s; it must not wait for memory", waited)
	}
	if got := e.srv.budget.Stats().ReservedBytes; got != 0 {
		t.Fatalf("%d bytes still reserved", got)
	}
	// The client asks in windows; each fits.
	const window = 400_000
	for s := 0; s < len(whole); s += window {
		end := min(s+window, len(whole)) - 1
		r := e.do("GET", path, alice, nil, fmt.Sprintf("Range: bytes=%d-%d", s, end))
		if r.Status != 200 {
			t.Fatalf("window %d: %d %s", s, r.Status, r.Body)
		}
		if got := e.assemble(r.Body); string(got[:end-s+1]) != string(whole[s:end+1]) {
			t.Fatalf("window %d: bytes differ", s)
		}
	}
}

// TestCredentialShareAtTheDoor: while one credential holds most of its
// share with a stalled upload, its next large upload waits memory_wait and
// gets 503 memory_busy with Retry-After; another tenant is served at once.
func TestCredentialShareAtTheDoor(t *testing.T) {
	e := newTestEnv(t, smallBudget)
	alice, bob := e.credential("alice", "write"), e.credential("bob", "write")
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/xorbs/default/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\nxx",
		strings.Repeat("ef", 32), alice, 60<<20)
	waitFor(t, "the stalled upload to hold memory", func() bool { return e.srv.budget.Stats().ReservedBytes == 60<<20 })

	body, info := xet.BuildXorb(randomChunks(40, 200, 64<<10), false) // ~12.5MiB: over alice's remaining share
	before := e.snapshot()
	r := e.postXorb(alice, body, info.Hash)
	wantError(t, r, 503, "memory_busy")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("memory_busy without Retry-After")
	}
	if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
		t.Fatal("a refused upload stored something")
	}
	if r := e.postXorb(bob, body, info.Hash); r.Status != 200 {
		t.Fatalf("another tenant: %d %s", r.Status, r.Body)
	}
	conn.Close()
	e.handlers.waitIdle()
	if got := e.srv.budget.Stats().ReservedBytes; got != 0 {
		t.Fatalf("%d bytes reserved after the server finished with the dropped upload, want 0", got)
	}
}
