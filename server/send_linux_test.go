//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/work"
	"openxet/xet"
)

// bigFetchURL uploads one xorb of 64 chunks of 64 KiB for tenant alice and
// returns it with the signed URL of all of it, from a reconstruction.
func bigFetchURL(t *testing.T, e *testEnv) ([]byte, string) {
	t.Helper()
	alice := e.credential("alice", "write")
	x, _ := xet.BuildXorb(randomChunks(61, 64, 64<<10), false)
	f := e.upload(alice, x)
	r := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	var rec reconJSON
	if err := json.Unmarshal(r.Body, &rec); r.Status != 200 || err != nil {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	for _, fi := range rec.FetchInfo {
		if len(fi) == 1 && fi[0].URLRange.Start == 0 && fi[0].URLRange.End == uint64(len(x)-1) {
			return x, fi[0].URL
		}
	}
	t.Fatalf("no fetch URL of the whole xorb in %s", r.Body)
	return nil, ""
}

// TestFetchCopiesUnderWorkSlots: a large answer is copied in pieces under
// the tenant's work slots, so it waits its turn while other tenants hold
// the slots, and a reader that stops reading holds none while its socket
// is full.
func TestFetchCopiesUnderWorkSlots(t *testing.T) {
	e := newLiveEnv(t, func(c *Config) { c.Work = work.Config{Slots: 1, TenantShare: 1, Wait: time.Minute} })
	x, url := bigFetchURL(t, e)
	ctx := context.Background()

	// Another tenant holds the only slot: the fetch waits for it.
	hold, err := e.srv.work.Acquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan response, 1)
	go func() { done <- e.fetch(url, "") }()
	for e.srv.work.Stats().Waiting == 0 {
		select {
		case r := <-done:
			t.Fatalf("the fetch was answered (%d, %d bytes) while another tenant held the only work slot", r.Status, len(r.Body))
		case <-time.After(time.Millisecond):
		}
	}
	hold.Release()
	if r := <-done; r.Status != http.StatusPartialContent || !bytes.Equal(r.Body, x) {
		t.Fatalf("fetch: %d, %d bytes, want 206 and the xorb's %d", r.Status, len(r.Body), len(x))
	}

	// A reader that stops after the header: once its socket is full the
	// fetch holds no slot, so another tenant gets one.
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+strings.TrimPrefix(url, e.http.URL)+" HTTP/1.1\r\nHost: openxet\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 4096)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusPartialContent {
		t.Fatalf("slow fetch: %v %v", res, err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hold, err = e.srv.work.AcquireUntilDone(wait, "other")
	if err != nil {
		t.Fatalf("a work slot while a reader keeps its socket full: %v (the fetch holds it)", err)
	}
	hold.Release()
	body, err := io.ReadAll(res.Body)
	if err != nil || !bytes.Equal(body, x) {
		t.Fatalf("slow fetch read %d bytes (%v), want the xorb's %d", len(body), err, len(x))
	}
	if st := e.srv.work.Stats(); st.Held != 0 || st.Waiting != 0 {
		t.Errorf("work slots after the fetches: %+v, want none held or waiting", st)
	}
}

// stallingReader is a landing reader whose first 64 KiB are there at
// once and whose rest arrives only when more is closed: Landed waits for
// it, and so does Read (as a relay's reader would, were it read first).
type stallingReader struct {
	data    []byte
	pos     int
	more    chan struct{}
	waiting chan struct{} // closed when a wait for the rest begins
	once    sync.Once
}

func (r *stallingReader) landed() int {
	if r.pos < 64<<10 {
		return 64<<10 - r.pos
	}
	r.once.Do(func() { close(r.waiting) })
	<-r.more
	return len(r.data) - r.pos
}

func (r *stallingReader) Landed(ctx context.Context) (int64, error) {
	if r.pos >= len(r.data) {
		return 0, io.EOF
	}
	return int64(r.landed()), nil
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.pos >= len(r.data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.landed())], r.data[r.pos:])
	r.pos += n
	return n, nil
}

// TestLandingReaderWaitsWithoutASlot: an answer whose bytes are still
// arriving (a mirror's relay) waits for them without a work slot, so that
// the only slot is free for another tenant meanwhile, and every byte is
// sent once they arrive.
func TestLandingReaderWaitsWithoutASlot(t *testing.T) {
	e := newLiveEnv(t, func(c *Config) { c.Work = work.Config{Slots: 1, TenantShare: 1, Wait: time.Minute} })
	data := bytes.Repeat([]byte("relayed!"), 128<<10) // 1 MiB
	r := &stallingReader{data: data, more: make(chan struct{}), waiting: make(chan struct{})}
	app := echo.New()
	app.GET("/relay", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(data)))
		c.Response().WriteHeader(http.StatusOK)
		_, err := e.srv.sendShared(c, r, make([]byte, fetchBufferBytes))
		return err
	})
	srv := httptest.NewUnstartedServer(app)
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return withConn(ctx, c) }
	srv.Start()
	defer srv.Close()

	got := make(chan []byte, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/relay")
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- b
	}()
	<-r.waiting
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot, err := e.srv.work.Acquire(ctx, "other")
	close(r.more)
	if err != nil {
		<-got
		t.Fatalf("another tenant waited for the only slot while the answer waited for its bytes: %v", err)
	}
	slot.Release()
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("answer: %d bytes, want the %d sent", len(b), len(data))
	}
}
