package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// The slow-client tests run the server through Server.Serve (newLiveEnv)
// with short timeouts. Their clients pace their own writes with a ticker
// (that is the behaviour under test, not a wait for a condition) and wait
// for the server with blocking reads under a deadline.

const (
	slowHeaderTimeout = 300 * time.Millisecond
	slowBodyTimeout   = 500 * time.Millisecond
	slowIdleTimeout   = 500 * time.Millisecond
	// slowBound is how long a test waits for a cut-off that should come
	// after one of the timeouts above. It only catches a server that never
	// cuts the client off (a test asserts no upper bound on when): a
	// loaded two-core machine under -race can take seconds.
	slowBound = time.Minute
)

func slowEnv(t *testing.T) *testEnv {
	return newLiveEnv(t, func(c *Config) {
		c.ReadHeaderTimeout = slowHeaderTimeout
		c.BodyReadTimeout = slowBodyTimeout
		c.IdleTimeout = slowIdleTimeout
		c.ShutdownTimeout = time.Second
	})
}

// slowClient writes head at once, then trickle one byte per tick (if not
// empty), and reports when and how the server ended the exchange: with a
// response (its status) or by closing the connection (status 0). After a
// response it reads on, to see whether the server then closed the
// connection or kept it open until the bound.
type slowResult struct {
	status int
	// close: the answer carried Connection: close (http.ReadResponse
	// turns that header into Response.Close).
	close   bool
	body    []byte
	elapsed time.Duration
	err     error // the client gave up (slowBound passed) or could not connect
	// afterAnswer is what a read after the response got: io.EOF or a reset
	// when the server closed the connection, a timeout when it was still
	// open at the bound, nil if the server sent more bytes.
	afterAnswer error
}

// closedAfterAnswer reports whether the server closed the connection after
// its answer (the read after it got EOF or a reset, not a timeout or data).
func (r slowResult) closedAfterAnswer() bool {
	var ne net.Error
	return r.afterAnswer != nil && !(errors.As(r.afterAnswer, &ne) && ne.Timeout())
}

func (e *testEnv) slowClient(head []byte, trickle []byte, every, bound time.Duration) slowResult {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		return slowResult{err: err}
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(start.Add(bound))
	if _, err := conn.Write(head); err != nil {
		return slowResult{err: err}
	}
	stop := make(chan struct{})
	defer close(stop)
	if len(trickle) > 0 {
		go func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for _, b := range trickle {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte{b}); err != nil {
					return
				}
			}
		}()
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	elapsed := time.Since(start)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return slowResult{elapsed: elapsed, err: fmt.Errorf("still connected after %s", bound)}
		}
		// io.EOF, ECONNRESET: the server closed the connection.
		return slowResult{elapsed: elapsed}
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	_, after := br.ReadByte()
	return slowResult{status: res.StatusCode, close: res.Close, body: body, elapsed: elapsed, afterAnswer: after}
}

// TestSlowHeaderClientsAreCutOff: a client that sends part of its headers
// and stops, or sends them a byte at a time, is disconnected once
// ReadHeaderTimeout has passed since it connected.
func TestSlowHeaderClientsAreCutOff(t *testing.T) {
	e := slowEnv(t)
	tok := e.credential("alice", "read")
	head := "GET /v1/reconstructions/" + fmt.Sprint(xet.Hash{}) + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n"
	cases := map[string]struct {
		head, trickle string
	}{
		"stalled":                     {head, ""},
		"a byte every 50ms":           {"", head + "X-Slow: " + string(make([]byte, 1000))},
		"never sends a byte":          {"", ""},
		"stalled in the request line": {"GET /v1/reconstruc", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := e.slowClient([]byte(c.head), []byte(c.trickle), 50*time.Millisecond, slowBound)
			if r.err != nil {
				t.Fatal(r.err)
			}
			// net/http closes the connection, or answers a plain 400 when
			// part of a request had come.
			if r.status != 0 && r.status != http.StatusBadRequest && r.status != http.StatusRequestTimeout {
				t.Fatalf("answered %d %s", r.status, r.body)
			}
			if r.elapsed < slowHeaderTimeout/2 {
				t.Fatalf("cut off after %s, before the %s header timeout", r.elapsed, slowHeaderTimeout)
			}
			t.Logf("cut off after %s", r.elapsed.Round(time.Millisecond))
		})
	}
}

// TestSlowBodyClientsAreCutOff: an upload whose body stops coming, or comes
// a byte at a time, is refused once BodyReadTimeout has passed, leaves no
// state, and gives back its in-flight slot and its memory.
func TestSlowBodyClientsAreCutOff(t *testing.T) {
	e := slowEnv(t)
	tok := e.credential("alice", "write")
	id, _, _ := parseTok(tok)
	x, info := xet.BuildXorb(randomChunks(60, 2, 50_000), false)
	f, cas := fileOf(info)
	shard := (&xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}).MarshalUpload()
	uploads := []struct {
		name, path string
		body       []byte
	}{
		{"xorb", "/v1/xorbs/default/" + info.Hash.String(), x},
		{"shard", "/v1/shards", shard},
		{"v2 shard", "/v2/shards", shard},
	}
	before := e.snapshot()
	for _, u := range uploads {
		for _, trickle := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s trickle=%v", u.name, trickle), func(t *testing.T) {
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", u.path, tok, len(u.body))
				first, rest := u.body[:100], []byte(nil)
				if trickle {
					rest = u.body[100:]
				}
				r := e.slowClient(append([]byte(head), first...), rest, 20*time.Millisecond, slowBound)
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.status != 400 {
					t.Fatalf("answer %d %s, want 400 bad_request", r.status, r.body)
				}
				wantError(t, response{Status: r.status, Body: r.body}, 400, "bad_request")
				// The body was cut off: the refusal closes the connection at
				// once instead of reading the rest under a new timeout (and
				// parsing what follows as another request).
				if !r.close {
					t.Errorf("refusal without Connection: close")
				}
				if !r.closedAfterAnswer() {
					t.Errorf("after the refusal the connection was not closed (read: %v)", r.afterAnswer)
				}
				if r.elapsed < slowBodyTimeout/2 {
					t.Fatalf("cut off after %s, before the %s body timeout", r.elapsed, slowBodyTimeout)
				}
				e.handlers.waitIdle()
				if n, b := e.srv.gate.InFlight.Count(hashName(id)), e.srv.budget.Stats().ReservedBytes; n != 0 || b != 0 {
					t.Fatalf("after the refusal: %d in flight, %d bytes reserved; want both given back", n, b)
				}
				if diff := cmp.Diff(before, e.snapshot()); diff != "" {
					t.Fatalf("state changed:\n%s", diff)
				}
			})
		}
	}
}

// TestSlowBodyOnOtherRoutes: every route that reads a body stops waiting
// for a client that stalls in the middle of it.
func TestSlowBodyOnOtherRoutes(t *testing.T) {
	e := slowEnv(t)
	tok := e.credential("alice", "write")
	if r := e.do("POST", "/api/repos/create", tok, []byte(`{"name":"m"}`)); r.Status != 200 {
		t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
	routes := []struct{ method, path, token string }{
		{"POST", "/v1/telemetry", tok},
		{"POST", "/api/validate-yaml", tok},
		{"POST", "/api/repos/create", tok},
		{"POST", "/api/models/alice/m/preupload/main", tok},
		{"POST", "/api/models/alice/m/commit/main", tok},
		{"PUT", "/api/openxet/v1/admin/tenants/alice/limits", e.admin},
		{"POST", "/api/openxet/v1/admin/credentials", e.admin},
		{"GET", "/healthz", ""},
	}
	// All at once.
	results := make([]slowResult, len(routes))
	var wg sync.WaitGroup
	for i, rt := range routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\n{\"", rt.method, rt.path, rt.token)
			results[i] = e.slowClient([]byte(head), nil, 0, slowBound)
		}()
	}
	wg.Wait()
	for i, r := range results {
		rt := routes[i]
		if r.err != nil {
			t.Errorf("%s %s: %v: a client that stalls mid-body holds the route (the server must bound body reads with BodyReadTimeout)", rt.method, rt.path, r.err)
			continue
		}
		if r.elapsed < slowBodyTimeout/2 {
			t.Errorf("%s %s: ended after %s, before the body timeout", rt.method, rt.path, r.elapsed)
		}
		if r.status >= 400 && (!r.close || !r.closedAfterAnswer()) {
			t.Errorf("%s %s: refusal %d (Connection: close %v), then %v; want Connection: close, then the connection closed", rt.method, rt.path, r.status, r.close, r.afterAnswer)
		}
		t.Logf("%s %s: ended after %s (status %d)", rt.method, rt.path, r.elapsed.Round(time.Millisecond), r.status)
	}
}

// openConns opens idle connections that send nothing, then stalled ones
// that send a request line and one header and stop.
func openConns(t *testing.T, e *testEnv, tok string, idle, stalled int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < idle+stalled; i++ {
		c, err := net.Dial("tcp", e.http.Listener.Addr().String())
		if err != nil {
			if errors.Is(err, syscall.EMFILE) {
				t.Skipf("out of file descriptors after %d connections", i)
			}
			t.Fatal(err)
		}
		if i >= idle {
			fmt.Fprintf(c, "POST /v1/shards HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n", tok)
		}
		conns = append(conns, c)
	}
	return conns
}

// TestIdleConnectionsDoNotStopService: a thousand connections that never
// send a request, and a hundred that stalled in their headers, do not slow
// other clients down; the server closes them all after ReadHeaderTimeout,
// and a keep-alive connection after IdleTimeout.
//
// The service check runs with a header timeout longer than any test run, so
// that none of the idle connections can be cut off while it runs, however
// slow the machine: a server that served others only once they were gone
// would hang there. The cut-off is checked on a second server with short
// timeouts.
func TestIdleConnectionsDoNotStopService(t *testing.T) {
	const idle, stalled = 1000, 100
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 2*(idle+stalled)+200 {
		t.Skipf("open-file limit %d is too low for %d connections at both ends", lim.Cur, idle+stalled)
	}

	t.Run("service", func(t *testing.T) {
		e := newLiveEnv(t, func(c *Config) {
			c.ReadHeaderTimeout = time.Hour
			c.ShutdownTimeout = time.Second
		})
		tok := e.credential("alice", "write")
		conns := openConns(t, e, tok, idle, stalled)
		// Service to another client: upload a file and read it back.
		start := time.Now()
		x1, _ := xet.BuildXorb(randomChunks(61, 3, 20_000), true)
		f := e.upload(tok, x1)
		r := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), tok, nil)
		if r.Status != 200 {
			t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
		}
		if got := e.assemble(r.Body); len(got) != int(f.Size()) {
			t.Fatalf("read back %d bytes, want %d", len(got), f.Size())
		}
		for i := 0; i < 20; i++ {
			if r := e.do("GET", "/healthz", "", nil); r.Status != 200 {
				t.Fatalf("healthz: %d", r.Status)
			}
		}
		t.Logf("with %d idle and %d stalled connections open, an upload, a download and 20 probes took %s", len(conns)-stalled, stalled, time.Since(start).Round(time.Millisecond))
	})

	t.Run("cut off", func(t *testing.T) {
		e := newLiveEnv(t, func(c *Config) {
			c.ReadHeaderTimeout = slowHeaderTimeout
			c.IdleTimeout = slowIdleTimeout
			c.ShutdownTimeout = time.Second
		})
		tok := e.credential("alice", "write")
		opened := time.Now()
		conns := openConns(t, e, tok, idle, stalled)
		// The server closes every one of them after the header timeout.
		deadline := time.Now().Add(slowHeaderTimeout + slowBound)
		buf := make([]byte, 1)
		for i, c := range conns {
			c.SetReadDeadline(deadline)
			_, err := c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection %d still open %s after it was opened", i, time.Since(opened))
			}
		}
		if elapsed := time.Since(opened); elapsed < slowHeaderTimeout/2 {
			t.Fatalf("connections closed after %s, before the header timeout", elapsed)
		}

		// A keep-alive connection that goes idle after a request is closed
		// after IdleTimeout.
		conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", res, err)
		}
		io.ReadAll(res.Body)
		idleFrom := time.Now()
		conn.SetReadDeadline(idleFrom.Add(slowBound))
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("the server sent more after the answer")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("idle keep-alive connection still open after %s", slowBound)
		} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Logf("idle connection ended with %v", err)
		}
		t.Logf("idle keep-alive connection closed after %s (IdleTimeout %s)", time.Since(idleFrom).Round(time.Millisecond), slowIdleTimeout)
	})
}

// TestRefusalOfAnUnreadBodyClosesTheConnection: a refusal of a request
// whose body the server did not read answers at once with Connection:
// close, reads and drops the body the client goes on sending (so the
// client sees the answer, not a reset), then closes the connection. The
// answer to a xorb the tenant already owns is not a refusal: the connection
// stays open for the next request.
func TestRefusalOfAnUnreadBodyClosesTheConnection(t *testing.T) {
	e := slowEnv(t)
	alice := e.credential("alice", "write")
	reader := e.credential("alice", "read")
	body, info := xet.BuildXorb(randomChunks(62, 3, 40_000), false)
	if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	path := "/v1/xorbs/default/" + info.Hash.String()
	post := func(tok string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", path, tok, len(body), body)
	}
	for _, c := range []struct {
		name, tok string
		status    int
	}{{"no token", "", 401}, {"read credential", reader, 403}} {
		t.Run(c.name, func(t *testing.T) {
			r := e.slowClient([]byte(post(c.tok)), nil, 0, slowBound)
			if r.err != nil || r.status != c.status {
				t.Fatalf("answer %d %s (%v), want %d", r.status, r.body, r.err, c.status)
			}
			if !r.close || !r.closedAfterAnswer() {
				t.Fatalf("refusal with Connection: close %v, then %v; want close, then the connection closed", r.close, r.afterAnswer)
			}
		})
	}
	t.Run("owned xorb keeps the connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(slowBound))
		go conn.Write([]byte(post(alice) + "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		br := bufio.NewReader(conn)
		for i, want := range []string{`{"was_inserted":false}`, `{"status":"ok"}`} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 || res.Close || strings.TrimSpace(string(b)) != want {
				t.Fatalf("answer %d: %d close=%v %s, want 200 %s on an open connection", i, res.StatusCode, res.Close, b, want)
			}
		}
	})
}
