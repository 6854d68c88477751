package server

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"openxet/limits"
	"openxet/work"
	"openxet/xet"
)

// BenchmarkHonestBesideFlood times one honest tenant's index requests
// (reconstructions and dedup queries, alternately) through the whole
// handler, without sockets, while another tenant keeps 32 of the same
// requests in flight (the burst of the abuse scenario, its credential
// limits out of the way), with the work slots as configured and without
// them. ns/op is the honest request's mean; p99-ms its 99th percentile.
// Run it on one CPU, as a server pinned to its own core:
//
//	go test -run '^$' -bench HonestBesideFlood -cpu 1 -benchtime 2000x ./server/
func BenchmarkHonestBesideFlood(b *testing.B) {
	unlimited := limits.Limits{
		TenantRate:               limits.Rate{PerSecond: 1e9, Burst: 1e9},
		CredentialRate:           limits.Rate{PerSecond: 1e9, Burst: 1e9},
		MaxInFlightPerCredential: 512,
		QuotaBytes:               -1,
	}
	for _, tc := range []struct {
		name  string
		flood bool
		work  work.Config
	}{
		{"alone", false, work.Config{}},
		{"flood/slots=off", true, work.Config{Slots: work.MaxSlots, TenantShare: 1, Wait: time.Minute}},
		{"flood/slots=default", true, work.Config{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newTestEnv(b, func(c *Config) { c.Limits, c.Work = unlimited, tc.work })
			honest, abuser := e.credential("honest", "write"), e.credential("abuser", "write")
			var honestFiles, abuserFiles []xet.FileInfo
			for i := range 8 {
				x, _ := xet.BuildXorb(randomChunks(uint64(100+i), 8, 8<<10), false)
				honestFiles = append(honestFiles, e.upload(honest, x))
				y, _ := xet.BuildXorb(randomChunks(uint64(200+i), 8, 8<<10), false)
				abuserFiles = append(abuserFiles, e.upload(abuser, y))
			}
			h := e.srv.Handler()
			get := func(path, token string) int { return serveInProcess(h, http.MethodGet, path, token).Code }
			path := func(r *rand.Rand, files []xet.FileInfo, n int) string {
				if n%2 == 0 {
					return "/v1/reconstructions/" + files[r.IntN(len(files))].Hash.String()
				}
				var c xet.Hash
				for j := range c {
					c[j] = byte(r.Uint32())
				}
				return "/v1/chunks/default/" + c.String()
			}
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			if tc.flood {
				for g := range 32 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(g), 1))
						for n := 0; ctx.Err() == nil; n++ {
							get(path(r, abuserFiles, n), abuser)
						}
					})
				}
			}
			r := rand.New(rand.NewPCG(7, 7))
			var lat []time.Duration
			n := 0
			for b.Loop() {
				start := time.Now()
				if code := get(path(r, honestFiles, n), honest); code != 200 && code != 404 {
					b.Fatalf("honest request: %d", code)
				}
				lat = append(lat, time.Since(start))
				n++
			}
			stop()
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
		})
	}
}
