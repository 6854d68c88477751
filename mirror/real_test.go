package mirror_test

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"openxet/mirror"
	"openxet/mirror/upstream"
)

// stoppable is the mirror's HTTP transport to the upstream, which a test
// can stop: every request then fails as a refused connection does.
type stoppable struct{ down atomic.Bool }

func (s *stoppable) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// withRealClient makes the mirror pull through mirror/upstream's Client.
func withRealClient(t *testing.T, u *upstreamEnv, tr *stoppable) func(*mirror.Config) {
	return func(c *mirror.Config) {
		cl, err := upstream.New(upstream.Options{BaseURL: u.URL, Token: u.token, HTTPClient: &http.Client{Transport: tr},
			Retries: -1})
		if err != nil {
			t.Fatal(err)
		}
		c.Upstream = cl
	}
}

// fileRequests is what the upstream's own metrics count of the requests
// that serve file bytes: resolve downloads, reconstructions and fetch URLs.
func (u *upstreamEnv) fileRequests(t *testing.T) int {
	t.Helper()
	r := u.Do("GET", "/metrics", u.admin(t), nil)
	if r.Status != 200 {
		t.Fatalf("upstream /metrics: %d %s", r.Status, r.Body)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "openxet_http_requests_total{") {
			continue
		}
		route := line[strings.Index(line, `route="`)+7:]
		route = route[:strings.Index(route, `"`)]
		if strings.Contains(route, "resolve") || strings.Contains(route, "reconstruction") || strings.Contains(route, "fetch") {
			v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			n += int(v)
		}
	}
	return n
}

func (u *upstreamEnv) admin(t *testing.T) string {
	if u.adminToken == "" {
		u.adminToken = u.Credential("ops", "admin")
	}
	return u.adminToken
}

// TestRealUpstream is the end to end test through the real upstream client
// against a second openxet: first downloads, 20 concurrent first downloads
// of one file fetched once (the upstream's own metrics), a second download
// that makes no upstream file request, and the upstream stopped.
func TestRealUpstream(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(11, 5<<20)
	shared := randomBytes(12, 1<<20)
	config := []byte(`{"model_type": "llama"}`)
	up := u.repo(t, "meta", "tiny", map[string][]byte{"model.safetensors": weights, "tokenizer.bin": shared}, map[string][]byte{"config.json": config})
	tr := &stoppable{}
	e := newMirror(t, u, withRealClient(t, u, tr))
	tok := e.Credential("ci", "read")

	info := e.Do("GET", "/api/models/meta/tiny", tok, nil).JSON(t)
	if info["sha"] != up.SHA {
		t.Fatalf("info sha %v, want %s", info["sha"], up.SHA)
	}
	base := u.fileRequests(t)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 20 {
		wg.Go(func() {
			r := e.Do("GET", "/meta/tiny/resolve/main/model.safetensors", tok, nil)
			if r.Status != 200 || !bytes.Equal(r.Body, weights) {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of 20 concurrent downloads failed", bad.Load())
	}
	one := u.fileRequests(t) - base
	if one == 0 {
		t.Fatal("the upstream's metrics count no file request for the first downloads")
	}
	// One pull of a 5 MiB file in one segment: one reconstruction and its
	// fetch URLs; twenty would be twenty times that.
	if s := e.m.Stats(); s.UpstreamFiles != 1 || s.UpstreamBytes != int64(len(weights))+int64(len(config)) {
		t.Errorf("stats %+v: want 1 file pulled, %d bytes", s, len(weights)+len(config))
	}
	t.Logf("20 concurrent first downloads: %d upstream file requests", one)

	// Second download: no upstream file request.
	before := u.fileRequests(t)
	if r := e.Do("GET", "/meta/tiny/resolve/main/model.safetensors", tok, nil); !bytes.Equal(r.Body, weights) {
		t.Fatal("second download differs")
	}
	if n := u.fileRequests(t) - before; n != 0 {
		t.Errorf("a second download made %d upstream file requests, want 0", n)
	}

	// The upstream stopped.
	tr.down.Store(true)
	e.clock.Advance(mirror.DefaultRefresh + time.Minute)
	if r := e.Do("GET", "/meta/tiny/resolve/main/model.safetensors", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, weights) {
		t.Errorf("mirrored file with the upstream stopped: %d", r.Status)
	}
	r := e.Do("GET", "/meta/tiny/resolve/main/tokenizer.bin", tok, nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "is unreachable") {
		t.Errorf("unmirrored file with the upstream stopped: %d %s", r.Status, r.Body)
	}
	tr.down.Store(false)
	if r := e.Do("GET", "/meta/tiny/resolve/main/tokenizer.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, shared) {
		t.Errorf("tokenizer.bin with the upstream back: %d", r.Status)
	}
	e.checkIndex(t)
}
