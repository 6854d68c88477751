package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

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
