package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"openxet/store"
	"openxet/work"
	"openxet/xet"
)

// oneSlotEach: two work slots, one per tenant.
func oneSlotEach(c *Config) {
	c.Work = work.Config{Slots: 2, TenantShare: 0.5, Wait: time.Minute}
}

// TestIndexRoutesWaitForTheirTenantsSlot: every route that reads or writes
// the index takes a work slot for its tenant. While alice holds her share
// of one, each of her index requests waits for it (and completes once she
// lets go), and bob's are served meanwhile.
func TestIndexRoutesWaitForTheirTenantsSlot(t *testing.T) {
	e := newTestEnv(t, oneSlotEach)
	alice, bob := e.credential("alice", "write"), e.credential("bob", "write")
	x1, _ := xet.BuildXorb(randomChunks(60, 3, 20_000), false)
	f := e.upload(alice, x1)
	fb := e.upload(bob, x1)
	x2, info2 := xet.BuildXorb(randomChunks(61, 2, 20_000), false)
	f2, cas2 := fileOf(info2)
	shard2 := (&xet.Shard{Files: []xet.FileInfo{f2}, Xorbs: cas2}).MarshalUpload()
	chunk := f.Terms[0].Xorb // any hash: a dedup query of a chunk nobody has is 404

	cases := []struct {
		name, method, path string
		body               []byte
		status             int
	}{
		{"xorb upload", "POST", "/v1/xorbs/default/" + info2.Hash.String(), x2, 200},
		{"xorb probe", "HEAD", "/v1/xorbs/default/" + info2.Hash.String(), nil, 200},
		{"shard upload", "POST", "/v1/shards", shard2, 200},
		{"reconstruction", "GET", "/v1/reconstructions/" + f.Hash.String(), nil, 200},
		{"dedup query", "GET", "/v1/chunks/default/" + chunk.String(), nil, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held, err := e.srv.work.Acquire(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			done := make(chan response, 1)
			go func() { done <- e.do(tc.method, tc.path, alice, tc.body) }()
			waitFor(t, "alice's request to wait for her slot", func() bool { return e.srv.work.Stats().Waiting == 1 })
			// Bob is not held back by alice's share.
			if r := e.do("GET", "/v1/reconstructions/"+fb.Hash.String(), bob, nil); r.Status != 200 {
				t.Fatalf("bob meanwhile: %d %s", r.Status, r.Body)
			}
			select {
			case r := <-done:
				t.Fatalf("alice's request finished (%d) while her share was held", r.Status)
			default:
			}
			held.Release()
			if r := <-done; r.Status != tc.status {
				t.Fatalf("alice's request: %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if st := e.srv.work.Stats(); st.Held != 0 || st.Waiting != 0 {
				t.Fatalf("after the request: %+v, want nothing held or waiting", st)
			}
		})
	}
}

// TestWorkBusyIs503AndChangesNothing: a request that waits server.work_wait
// for a slot gets 503 unavailable with Retry-After, and stores nothing.
func TestWorkBusyIs503AndChangesNothing(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.Work = work.Config{Slots: 1, TenantShare: 1, Wait: 20 * time.Millisecond} })
	alice := e.credential("alice", "write")
	body, info := xet.BuildXorb(randomChunks(62, 2, 20_000), false)
	held, err := e.srv.work.Acquire(context.Background(), "someone else")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	before := e.snapshot()
	r := e.postXorb(alice, body, info.Hash)
	wantError(t, r, 503, "unavailable")
	if r.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", r.Header.Get("Retry-After"))
	}
	if !strings.Contains(r.json(t)["message"].(string), "work slots") {
		t.Errorf("message %q does not say what was busy", r.json(t)["message"])
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("a refused upload changed state (-before +after):\n%s", diff)
	}
	m := e.do("GET", "/metrics", e.admin, nil)
	for _, want := range []string{"openxet_work_refusals_total 1", "openxet_work_slots 1", "openxet_work_waits_total 1"} {
		if !strings.Contains(string(m.Body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestNoSlotWhileReadingTheBody: an upload whose body is still arriving
// holds memory but no work slot, so with a single slot on the node another
// tenant's index work goes on.
func TestNoSlotWhileReadingTheBody(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.Work = work.Config{Slots: 1, TenantShare: 1, Wait: time.Minute} })
	alice, bob := e.credential("alice", "write"), e.credential("bob", "write")
	x1, _ := xet.BuildXorb(randomChunks(63, 2, 20_000), false)
	fb := e.upload(bob, x1)
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/xorbs/default/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\nxx",
		strings.Repeat("ab", 32), alice, 1<<20)
	waitFor(t, "the stalled upload to hold memory", func() bool { return e.srv.budget.Stats().ReservedBytes == 1<<20 })
	if st := e.srv.work.Stats(); st.Held != 0 {
		t.Fatalf("a stalled body holds %d work slots", st.Held)
	}
	if r := e.do("GET", "/v1/reconstructions/"+fb.Hash.String(), bob, nil); r.Status != 200 {
		t.Fatalf("bob meanwhile: %d %s", r.Status, r.Body)
	}
}

// TestNoSlotWhileStoring: an upload waiting for the index's write lock
// holds no work slot, so with a single slot on the node another tenant's
// reads go on.
func TestNoSlotWhileStoring(t *testing.T) {
	dir := t.TempDir()
	cfg := store.DirConfig(dir)
	cfg.BusyTimeout = time.Minute // the upload waits until the test lets it go
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := testConfig()
	scfg.Work = work.Config{Slots: 1, TenantShare: 1, Wait: time.Minute}
	srv, err := New(scfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	e := &testEnv{t: t, st: st, srv: srv, http: hs}
	alice, bob := e.credential("alice", "write"), e.credential("bob", "write")
	x1, _ := xet.BuildXorb(randomChunks(64, 2, 20_000), false)
	fb := e.upload(bob, x1)

	// Another process's writer holds the index's write lock.
	unlock := holdIndexWriteLock(t, dir)
	granted := srv.work.Stats().Granted
	body, info := xet.BuildXorb(randomChunks(65, 2, 20_000), false)
	done := make(chan response, 1)
	go func() { done <- e.postXorb(alice, body, info.Hash) }()
	// Two sections (ownership and quota reads, then validation) granted and
	// let go: the upload is storing, held up by the write lock.
	waitFor(t, "the upload to wait for the write lock", func() bool {
		st := srv.work.Stats()
		return st.Granted == granted+2 && st.Held == 0
	})
	if r := e.do("GET", "/v1/reconstructions/"+fb.Hash.String(), bob, nil); r.Status != 200 {
		t.Fatalf("bob meanwhile: %d %s", r.Status, r.Body)
	}
	select {
	case r := <-done:
		t.Fatalf("the upload finished (%d %s) before the write lock was let go", r.Status, r.Body)
	default:
	}
	unlock()
	if r := <-done; r.Status != 200 {
		t.Fatalf("the upload once the lock was let go: %d %s", r.Status, r.Body)
	}
}
