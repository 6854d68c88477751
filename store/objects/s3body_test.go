package objects

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// countingConn counts the writes made to a connection and their bytes.
type countingConn struct {
	net.Conn
	writes, bytes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	c.bytes.Add(int64(len(p)))
	return c.Conn.Write(p)
}

// unreadable is a body that fails the test's request if anything reads it.
type unreadable struct{}

func (unreadable) Read([]byte) (int, error) { return 0, errors.New("the SDK's body was read") }
func (unreadable) Close() error             { return nil }

// A request whose context carries its body goes out with that slice, and
// the body above the request headers reaches the socket in one write; a
// request without one is sent as it is.
func TestInPlaceBodyIsOneWriteOfTheSlice(t *testing.T) {
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	var writes, written atomic.Int64
	base := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingConn{c, &writes, &written}, err
		}
	})
	h := newInPlaceHTTP(base)
	if h == nil {
		t.Fatal("no in-place client from a buildable one")
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	req, _ := http.NewRequestWithContext(withPutBody(context.Background(), data), http.MethodPut, srv.URL, unreadable{})
	req.ContentLength = int64(len(data))
	resp, err := h.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !bytes.Equal(got, data) {
		t.Fatalf("server got %d bytes, want the slice's %d", len(got), len(data))
	}
	// net/http's 4 KiB buffer takes the headers and the body's first bytes;
	// the rest is one write.
	if n := writes.Load(); n > 2 {
		t.Errorf("%d writes for a 1 MiB body (%d bytes), want the headers' and one more", n, written.Load())
	}

	// Without the body in its context the request is sent as it is.
	req, _ = http.NewRequest(http.MethodPut, srv.URL, bytes.NewReader([]byte("plain")))
	resp, err = h.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if string(got) != "plain" {
		t.Fatalf("server got %q", got)
	}
	if newInPlaceHTTP(http.DefaultClient) != nil {
		t.Error("an in-place client made from a client that is not the SDK's")
	}
}
