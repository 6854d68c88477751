package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"openxet/store"
)

// A node started while its index (a PostgreSQL server) does not answer
// does not exit: it listens at once and answers every request while it
// waits, /healthz 200 (the process is alive), /readyz and everything else
// 503 with Retry-After, and opens the store as soon as the index answers.
// An orchestrator then sees a node that is not ready instead of one that
// crash-loops, and clients get a sentence instead of a reset connection.

// Bounds of the waits between two attempts to open the index.
const (
	indexRetryFirst = time.Second
	indexRetryMost  = 10 * time.Second
)

// openStoreWaiting is openStore, retried while the index is unreachable
// (store.ErrUnavailable) with the starting handler serving ln meanwhile
// (over tlsConf when not nil). It returns the store once open; the
// listener is then free for the server, with nothing accepted pending. A
// ctx that is done ends the wait with ctx's error; any other error of
// openStore ends it with that error.
func openStoreWaiting(ctx context.Context, cfg Config, log *slog.Logger, ln net.Listener, tlsConf *tls.Config) (*store.Store, error) {
	st, err := openStore(ctx, cfg, log)
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		return st, err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, err // no deadline to hand the listener back with: fail as before
	}
	log.Warn("the index does not answer; serving 503 until it does", "index", redact(cfg.Index), "err", err)
	w := startWaiting(tl, tlsConf)
	defer w.stop()
	delay := indexRetryFirst
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		st, err := openStore(ctx, cfg, log)
		switch {
		case err == nil:
			log.Info("the index answers; starting", "index", redact(cfg.Index))
			return st, nil
		case !errors.Is(err, store.ErrUnavailable):
			return nil, err
		}
		delay = min(2*delay, indexRetryMost)
		log.Warn("the index still does not answer", "index", redact(cfg.Index), "retry_in", delay, "err", err)
	}
}

// waiting is the starting handler's server on a listener it gives back.
type waiting struct {
	tl    *net.TCPListener
	conns chan net.Conn
	pump  sync.WaitGroup
	hs    *http.Server
}

func startWaiting(tl *net.TCPListener, tlsConf *tls.Config) *waiting {
	w := &waiting{tl: tl, conns: make(chan net.Conn)}
	w.hs = &http.Server{Handler: http.HandlerFunc(w.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	var l net.Listener = &chanListener{conns: w.conns, addr: tl.Addr(), done: make(chan struct{})}
	if tlsConf != nil {
		l = tls.NewListener(l, tlsConf)
	}
	w.pump.Add(1)
	go func() {
		defer w.pump.Done()
		for {
			c, err := tl.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return // stop set a deadline: the listener goes back
				}
				continue
			}
			w.conns <- c
		}
	}()
	go w.hs.Serve(l)
	return w
}

// serveHTTP answers while the node waits for its index.
func (w *waiting) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/healthz" {
		rw.WriteHeader(http.StatusOK)
		fmt.Fprintln(rw, `{"status":"ok"}`)
		return
	}
	rw.Header().Set("Retry-After", "5")
	rw.Header().Set("X-Error-Code", "unavailable")
	rw.WriteHeader(http.StatusServiceUnavailable)
	status := "starting"
	if r.URL.Path != "/readyz" {
		status = "unavailable"
	}
	fmt.Fprintf(rw, `{"status":%q,"error":"unavailable","message":"this node is starting: its index does not answer yet","hint":"retry shortly; the operator's log names the index and the cause"}`+"\n", status)
}

// stop hands the listener back: the accept loop ends at a deadline (the
// listener stays open), the deadline is cleared, and the starting server
// finishes the requests it has.
func (w *waiting) stop() {
	w.tl.SetDeadline(time.Now())
	// A connection accepted just before the deadline still reaches the
	// starting server, which accepts until the pump is done.
	w.pump.Wait()
	close(w.conns)
	w.tl.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.hs.Shutdown(ctx)
}

// chanListener is a net.Listener over connections another loop accepted.
type chanListener struct {
	conns <-chan net.Conn
	addr  net.Addr
	once  sync.Once
	done  chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c, ok := <-l.conns:
		if !ok {
			return nil, net.ErrClosed
		}
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
