package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"openxet/budget"
	"openxet/limits"
	"openxet/store"
	"openxet/xet"
)

// testEnv is a whole server on httptest with a store in a temp dir.
type testEnv struct {
	t        testing.TB
	st       *store.Store
	srv      *Server
	http     *httptest.Server
	admin    string          // admin token
	handlers *handlerTracker // requests in the handler (httptest only, not serveLive)
}

func testConfig() Config {
	return Config{
		DedupScope: "global",
		SigningKey: bytes.Repeat([]byte{7}, 32),
		Limits: limits.Limits{
			TenantRate:               limits.Rate{PerSecond: 2000, Burst: 4000},
			CredentialRate:           limits.Rate{PerSecond: 1000, Burst: 2000},
			MaxInFlightPerCredential: 512,
			QuotaBytes:               -1,
		},
		AuthFailuresPerMinute: 60,
		Budget:                budget.Config{TotalBytes: 1 << 30, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Second},
		MetricsOnMain:         true,
	}
}

func newTestEnv(t testing.TB, mutate ...func(*Config)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	handlers := newHandlerTracker()
	hs := httptest.NewServer(handlers.wrap(srv.Handler()))
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	e := &testEnv{t: t, st: st, srv: srv, http: hs, handlers: handlers}
	e.admin = e.credential("admin", "admin")
	return e
}

// credential makes a credential and returns its token.
func (e *testEnv) credential(tenant string, scopes ...string) string {
	e.t.Helper()
	_, tok, err := e.st.CreateCredential(context.Background(), tenant, scopes)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.Body, err)
	}
	return m
}

// do sends a request; headers are "Name: value" strings.
func (e *testEnv) do(method, path, token string, body []byte, headers ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// serveInProcess runs one request through h without a socket (httptest
// gives it the client address 192.0.2.1), as the benchmarks do; headers are
// "Name: value" strings.
func serveInProcess(h http.Handler, method, path, token string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, hv := range headers {
		k, v, _ := strings.Cut(hv, ": ")
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// wantError checks a refusal's status and code.
func wantError(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d (body %s)", r.Status, status, r.Body)
	}
	if code == "" {
		return
	}
	m := r.json(t)
	got := m["error"]
	if c, ok := m["code"]; ok {
		got = c // a Hub route: "error" is the sentence, "code" the code
	}
	if got != code {
		t.Fatalf("error code %v, want %s (body %s)", got, code, r.Body)
	}
	if m["message"] == "" || m["message"] == nil {
		t.Fatalf("refusal without a message: %s", r.Body)
	}
}

// randomChunks returns n chunks of random bytes of the given size.
func randomChunks(seed uint64, n, size int) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		out[i] = b
	}
	return out
}

// fileOf builds a shard registering one file made of whole xorbs.
func fileOf(xorbs ...xet.XorbInfo) (xet.FileInfo, []xet.CASInfo) {
	var f xet.FileInfo
	var leaves []xet.Leaf
	var cas []xet.CASInfo
	for _, x := range xorbs {
		hashes := make([]xet.Hash, len(x.Chunks))
		for i, c := range x.Chunks {
			hashes[i] = c.Hash
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.Terms = append(f.Terms, xet.Term{Xorb: x.Hash, UnpackedBytes: uint32(x.UncompressedSize()), ChunkStart: 0, ChunkEnd: uint32(len(x.Chunks))})
		f.Verification = append(f.Verification, xet.RangeHash(hashes))
		cas = append(cas, xet.CASInfoFromXorb(x))
	}
	f.Hash = xet.FileHash(leaves)
	f.Flags = 0x80000000
	return f, cas
}

// snapshot is the state a refused request must leave unchanged.
type snapshot struct {
	Objects []string
	Usage   map[string]int64
	Rows    map[string]int64
}

func (e *testEnv) snapshot() snapshot {
	e.t.Helper()
	ctx := context.Background()
	var s snapshot
	it := e.st.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		s.Objects = append(s.Objects, obj.Key)
	}
	ts, err := e.st.Tenants(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	s.Usage = map[string]int64{}
	for _, tn := range ts {
		s.Usage[tn.Name] = tn.UsageBytes
	}
	if s.Rows, err = e.st.Counts(ctx); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func readAll(res *http.Response) ([]byte, error) {
	defer res.Body.Close()
	return io.ReadAll(res.Body)
}

func storeHashName(s string) string { return store.HashName(s) }

// stalledUpload starts a xorb upload as token whose body stops after two of
// its 1000 bytes, so that the request stays in progress (in flight for its
// credential) until the returned connection is closed, at the latest when
// the test ends. It returns once the server counts the request in flight.
func (e *testEnv) stalledUpload(t *testing.T, token string) net.Conn {
	t.Helper()
	id, _, _ := parseTok(token)
	key := hashName(id)
	before := e.srv.gate.InFlight.Count(key)
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // before the server's Close, which waits for it
	fmt.Fprintf(conn, "POST /v1/xorbs/default/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\nab",
		strings.Repeat("cd", 32), token)
	waitFor(t, "the upload to be in flight", func() bool { return e.srv.gate.InFlight.Count(key) == before+1 })
	return conn
}
