package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"
)

// connKey is the request context key of the request's net.Conn (set by the
// http.Server's ConnContext).
type connKey struct{}

// withConn returns ctx carrying c, for sendShared.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

const (
	// sharedPieceMin is the least room for which sendShared copies a piece
	// under a work slot, and the piece it writes without one to a socket
	// with less room (a slow reader's, that drained a little).
	sharedPieceMin = 64 << 10
)

// sendShared copies r to the answer, as io.CopyBuffer with buf would, but
// the copying of a large answer is shared among tenants like their other
// CPU work: each piece of at least sharedPieceMin bytes is read and written
// under a work slot of the request's tenant (AcquireUntilDone: the answer
// is under way, so it waits its turn rather than fail), and only when the
// socket takes the whole piece without blocking (socketRoom), so a slot is
// never held while a slow reader keeps the socket full. A socket with less
// room gets a piece of sharedPieceMin without a slot, which waits there.
//
// Without this, 320 reads of a large xorb opened at once by one tenant
// filled their sockets in the same instant: the server's CPU copied about
// 100 MB while every other tenant's request waited behind those 320
// goroutines (the runs are in commit d295985; BENCHMARKS.md, "Load scenarios").
// Where the socket cannot tell its room (TLS, not Linux), it is a plain
// copy.
func (s *Server) sendShared(c echo.Context, r io.Reader, buf []byte) (int64, error) {
	w := c.Response()
	// Both sides are wrapped so that CopyBuffer uses buf, the memory this
	// request reserved, instead of a WriterTo/ReaderFrom with a buffer of
	// its own (the blob reader's WriteTo allocates 1MiB per call).
	plain := func(written int64) (int64, error) {
		n, err := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, buf)
		return written + n, err
	}
	conn, _ := c.Request().Context().Value(connKey{}).(net.Conn)
	sock := roomOf(conn)
	if sock == nil || len(buf) < sharedPieceMin {
		return plain(0)
	}
	flush := http.NewResponseController(w)
	piece := func(p []byte) (int, error) { return sendPiece(w, r, p) }
	if f, rf := fileSource(r), readerFrom(w); f != nil && rf != nil {
		piece = func(p []byte) (int, error) { return sendFilePiece(w, rf, f, len(p)) }
	}
	lr, _ := r.(landing)
	var written int64
	for {
		// A reader whose bytes are still arriving (a mirror's relay) is
		// waited for here, outside any slot, and read only as far as
		// they have arrived.
		limit := len(buf)
		if lr != nil {
			k, err := lr.Landed(c.Request().Context())
			if errors.Is(err, io.EOF) {
				return written, nil
			} else if err != nil {
				return written, err
			}
			limit = int(min(k, int64(len(buf))))
		}
		room, capacity, ok := sock.measure()
		if !ok {
			return plain(written)
		}
		var n int
		var err error
		if room >= min(sharedPieceMin, capacity/2, limit) && room > 0 {
			slot, aerr := s.answerSlot(c)
			if aerr != nil {
				return written, aerr
			}
			n, err = piece(buf[:min(room, limit)])
			slot.Release()
		} else {
			// A socket with less room takes a piece of sharedPieceMin
			// without a slot: the write waits there for the reader to make
			// room. (Pieces of just the room left would trickle out a few
			// KiB per call, each woken as soon as the reader took a little.)
			// Flushed through net/http's buffers, so that the write reaches
			// the socket and waits there, not in the next slot.
			n, err = piece(buf[:min(sharedPieceMin, limit)])
			if err == nil && n > 0 {
				err = flush.Flush()
			}
		}
		written += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return written, nil
			}
			return written, err
		}
	}
}

// landing is a reader whose bytes arrive while it is read (a mirror's
// relay of an upstream range, mirror/upstream): Landed waits until some
// are there and reports how many can be read without waiting, io.EOF at
// its end.
type landing interface {
	Landed(ctx context.Context) (int64, error)
}

// sendPiece reads up to len(p) bytes from r and writes them to w. It
// returns io.EOF, with the bytes it wrote, once r is done.
func sendPiece(w io.Writer, r io.Reader, p []byte) (int, error) {
	n, rerr := io.ReadFull(r, p)
	if n > 0 {
		if _, err := w.Write(p[:n]); err != nil {
			return 0, err
		}
	}
	switch {
	case rerr == nil:
		return n, nil
	case errors.Is(rerr, io.ErrUnexpectedEOF), errors.Is(rerr, io.EOF):
		return n, io.EOF
	default:
		return n, rerr
	}
}

// fileSource returns the file section behind r when r reads a range of a
// file:// bucket's object (gocloud's fileblob reader: the file, seeked to
// the range, under an io.LimitedReader of its length), else nil.
func fileSource(r io.Reader) *io.LimitedReader {
	a, ok := r.(interface{ As(any) bool })
	if !ok {
		return nil
	}
	var under io.Reader
	if !a.As(&under) {
		return nil
	}
	if lr, ok := under.(*io.LimitedReader); ok {
		if _, ok := lr.R.(*os.File); ok {
			return lr
		}
	}
	return nil
}

// readerFrom returns net/http's own ReadFrom of the answer w (which hands
// an *os.File section to the socket with sendfile and counts the bytes
// against the Content-Length), or nil.
func readerFrom(w *echo.Response) io.ReaderFrom {
	rf, _ := w.Writer.(io.ReaderFrom)
	return rf
}

// sendFilePiece sends up to n bytes of the file section f through rf with
// sendfile: the kernel copies them from the page cache to the socket, and
// they never pass through the request's buffer. It returns io.EOF, with
// the bytes it sent, once f is done.
func sendFilePiece(w *echo.Response, rf io.ReaderFrom, f *io.LimitedReader, n int) (int, error) {
	if f.N <= 0 {
		return 0, io.EOF
	}
	// One LimitedReader straight over the file: net's sendfile looks
	// through one, not two.
	p := &io.LimitedReader{R: f.R, N: min(int64(n), f.N)}
	want := p.N
	sent, err := rf.ReadFrom(p)
	f.N -= sent
	w.Size += sent
	switch {
	case err != nil:
		return int(sent), err
	case sent < want:
		return int(sent), io.ErrUnexpectedEOF // the object is shorter than its index says
	case f.N == 0:
		return int(sent), io.EOF
	}
	return int(sent), nil
}
