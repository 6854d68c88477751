package objects

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// A PutObject's body reaches the socket through net/http, which wraps it
// in an io.LimitedReader, and through the SDK, which wraps it in a reader
// of its own. net.TCPConn's ReadFrom then copies it 32 KiB at a time
// through a buffer: a second copy of every byte in user space and one
// write system call per 32 KiB. inPlaceHTTP gives the transport back the
// caller's slice (the context carries it, see withPutBody) and dials
// connections whose ReadFrom writes that slice to the socket in one call,
// straight from where it lies.

// putBodyKey is the context key of a PutObject's body (withPutBody).
type putBodyKey struct{}

// withPutBody returns ctx carrying data, the body of the PutObject made
// with it.
func withPutBody(ctx context.Context, data []byte) context.Context {
	return context.WithValue(ctx, putBodyKey{}, data)
}

// inPlaceHTTP is the SDK's HTTP client for writes: requests whose context
// carries their body (withPutBody) are sent with that slice as the body.
type inPlaceHTTP struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
}

// newInPlaceHTTP derives the writes' client from the S3 client's own (its
// timeouts, proxy and TLS settings), with its own connections; nil when
// that client is not the SDK's buildable one.
func newInPlaceHTTP(c any) *inPlaceHTTP {
	bc, ok := c.(*awshttp.BuildableClient)
	if !ok {
		return nil
	}
	return &inPlaceHTTP{next: bc.WithTransportOptions(func(t *http.Transport) {
		dial := t.DialContext
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return inPlaceConn{c}, nil
		}
	})}
}

func (h *inPlaceHTTP) Do(req *http.Request) (*http.Response, error) {
	data, ok := req.Context().Value(putBodyKey{}).([]byte)
	if !ok || req.Body == nil || req.ContentLength != int64(len(data)) {
		return h.next.Do(req)
	}
	// The SDK's body has not been read (a retry rewinds it and comes here
	// again); close it and send the slice instead.
	req.Body.Close()
	r := req.Clone(req.Context())
	r.Body = sliceBody{bytes.NewReader(data)}
	r.GetBody = func() (io.ReadCloser, error) { return sliceBody{bytes.NewReader(data)}, nil }
	return h.next.Do(r)
}

// sliceBody is a request body read from a byte slice. It is not an
// io.NopCloser, which the transport would hide behind a wrapper of its own.
type sliceBody struct{ *bytes.Reader }

func (sliceBody) Close() error { return nil }

// inPlaceConn is a connection whose ReadFrom writes a sliceBody in one
// call (net/http hands a request body of known length over as an
// io.LimitedReader of the body).
type inPlaceConn struct{ net.Conn }

func (c inPlaceConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if b, ok := lr.R.(sliceBody); ok && int64(b.Len()) <= lr.N {
			n, err := b.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
