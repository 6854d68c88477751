// Command gcupload measures what a running collection pass does to honest
// uploads. It copies the generated data directory given by -data (made by
// TestGCScaleData in store/, see BENCHMARKS.md) to a scratch directory,
// starts the binary given by -bin on the copy with gc.grace 0 and the
// collector loop off, and has -clients uploaders of one tenant each upload
// one distinct xorb and register a shard naming it, one upload after the
// other, in three phases (after a -warmup that is not counted):
//
//   - before: for -phase, no pass running;
//   - during: while one pass runs in the server (POST /api/openxet/v1/admin/gc,
//     as serve's loop runs it), until the pass ends;
//   - after: for -phase again, no pass running.
//
// It prints, per phase, the latency of the whole upload (xorb, then shard)
// and of each request: p50, p99, max; the ratios of the during phase to
// the phases without a pass (before and after together, which evens out
// the drift of a shared machine); and what the pass did. -bin may name
// several binaries (comma-separated): each is measured in turn on a fresh
// copy, and a summary compares them. It is a measurement for
// BENCHMARKS.md, not a test: nothing it prints is asserted anywhere.
//
//	go build -o /tmp/openxet . && go run ./load/cmd/gcupload -bin /tmp/openxet -data /tmp/gcscale
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"openxet/testproc"
	"openxet/xet"
)

func main() {
	bins := flag.String("bin", "./openxet", "openxet binary to run; several, comma-separated, are measured one after the other")
	data := flag.String("data", "", "generated data directory (TestGCScaleData's OPENXET_GC_SCALE_DIR); it is copied, never changed")
	clients := flag.Int("clients", 4, "honest uploaders at once (one credential)")
	chunks := flag.Int("chunks", 16, "chunks of 64 KiB per xorb")
	phase := flag.Duration("phase", time.Minute, "length of the before and after phases")
	warmup := flag.Duration("warmup", 10*time.Second, "uploads before the before phase, not counted")
	scratch := flag.String("scratch", os.TempDir(), "where the copy of -data goes (removed at the end)")
	logFile := flag.String("log", "", "write the server's JSON request log (level info: each request's stage times) to this file (.N appended for the Nth binary)")
	flag.Parse()
	if *data == "" {
		fmt.Fprintln(os.Stderr, "gcupload: -data is required")
		os.Exit(2)
	}
	var lines []string
	for i, bin := range strings.Split(*bins, ",") {
		lf := *logFile
		if lf != "" && strings.Contains(*bins, ",") {
			lf = fmt.Sprintf("%s.%d", lf, i+1)
		}
		fmt.Printf("== %s\n", bin)
		line, err := run(bin, *data, *scratch, lf, *clients, *chunks, *warmup, *phase)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gcupload:", err)
			os.Exit(1)
		}
		lines = append(lines, line)
	}
	if len(lines) > 1 {
		fmt.Println("\n| binary | upload p50 ms no pass / during | upload p99 ms no pass / during | p99 during / no pass | pass |")
		fmt.Println("|---|---|---|---|---|")
		for _, l := range lines {
			fmt.Println(l)
		}
	}
}

// run measures one binary and returns its summary row.
func run(bin, data, scratch, logFile string, clients, chunks int, warmup, phase time.Duration) (string, error) {
	tmp, err := os.MkdirTemp(scratch, "gcupload")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "data")
	start := time.Now()
	if out, err := exec.Command("cp", "-a", data, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copy %s: %v: %s", data, err, out)
	}
	// Written back now, not while the uploads are timed.
	if out, err := exec.Command("sync").CombinedOutput(); err != nil {
		return "", fmt.Errorf("sync: %v: %s", err, out)
	}
	fmt.Printf("copied %s in %.0f s\n", data, time.Since(start).Seconds())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"serve", "--data-dir", dir, "--listen", addr, "--gc-grace", "0s", "--gc-interval", "0s"}
	var serverLog io.Writer = os.Stderr
	if logFile != "" {
		f, err := os.Create(logFile)
		if err != nil {
			return "", err
		}
		defer f.Close()
		args, serverLog = append(args, "--log-level", "info", "--log-format", "json"), f
	} else {
		args = append(args, "--log-level", "warn")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = serverLog
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	admin, err := testproc.ReadAdminToken(out)
	if err != nil {
		return "", err
	}
	go io.Copy(io.Discard, out)
	base := "http://" + addr
	if err := testproc.WaitReady(base, time.Minute); err != nil {
		return "", err
	}
	tok, err := testproc.CreateCredential(base, admin, "honest")
	if err != nil {
		return "", err
	}
	fmt.Printf("server %s on a copy of %s; %d uploaders of one tenant, xorbs of %d × 64 KiB; load average %s\n", bin, data, clients, chunks, loadavg())

	u := &uploader{base: base, token: tok, chunks: chunks}
	u.phase(clients, func(ctx context.Context) { sleepCtx(ctx, warmup) })
	before := u.phase(clients, func(ctx context.Context) { sleepCtx(ctx, phase) })
	var rep gcReport
	var gcErr error
	during := u.phase(clients, func(ctx context.Context) { rep, gcErr = runPass(base, admin) })
	if gcErr != nil {
		return "", gcErr
	}
	after := u.phase(clients, func(ctx context.Context) { sleepCtx(ctx, phase) })

	fmt.Printf("\nload average at the end %s\n\n", loadavg())
	fmt.Println("| phase | uploads | errors | upload p50 ms | upload p99 ms | upload max ms | xorb p50 / p99 ms | shard p50 / p99 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	idle := before.merge(after)
	for _, p := range []struct {
		name string
		r    result
	}{{"before", before}, {"during the pass", during}, {"after", after}, {"no pass (before and after)", idle}} {
		r := p.r
		fmt.Printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f / %.1f | %.1f / %.1f |\n", p.name, len(r.total), r.errors,
			ms(pct(r.total, 50)), ms(pct(r.total, 99)), ms(pct(r.total, 100)),
			ms(pct(r.xorb, 50)), ms(pct(r.xorb, 99)), ms(pct(r.shard, 50)), ms(pct(r.shard, 99)))
	}
	ratio := func(a, b []time.Duration, q float64) float64 { return float64(pct(a, q)) / float64(pct(b, q)) }
	fmt.Printf("\nduring / no pass: upload p50 ×%.2f, p99 ×%.2f; xorb p99 ×%.2f; shard p99 ×%.2f\n",
		ratio(during.total, idle.total, 50), ratio(during.total, idle.total, 99),
		ratio(during.xorb, idle.xorb, 99), ratio(during.shard, idle.shard, 99))
	fmt.Printf("pass: %.1f s, released %d owners (%d bytes) and %d shard owners, deleted %d xorbs and %d shards (%d bytes), deferred %d\n",
		rep.Duration.Seconds(), rep.ReleasedOwners, rep.ReleasedBytes, rep.ReleasedShardOwners, rep.DeletedXorbs, rep.DeletedShards, rep.DeletedBytes, rep.Deferred)
	for _, r := range []result{before, during, after} {
		if r.firstErr != nil {
			fmt.Printf("first error: %v\n", r.firstErr)
			break
		}
	}
	return fmt.Sprintf("| %s | %.1f / %.1f | %.1f / %.1f | ×%.2f | %.0f s |", bin, ms(pct(idle.total, 50)), ms(pct(during.total, 50)),
		ms(pct(idle.total, 99)), ms(pct(during.total, 99)), ratio(during.total, idle.total, 99), rep.Duration.Seconds()), nil
}

// gcReport is the part of the pass's report this prints.
type gcReport struct {
	Duration            time.Duration `json:"duration_ns"`
	ReleasedOwners      int           `json:"released_owners"`
	ReleasedBytes       int64         `json:"released_bytes"`
	ReleasedShardOwners int           `json:"released_shard_owners"`
	DeletedXorbs        int           `json:"deleted_xorbs"`
	DeletedShards       int           `json:"deleted_shards"`
	DeletedBytes        int64         `json:"deleted_bytes"`
	Deferred            int           `json:"deferred"`
}

func runPass(base, admin string) (gcReport, error) {
	req, _ := http.NewRequest("POST", base+"/api/openxet/v1/admin/gc", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return gcReport{}, fmt.Errorf("gc pass: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return gcReport{}, fmt.Errorf("gc pass: %d %s", res.StatusCode, body)
	}
	var rep gcReport
	return rep, json.Unmarshal(body, &rep)
}

type uploader struct {
	base, token string
	chunks      int
	mu          sync.Mutex
	seed        uint64
}

type result struct {
	total, xorb, shard []time.Duration
	errors             int
	firstErr           error
}

// merge returns the latencies of r and o together.
func (r result) merge(o result) result {
	sorted := func(a, b []time.Duration) []time.Duration {
		s := slices.Concat(a, b)
		slices.Sort(s)
		return s
	}
	m := result{total: sorted(r.total, o.total), xorb: sorted(r.xorb, o.xorb), shard: sorted(r.shard, o.shard), errors: r.errors + o.errors, firstErr: r.firstErr}
	if m.firstErr == nil {
		m.firstErr = o.firstErr
	}
	return m
}

// phase runs the uploaders until during returns, and gathers their
// latencies.
func (u *uploader) phase(clients int, during func(ctx context.Context)) result {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var res result
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				body, sh, h := u.next()
				t0 := time.Now()
				err := u.post("/v1/xorbs/default/"+h.String(), body)
				t1 := time.Now()
				if err == nil {
					err = u.post("/v1/shards", sh)
				}
				t2 := time.Now()
				mu.Lock()
				if err != nil {
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					res.total = append(res.total, t2.Sub(t0))
					res.xorb = append(res.xorb, t1.Sub(t0))
					res.shard = append(res.shard, t2.Sub(t1))
				}
				mu.Unlock()
			}
		})
	}
	during(ctx)
	stop()
	wg.Wait()
	for _, s := range [][]time.Duration{res.total, res.xorb, res.shard} {
		slices.Sort(s)
	}
	return res
}

// next builds a xorb of random chunks nobody has and the shard that
// registers it as one file.
func (u *uploader) next() ([]byte, []byte, xet.Hash) {
	u.mu.Lock()
	u.seed++
	seed := u.seed
	u.mu.Unlock()
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	chunks := make([][]byte, u.chunks)
	for i := range chunks {
		c := make([]byte, 64<<10)
		for k := 0; k < len(c); k += 8 {
			v := r.Uint64()
			for b := range 8 {
				c[k+b] = byte(v >> (8 * b))
			}
		}
		chunks[i] = c
	}
	body, info := xet.BuildXorb(chunks, false)
	hashes := make([]xet.Hash, len(info.Chunks))
	leaves := make([]xet.Leaf, len(info.Chunks))
	for i, c := range info.Chunks {
		hashes[i] = c.Hash
		leaves[i] = xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)}
	}
	f := xet.FileInfo{
		Hash:         xet.FileHash(leaves),
		Flags:        xet.FileFlagVerification,
		Terms:        []xet.Term{{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkEnd: uint32(len(info.Chunks))}},
		Verification: []xet.Hash{xet.RangeHash(hashes)},
	}
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(info)}}
	return body, sh.MarshalUpload(), info.Hash
}

var client = &http.Client{Timeout: 5 * time.Minute}

func (u *uploader) post(path string, body []byte) error {
	req, _ := http.NewRequest("POST", u.base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+u.token)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return fmt.Errorf("POST %s: %d %s", path, res.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

func pct(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*q/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
