package mirror_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"openxet/mirror"
)

// TestFigures measures the figures of BENCHMARKS.md (docs/mirror.md):
// run with OPENXET_MIRROR_FIGURES=1 go test ./mirror -run TestFigures -v.
// It asserts nothing about time; it logs the figures.
func TestFigures(t *testing.T) {
	if os.Getenv("OPENXET_MIRROR_FIGURES") == "" {
		t.Skip("set OPENXET_MIRROR_FIGURES=1 to measure the mirror's figures")
	}
	const size = 128 << 20
	u := newUpstream(t)
	base := randomBytes(21, size)
	// The fine-tune: the base with one 1 MiB stretch in every 16 MiB changed.
	tuned := bytes.Clone(base)
	for off := 0; off+1<<20 <= size; off += 16 << 20 {
		copy(tuned[off:], randomBytes(uint64(22+off), 1<<20))
	}
	u.repo(t, "org", "base", map[string][]byte{"model.safetensors": base}, nil)
	u.repo(t, "org", "tuned", map[string][]byte{"model.safetensors": tuned}, nil)
	e := newMirror(t, u, withRealClient(t, u, &stoppable{}))
	tok := e.Credential("ci", "read")

	get := func(url, token string) (time.Duration, int) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return time.Since(start), int(n)
	}
	mbps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / (1 << 20) }
	if r := e.Do("GET", "/api/models/org/base", tok, nil); r.Status != 200 {
		t.Fatalf("info: %d", r.Status)
	}
	direct, _ := get(u.URL+"/org/base/resolve/main/model.safetensors", u.token)
	first, n := get(e.URL+"/org/base/resolve/main/model.safetensors", tok)
	if n != size {
		t.Fatalf("first download: %d bytes", n)
	}
	mirrored, _ := get(e.URL+"/org/base/resolve/main/model.safetensors", tok)
	local, _ := get(u.URL+"/org/base/resolve/main/model.safetensors", u.token)
	t.Logf("first download through the mirror %.0f MiB/s vs directly from the upstream %.0f MiB/s: %.2f×", mbps(first), mbps(direct), direct.Seconds()/first.Seconds())
	t.Logf("mirrored download %.0f MiB/s vs a local repo's %.0f MiB/s: %.2f×", mbps(mirrored), mbps(local), local.Seconds()/mirrored.Seconds())

	// 20 concurrent first downloads of the fine-tune.
	if r := e.Do("GET", "/api/models/org/tuned", tok, nil); r.Status != 200 {
		t.Fatalf("info: %d", r.Status)
	}
	before := e.m.Stats().UpstreamBytes
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { get(e.URL+"/org/tuned/resolve/main/model.safetensors", tok) })
	}
	wg.Wait()
	fetched := e.m.Stats().UpstreamBytes - before
	t.Logf("20 concurrent first downloads: upstream bytes fetched / unique bytes served = %d / %d = %.3f", fetched, size, float64(fetched)/size)

	usage, err := e.Store.TenantUsage(context.Background(), mirror.DefaultTenant)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("two related models (base and a fine-tune differing in 1 MiB of every 16 MiB): stored %d bytes for %d (%.2f of the sum)", usage, 2*size, float64(usage)/float64(2*size))
}
