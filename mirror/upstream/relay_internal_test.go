package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"openxet/mirror"
	"openxet/xet"
)

// TestSpoolFetchCut: a relay range whose upstream answer is cut off fails
// for the readers that followed it, and the next reader fetches it again
// whole; a relay ended under a reader keeps its bytes until that reader
// closes, and opens nothing new.
func TestSpoolFetchCut(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		w.WriteHeader(http.StatusPartialContent)
		if tries.Add(1) == 1 {
			w.Write(body[:300<<10]) // then the connection goes
			panic(http.ErrAbortHandler)
		}
		w.Write(body)
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL, Retries: -1, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h, x := xet.Hash{1}, xet.Hash{2}
	sp, err := c.spoolOf(h, true)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL + "/xorb")
	sp.add(x, fetchEntry{Start: 0, End: 16, URL: u, ByteStart: 0, ByteEnd: uint64(len(body) - 1)})
	ctx := context.Background()

	rc, err := c.Relay(ctx, h, x, 0, uint64(len(body)-1), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err == nil || !errors.Is(err, mirror.ErrUnreachable) || len(got) > 300<<10 {
		t.Fatalf("reader of a cut fetch: %d bytes, %v; want ErrUnreachable", len(got), err)
	}
	rc, err = c.Relay(ctx, h, x, 100, 199, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sp.clients != 1 {
		t.Errorf("a client's open reader: %d clients on the relay, want 1", sp.clients)
	}
	if n, err := rc.(*rangeReader).Landed(ctx); err != nil || n < 1 || n > 100 {
		t.Errorf("Landed before reading: %d, %v; want 1 to 100 bytes", n, err)
	}
	got, err = io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, body[100:200]) || tries.Load() != 2 {
		t.Fatalf("after the cut: %q, %v, %d tries", got, err, tries.Load())
	}
	if n, err := rc.(*rangeReader).Landed(ctx); n != 0 || err != io.EOF {
		t.Errorf("Landed after reading all: %d, %v; want io.EOF", n, err)
	}
	// Ended with that reader open (the fetch's own hold gone once it is
	// done): it still reads, nothing new opens.
	for {
		sp.mu.Lock()
		n := sp.readers
		sp.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	c.Close()
	if _, err := c.Relay(ctx, h, x, 0, 9, nil); !errors.Is(err, mirror.ErrNotFound) {
		t.Errorf("Relay after Close: %v, want ErrNotFound", err)
	}
	rr := rc.(*rangeReader)
	rr.pos = 100
	if got, err := io.ReadAll(rr); err != nil || !bytes.Equal(got, body[100:200]) {
		t.Errorf("the open reader after Close: %v", err)
	}
	rc.Close()
	if _, err := sp.file.Stat(); err == nil {
		t.Error("the spool file is still open after its last reader closed")
	}
	if _, ok, _ := c.spooled(ctx, h, x, fetchEntry{URL: u, ByteEnd: 9}); ok {
		t.Error("a pull reads through an ended relay")
	}
}

// TestQuiet: the pull under a relay waits while a client reads it, starts
// RelayQuiet after the last client is done (a plan counts as a client
// about to read), and waits at most half the relay's time for a client
// that never finishes; a file with no relay does not wait.
func TestQuiet(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Options{BaseURL: "http://127.0.0.1:1", SpoolDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		quiet := func(h xet.Hash) <-chan time.Duration {
			done := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				if err := c.Quiet(ctx, h); err != nil {
					t.Errorf("Quiet: %v", err)
				}
				done <- time.Since(start)
			}()
			return done
		}
		if d := <-quiet(xet.Hash{9}); d != 0 {
			t.Errorf("no relay: waited %v", d)
		}

		h := xet.Hash{7}
		sp, err := c.spoolOf(h, true)
		if err != nil {
			t.Fatal(err)
		}
		c.extend(h, sp, time.Now().Add(c.relayTTL))
		sp.clientSeen(time.Now(), 0) // the plan
		done := quiet(h)
		time.Sleep(100 * time.Millisecond)
		sp.clientSeen(time.Now(), +1) // its client's first fetch
		time.Sleep(2 * time.Second)
		synctest.Wait()
		select {
		case d := <-done:
			t.Fatalf("returned after %v while a client reads", d)
		default:
		}
		sp.clientSeen(time.Now(), -1)
		if d, want := <-done, 2100*time.Millisecond+RelayQuiet; d != want {
			t.Errorf("returned %v after the plan, want %v (%v after the last client)", d, want, RelayQuiet)
		}

		// A client that never closes: at most half the relay's time.
		sp.clientSeen(time.Now(), +1)
		if d := <-quiet(h); d != c.relayTTL/2 {
			t.Errorf("under a reader that stays open: returned after %v, want %v", d, c.relayTTL/2)
		}
	})
}
