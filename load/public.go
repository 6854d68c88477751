package load

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"openxet/load/report"
)

// Defaults and bounds of PublicConfig.
const (
	DefaultPublicReaders   = 200
	DefaultPublicFileBytes = 8 << 20
	maxPublicReaders       = 60_000   // addresses 127.10.0.1 onwards, 250 per /24
	maxPublicFileBytes     = 10 << 20 // a regular file of a commit; more goes through Xet
)

// PublicConfig sizes the public scenario: Readers readers, each from its
// own address of 127.0.0.0/8 (127.10.x.y; Linux routes all of 127/8 to
// loopback, so a client can bind any of them), download one public file of
// FileBytes bytes again and again.
type PublicConfig struct {
	Readers   int
	FileBytes int64
}

// PublicReport is an alias of the report package's.
type PublicReport = report.PublicReport

// publicReaders is the public scenario's owner, its public repo and the
// readers that download from it.
type publicReaders struct {
	cfg    PublicConfig
	owner  string // tenant
	url    string // the file's resolve URL on the first node
	reader credential
	hcs    []*http.Client // one per reader, bound to its address

	mu     sync.Mutex
	phases map[string]*publicPhase
}

// publicPhase counts what the readers got in one phase.
type publicPhase struct {
	start, end time.Time
	bytes      atomic.Int64
	downloads  atomic.Int64
	mu         sync.Mutex
	refusals   map[string]int
	errors     int
}

// readerAddr is reader i's source address: 127.10.0.1 onwards.
func readerAddr(i int) net.IP {
	return net.IPv4(127, byte(10+i/(250*250)), byte(i/250%250), byte(1+i%250))
}

// setUpPublic makes the owner tenant and its public model repo holding one
// file, and a credential of another tenant for the token phase, and checks
// that the server answers an anonymous read of the repo.
func (ru *runner) setUpPublic(ctx context.Context) error {
	cfg := ru.cfg
	pr := &publicReaders{cfg: cfg.Public, owner: "load-" + ru.r.RunID + "-pub", phases: map[string]*publicPhase{}}
	readerTenant := "load-" + ru.r.RunID + "-reader"
	ru.runTenants = append(ru.runTenants, pr.owner, readerTenant)
	own, err := ru.adm.createCredential(ctx, pr.owner)
	if err != nil {
		return err
	}
	ru.track(own)
	if pr.reader, err = ru.adm.createCredential(ctx, readerTenant); err != nil {
		return err
	}
	ru.track(pr.reader)
	base := ru.cfg.Servers[0]
	hc := &http.Client{Transport: newTransport(4, nil), Timeout: 5 * time.Minute}
	ru.onClose(hc.CloseIdleConnections)
	call := func(method, path, token string, body []byte) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, b, err
	}
	ru.progress("public: repo %s/model, one public file of %s", pr.owner, fmtBytes(cfg.Public.FileBytes))
	if st, b, err := call("POST", "/api/repos/create", own.Token, []byte(`{"name":"model","type":"model","visibility":"public"}`)); err != nil || st != 200 {
		return fmt.Errorf("public: create repo: %d %s %v", st, b, err)
	}
	data := make([]byte, cfg.Public.FileBytes)
	rng := rand.New(rand.NewPCG(ru.seed, 77))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	line, _ := json.Marshal(map[string]any{"key": "file", "value": map[string]string{"path": "model.bin", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}})
	body := append([]byte(`{"key":"header","value":{"summary":"public model"}}`+"\n"), line...)
	if st, b, err := call("POST", "/api/models/"+pr.owner+"/model/commit/main", own.Token, body); err != nil || st != 200 {
		return fmt.Errorf("public: commit: %d %s %v", st, b, err)
	}
	pr.url = base + "/" + pr.owner + "/model/resolve/main/model.bin"
	if st, b, err := call("GET", "/api/models/"+pr.owner+"/model", "", nil); err != nil || st != 200 {
		return fmt.Errorf("public: the server does not serve readers without a token (start it with --hub-anonymous-reads): %d %s %v", st, bytes.TrimSpace(b), err)
	}
	for i := range cfg.Public.Readers {
		c := &http.Client{Transport: newTransport(1, readerAddr(i)), Timeout: 5 * time.Minute}
		ru.onClose(c.CloseIdleConnections)
		pr.hcs = append(pr.hcs, c)
	}
	ru.pub = pr
	return nil
}

// run has every reader download the file again and again until ctx ends,
// with token ("" for none), counting into the named phase. A refused
// download waits its Retry-After, as the stock clients do.
func (pr *publicReaders) run(ctx context.Context, phase, token string) {
	p := &publicPhase{start: time.Now(), refusals: map[string]int{}}
	pr.mu.Lock()
	pr.phases[phase] = p
	pr.mu.Unlock()
	var wg sync.WaitGroup
	for _, hc := range pr.hcs {
		wg.Go(func() {
			for ctx.Err() == nil {
				wait := pr.download(ctx, hc, token, p)
				sleepCtx(ctx, wait)
			}
		})
	}
	wg.Wait()
	p.end = time.Now()
}

// download fetches the file once, streaming it, and returns how long to
// wait before the next.
func (pr *publicReaders) download(ctx context.Context, hc *http.Client, token string, p *publicPhase) time.Duration {
	req, err := http.NewRequestWithContext(ctx, "GET", pr.url, nil)
	if err != nil {
		return time.Second
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			p.mu.Lock()
			p.errors++
			p.mu.Unlock()
		}
		return 100 * time.Millisecond
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	if res.StatusCode == http.StatusOK {
		p.bytes.Add(n)
		if err == nil && n == pr.cfg.FileBytes {
			p.downloads.Add(1)
		}
		return 0
	}
	p.mu.Lock()
	p.refusals[strconv.Itoa(res.StatusCode)+" "+res.Header.Get("X-Error-Code")]++
	p.mu.Unlock()
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Second
}

// report sets the readers' figures beside the phases' honest p99 and
// server CPU: phases baseline, public (anonymous) and token.
func (pr *publicReaders) report(phases []PhaseReport) *PublicReport {
	r := &PublicReport{Readers: pr.cfg.Readers, FileBytes: pr.cfg.FileBytes}
	byName := map[string]PhaseReport{}
	for _, ph := range phases {
		byName[ph.Name] = ph
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, name := range []string{"public", "token"} {
		p := pr.phases[name]
		if p == nil || p.end.IsZero() {
			continue
		}
		secs := p.end.Sub(p.start).Seconds()
		ph := report.PublicPhase{Name: name, Downloads: p.downloads.Load(), Bytes: p.bytes.Load(), Errors: p.errors, Refusals: map[string]int{}}
		if secs > 0 {
			ph.BytesPerSecond = float64(ph.Bytes) / secs
		}
		for k, v := range p.refusals {
			ph.Refusals[k] = v
		}
		ph.HonestP99ms = byName[name].Honest.Latency.P99ms
		ph.ServerCPUSeconds = byName[name].ServerCPUSeconds
		if base, ok := byName["baseline"]; ok && ph.Bytes > 0 && ph.ServerCPUSeconds > 0 {
			// The CPU the phase spent beyond the baseline's, per GiB the
			// readers got: what serving them cost.
			extra := ph.ServerCPUSeconds - base.ServerCPUSeconds*byName[name].DurationSeconds/max(base.DurationSeconds, 1e-9)
			ph.ServerCPUSecondsPerGiB = extra / (float64(ph.Bytes) / (1 << 30))
		}
		r.Phases = append(r.Phases, ph)
	}
	sort.Slice(r.Phases, func(i, j int) bool { return r.Phases[i].Name < r.Phases[j].Name })
	if base, ok := byName["baseline"]; ok {
		r.BaselineHonestP99ms = base.Honest.Latency.P99ms
	}
	for _, ph := range r.Phases {
		if ph.Name == "public" && r.BaselineHonestP99ms > 0 {
			r.HonestP99Ratio = ph.HonestP99ms / r.BaselineHonestP99ms
		}
	}
	var anon, tok float64
	for _, ph := range r.Phases {
		switch ph.Name {
		case "public":
			anon = ph.BytesPerSecond
		case "token":
			tok = ph.BytesPerSecond
		}
	}
	if tok > 0 {
		r.AnonymousVsTokenRatio = anon / tok
	}
	return r
}
