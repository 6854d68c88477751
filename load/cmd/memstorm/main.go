// Command memstorm measures the resident memory of an `openxet serve`
// process under an upload storm and after it: it starts the binary given by
// -bin on a fresh data directory with -budget, creates -tenants tenants with
// -creds credentials each, has every credential upload one distinct xorb of
// -xorb bytes at once (retrying 503), -rounds times, then watches the
// server's RSS go back towards idle for -settle.
//
// It prints the idle RSS before the storm, the peak RSS (VmHWM) and the RSS
// every 10 s after the last upload. It is a measurement for BENCHMARKS.md,
// not a test: nothing it prints is asserted anywhere.
//
//	go build -o /tmp/openxet . && go run ./load/cmd/memstorm -bin /tmp/openxet
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"openxet/testproc"
	"openxet/xet"
)

func main() {
	bin := flag.String("bin", "./openxet", "openxet binary to run")
	budget := flag.String("budget", "256MiB", "--memory-budget of the server")
	share := flag.String("share", "0.3", "--credential-memory-share of the server (a 256MiB budget needs more than 0.25 to hold a maximum xorb)")
	tenants := flag.Int("tenants", 4, "tenants")
	creds := flag.Int("creds", 3, "credentials per tenant, each uploading at once")
	xorbMiB := flag.Int("xorb", 60, "xorb size in MiB")
	rounds := flag.Int("rounds", 2, "storms, one after the other")
	settle := flag.Duration("settle", 70*time.Second, "how long to watch RSS after the storm")
	flag.Parse()
	if err := run(*bin, *budget, *share, *tenants, *creds, *xorbMiB, *rounds, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "memstorm:", err)
		os.Exit(1)
	}
}

func run(bin, budget, share string, tenants, creds, xorbMiB, rounds int, settle time.Duration) error {
	dir, err := os.MkdirTemp("", "memstorm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", addr,
		"--memory-budget", budget, "--credential-memory-share", share, "--log-level", "warn")
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	admin, err := testproc.ReadAdminToken(out)
	if err != nil {
		return err
	}
	go io.Copy(io.Discard, out)
	base := "http://" + addr
	if err := testproc.WaitReady(base, 10*time.Second); err != nil {
		return err
	}
	pid := cmd.Process.Pid

	var tokens []string
	for t := range tenants {
		for range creds {
			tok, err := testproc.CreateCredential(base, admin, fmt.Sprintf("storm%d", t))
			if err != nil {
				return err
			}
			tokens = append(tokens, tok)
		}
	}
	time.Sleep(2 * time.Second)
	idle := rss(pid, "VmRSS")
	fmt.Printf("server %s, budget %s (credential share %s), %d tenants × %d credentials × %d MiB xorbs, %d rounds\n", bin, budget, share, tenants, creds, xorbMiB, rounds)
	fmt.Printf("idle RSS before the storm: %d MiB\n", idle>>20)

	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	retries := 0
	for round := range rounds {
		bodies := make([][]byte, len(tokens))
		hashes := make([]xet.Hash, len(tokens))
		for i := range tokens {
			bodies[i], hashes[i] = randomXorb(rng, xorbMiB)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for i, tok := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := upload(base, tok, hashes[i], bodies[i])
				mu.Lock()
				retries += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return fmt.Errorf("round %d: %w", round, firstErr)
		}
	}
	fmt.Printf("storm: %d uploads of %d MiB in %.1f s, %d retries after 503\n", len(tokens)*rounds, xorbMiB, time.Since(start).Seconds(), retries)
	fmt.Printf("peak RSS (VmHWM): %d MiB\n", rss(pid, "VmHWM")>>20)
	done := time.Now()
	for t := time.Duration(0); t <= settle; t += 10 * time.Second {
		time.Sleep(time.Until(done.Add(t)))
		fmt.Printf("RSS %3.0f s after the storm: %d MiB\n", t.Seconds(), rss(pid, "VmRSS")>>20)
	}
	return nil
}

// randomXorb builds a xorb of mib MiB of random 64 KiB chunks.
func randomXorb(rng *rand.Rand, mib int) ([]byte, xet.Hash) {
	chunks := make([][]byte, mib*16)
	for j := range chunks {
		c := make([]byte, 64<<10)
		for k := 0; k < len(c); k += 8 {
			v := rng.Uint64()
			for b := 0; b < 8; b++ {
				c[k+b] = byte(v >> (8 * b))
			}
		}
		chunks[j] = c
	}
	body, info := xet.BuildXorb(chunks, false)
	return body, info.Hash
}

// upload posts one xorb, retrying 503, and returns the number of retries.
func upload(base, tok string, h xet.Hash, body []byte) (int, error) {
	for retries := 0; ; retries++ {
		req, _ := http.NewRequest("POST", base+"/v1/xorbs/default/"+h.String(), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return retries, err
		}
		msg, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode == 200:
			return retries, nil
		case res.StatusCode == 503 && retries < 100:
			time.Sleep(time.Second)
		default:
			return retries, fmt.Errorf("upload: %d %s", res.StatusCode, msg)
		}
	}
}

// rss reads a field (VmRSS, VmHWM) of /proc/pid/status in bytes.
func rss(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}
