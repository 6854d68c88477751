package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"openxet/limits"
	"openxet/store"
	"openxet/xet"
)

// BenchmarkRefusedRequest is the server's cost of one request refused
// by its credential's rate limit (`429 rate_limited`), the answer an
// abuser's flood gets most (the abuse load scenario: about 2,800 a second
// beside 1,000 admitted), through the whole handler without sockets: the
// middleware, authentication, the limit check, the refusal's answer and
// its request log record (text, at info and at warn). Sockets and HTTP
// parsing come on top.
//
//	go test -run '^$' -bench RefusedRequest -benchmem ./server/
func BenchmarkRefusedRequest(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		b.Run("log="+level.String(), func(b *testing.B) {
			st, err := store.Open(context.Background(), store.DirConfig(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			cfg := testConfig()
			cfg.Limits.CredentialRate = limits.Rate{PerSecond: 1e-6, Burst: 1}
			log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
			srv, err := New(cfg, st, log, prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			_, tok, err := st.CreateCredential(context.Background(), "abuser", []string{"write"})
			if err != nil {
				b.Fatal(err)
			}
			h := srv.Handler()
			path := "/v1/reconstructions/" + xet.Hash{1}.String()
			get := func() *httptest.ResponseRecorder { return serveInProcess(h, http.MethodGet, path, tok) }
			get() // spends the burst of one
			if rec := get(); rec.Code != http.StatusTooManyRequests {
				b.Fatalf("second request: %d %s, want 429", rec.Code, rec.Body)
			}
			b.ReportAllocs()
			for b.Loop() {
				if rec := get(); rec.Code != http.StatusTooManyRequests {
					b.Fatalf("status %d, want 429", rec.Code)
				}
			}
		})
	}
}

// BenchmarkRefusedRequestManyKeys is BenchmarkRefusedRequest as a busy
// node meets it: a real HTTP request over loopback (keep-alive), each from
// the next of 1,000 credentials of 1,000 tenants, with the limit tables
// holding 100,000 other keys, so that a request's table entries are
// usually not in the CPU's cache. It is the whole-request figure behind
// the rate tables' memory layout (limits/BENCHMARKS.md):
//
//	go test -run '^$' -bench RefusedRequestManyKeys -benchmem -cpu 1 ./server/
func BenchmarkRefusedRequestManyKeys(b *testing.B) {
	e := newTestEnv(b, func(c *Config) {
		c.Limits.CredentialRate = limits.Rate{PerSecond: 1e-6, Burst: 1}
	})
	now := time.Now()
	for i := range 100_000 {
		k := "filler-" + strconv.Itoa(i)
		e.srv.gate.Credentials.Allow(k, limits.Rate{PerSecond: 1, Burst: 1}, now)
		e.srv.gate.Tenants.Allow(k, limits.Rate{PerSecond: 1, Burst: 1}, now)
	}
	toks := make([]string, 1000)
	for i := range toks {
		toks[i] = e.credential("tenant-"+strconv.Itoa(i), "read")
	}
	path := "/v1/reconstructions/" + xet.Hash{1}.String()
	get := func(tok string) int {
		req, err := http.NewRequest(http.MethodGet, e.http.URL+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, tok := range toks {
		get(tok) // spends each credential's burst of one
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if code := get(toks[i%len(toks)]); code != http.StatusTooManyRequests {
			b.Fatalf("status %d, want 429", code)
		}
		i++
	}
}
