package server

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"openxet/limits"
	"openxet/xet"
)

// BenchmarkBusyCredentialAlone is what turns cost a client that is alone
// on the node: one credential keeps 32 reconstruction requests in flight
// over real sockets, with turns off and at the default
// (server.turns_above_in_flight 8, so most of them take a turn). ns/op is
// the server's time per request at that concurrency; turns/op says how
// many took a turn. Run it as a pinned server runs, on one CPU:
//
//	go test -run '^$' -bench BusyCredentialAlone -cpu 1 -benchtime 20000x ./server/
func BenchmarkBusyCredentialAlone(b *testing.B) {
	for _, above := range []int{0, 8, 1} {
		b.Run(fmt.Sprintf("turns_above=%d", above), func(b *testing.B) {
			e := newTestEnv(b, func(c *Config) {
				c.TurnsAboveInFlight = above
				c.Limits = limits.Limits{TenantRate: limits.Rate{PerSecond: 1e9, Burst: 1e9}, CredentialRate: limits.Rate{PerSecond: 1e9, Burst: 1e9},
					MaxInFlightPerCredential: 512, QuotaBytes: -1}
			})
			b.Cleanup(func() { e.srv.turns.Close() })
			tok := e.credential("alice", "write")
			x, _ := xet.BuildXorb(randomChunks(7, 4, 8<<10), false)
			url := e.http.URL + "/v1/reconstructions/" + e.upload(tok, x).Hash.String()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(client.CloseIdleConnections)
			before := e.srv.turns.Stats().Turns
			b.SetParallelism(32) // 32 × GOMAXPROCS clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", url, nil)
					req.Header.Set("Authorization", "Bearer "+tok)
					res, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						b.Errorf("status %d", res.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(e.srv.turns.Stats().Turns-before)/float64(b.N), "turns/op")
		})
	}
}
