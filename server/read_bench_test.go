package server

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"openxet/limits"
	"openxet/xet"
)

// BenchmarkAdmittedRead is the server's cost of the abuse scenario's
// flood requests that are admitted, through the whole handler without
// sockets: a reconstruction of a small file with a Range (the abuser's
// own 64 KiB file) and a dedup query for a chunk nobody has, with the
// request log at info (a record per request) and at warn. Sockets and
// HTTP parsing come on top. Run it on one CPU, as a pinned server:
//
//	go test -run '^$' -bench AdmittedRead -benchmem -cpu 1 ./server/
func BenchmarkAdmittedRead(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		b.Run("log="+level.String(), func(b *testing.B) { benchmarkAdmittedRead(b, level) })
	}
}

func benchmarkAdmittedRead(b *testing.B, level slog.Level) {
	e := newTestEnv(b, func(c *Config) {
		c.Limits.CredentialRate = limits.Rate{PerSecond: 1e9, Burst: 1e9}
		c.Limits.TenantRate = limits.Rate{PerSecond: 1e9, Burst: 1e9}
	})
	e.srv.log = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	tok := e.credential("abuser", "write")
	x, _ := xet.BuildXorb(randomChunks(7, 8, 8<<10), false)
	file := e.upload(tok, x)
	h := e.srv.Handler()
	for _, tc := range []struct {
		name, path string
		headers    []string
		want       int
	}{
		{"reconstruction", "/v1/reconstructions/" + file.Hash.String(), []string{"Range: bytes=0-65535"}, http.StatusOK},
		{"dedup-miss", "/v1/chunks/default/" + xet.Hash{9}.String(), nil, http.StatusNotFound},
	} {
		get := func() int { return serveInProcess(h, http.MethodGet, tc.path, tok, tc.headers...).Code }
		b.Run(tc.name, func(b *testing.B) {
			if code := get(); code != tc.want {
				b.Fatalf("status %d, want %d", code, tc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				if code := get(); code != tc.want {
					b.Fatalf("status %d, want %d", code, tc.want)
				}
			}
		})
	}
}
