// Package servertest runs a whole openxet server for tests of the packages
// it mounts (hub): server.New over a store in a temporary directory, served
// by httptest, closed when the test ends. Only tests import it; the
// server's own tests build the same thing inside package server.
package servertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"openxet/budget"
	"openxet/limits"
	"openxet/server"
	"openxet/store"
	"openxet/xet"
)

// Env is a whole server on httptest with its store in a temp dir.
type Env struct {
	TB     testing.TB
	URL    string // the server's base URL, without a trailing slash
	Store  *store.Store
	Server *server.Server
	Dir    string // the store's data directory (New's); "" for Serve's
	Logs   *Logs  // what the server logged at WARN and above (text handler)
}

// Logs is a server's log, safe for concurrent writes.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Config is the configuration New starts from: the documented default
// limits, no quota, a 1 GiB memory budget, /metrics on the main listener.
func Config() server.Config {
	return server.Config{
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

// New starts a server with Config changed by mutate; tb's cleanup stops it
// and closes its store.
func New(tb testing.TB, mutate ...func(*server.Config)) *Env {
	tb.Helper()
	dir := tb.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		tb.Fatal(err)
	}
	e := Serve(tb, st, mutate...)
	e.Dir = dir
	return e
}

// IndexAgrees fails the test unless reindex --check finds the index and
// the bucket of New's store in agreement.
func (e *Env) IndexAgrees() {
	e.TB.Helper()
	if e.Dir == "" {
		e.TB.Fatal("IndexAgrees needs the store New opened")
	}
	cfg := store.DirConfig(e.Dir)
	diffs, err := store.CheckIndex(context.Background(), store.ReindexConfig{IndexPath: cfg.IndexPath, BucketURL: cfg.BucketURL})
	if err != nil {
		e.TB.Fatal(err)
	}
	for _, d := range diffs {
		e.TB.Errorf("reindex --check: %s", d)
	}
}

// Serve is New over st, a store the caller opened (and that tb's cleanup
// closes).
func Serve(tb testing.TB, st *store.Store, mutate ...func(*server.Config)) *Env {
	tb.Helper()
	cfg := Config()
	for _, m := range mutate {
		m(&cfg)
	}
	logs := &Logs{}
	srv, err := server.New(cfg, st, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})), prometheus.NewRegistry())
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	return &Env{TB: tb, URL: hs.URL, Store: st, Server: srv, Logs: logs}
}

// Credential makes a credential of tenant and returns its token.
func (e *Env) Credential(tenant string, scopes ...string) string {
	e.TB.Helper()
	_, tok, err := e.Store.CreateCredential(context.Background(), tenant, scopes)
	if err != nil {
		e.TB.Fatal(err)
	}
	return tok
}

// Response is an answer, its body read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object, failing tb when it is not one.
func (r Response) JSON(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		tb.Fatalf("body %q is not JSON: %v", r.Body, err)
	}
	return m
}

// Do sends a request with token as its bearer token ("" for none) and
// body (nil for none); headers are "Name: value" strings.
func (e *Env) Do(method, path, token string, body []byte, headers ...string) Response {
	e.TB.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.TB.Fatal(err)
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
		e.TB.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// XetFile uploads a file of two chunks of 20,000 random bytes (seeded)
// through the CAS as hf_xet does, one xorb and then a shard that records
// the file's SHA-256, and returns that SHA-256 in hex and the file's bytes.
func (e *Env) XetFile(token string, seed uint64) (sha256Hex string, content []byte) {
	e.TB.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	chunks := make([][]byte, 2)
	for i := range chunks {
		chunks[i] = make([]byte, 20_000)
		for j := range chunks[i] {
			chunks[i][j] = byte(r.Uint32())
		}
		content = append(content, chunks[i]...)
	}
	body, info := xet.BuildXorb(chunks, false)
	if r := e.Do("POST", "/v1/xorbs/default/"+info.Hash.String(), token, body); r.Status != 200 {
		e.TB.Fatalf("xorb: %d %s", r.Status, r.Body)
	}
	sum := sha256.Sum256(content)
	sha256Hex = hex.EncodeToString(sum[:])
	// The shard records the SHA-256 as a hash whose String is its hex.
	sha, err := xet.ParseHash(sha256Hex)
	if err != nil {
		e.TB.Fatal(err)
	}
	hashes := make([]xet.Hash, len(info.Chunks))
	var leaves []xet.Leaf
	for i, c := range info.Chunks {
		hashes[i] = c.Hash
		leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
	}
	f := xet.FileInfo{
		Hash:         xet.FileHash(leaves),
		Flags:        0x80000000 | xet.FileFlagMetadataExt,
		Terms:        []xet.Term{{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkStart: 0, ChunkEnd: uint32(len(info.Chunks))}},
		Verification: []xet.Hash{xet.RangeHash(hashes)},
		SHA256:       &sha,
	}
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(info)}}
	if r := e.Do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		e.TB.Fatalf("shard: %d %s", r.Status, r.Body)
	}
	return sha256Hex, content
}
