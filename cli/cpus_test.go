package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"openxet/budget"
	"openxet/limits"
	"openxet/load"
	"openxet/server"
	"openxet/store"
)

// cpusTestServer is an in-process server that reports its CPUs in
// /metrics as `openxet serve` does.
func cpusTestServer(t *testing.T) (url, token string) {
	t.Helper()
	st, err := store.Open(context.Background(), store.DirConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	registerCPUs(reg)
	srv, err := server.New(server.Config{
		Limits:                limits.DefaultLimits(),
		AuthFailuresPerMinute: 60,
		Budget:                budget.Config{TotalBytes: 512 << 20, CredentialShare: 0.25, TenantShare: 0.5, Wait: time.Second},
		MetricsOnMain:         true,
	}, st, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	_, tok, err := st.CreateCredential(context.Background(), "admin", []string{"admin"})
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, tok
}

// TestLoadChecksServerCPUs: with --server-cpus the run starts only when the
// server reports exactly those CPUs, and the report states the layout.
func TestLoadChecksServerCPUs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU affinity is read on Linux only")
	}
	own, err := processCPUs()
	if err != nil {
		t.Fatal(err)
	}
	url, tok := cpusTestServer(t)
	env := map[string]string{"OPENXET_TOKEN": tok}
	short := []string{"--scenario", "many_tenants", "--server", url, "--duration", "300ms", "--tenants", "2",
		"--think-min", "30ms", "--think-max", "60ms", "--xorb-min", "8KiB", "--xorb-max", "16KiB", "--rss-overhead", "off", "--json"}

	code, _, stderr := runLoadCommand(t, env, append(short, "--server-cpus", "4095")...)
	if code != 2 || !strings.Contains(stderr, "the server runs on CPUs "+own.String()+", not 4095") {
		t.Fatalf("--server-cpus the server does not have: exit %d, stderr %q; want 2 naming both sets", code, stderr)
	}

	code, stdout, stderr := runLoadCommand(t, env, append(short, "--server-cpus", own.String())...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var r load.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not the JSON report: %v", err)
	}
	// Server and load are the same process here: same CPUs, not apart.
	want := load.Layout{ServerCPUs: own.String(), LoadCPUs: own.String(), Pinned: false}
	if r.Layout != want {
		t.Errorf("report layout %+v, want %+v", r.Layout, want)
	}
	if !strings.Contains(stderr, "layout: server on CPUs "+own.String()) {
		t.Errorf("progress does not state the layout: %q", stderr)
	}
}

func TestLoadCPUFlagRefusals(t *testing.T) {
	tok := map[string]string{"OPENXET_TOKEN": "hf_oxt_x"}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--server-cpus", "zero"}, "--server-cpus"},
		{[]string{"--load-cpus", "1-"}, "--load-cpus"},
		{[]string{"--server-cpus", "0", "--load-cpus", "0-1"}, "share a CPU"},
	} {
		code, _, stderr := runLoadCommand(t, tok, append([]string{"--scenario", "abuse"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message about %s", tc.args, code, stderr, tc.says)
		}
	}
}

// TestPinProcess pins a child test process to one CPU and checks that
// every thread it has, including ones started after pinning, may run on
// that CPU alone.
func TestPinProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pinning needs Linux")
	}
	if cpu := os.Getenv("OPENXET_TEST_PIN"); cpu != "" {
		set, err := load.ParseCPUSet(cpu)
		if err != nil {
			t.Fatal(err)
		}
		if err := pinProcess(set); err != nil {
			t.Fatal(err)
		}
		// Make the runtime start more threads after pinning: each of these
		// goroutines keeps its thread to itself until done.
		var started sync.WaitGroup
		done := make(chan struct{})
		defer close(done)
		for range 8 {
			started.Add(1)
			go func() {
				runtime.LockOSThread()
				started.Done()
				<-done
			}()
		}
		started.Wait()
		tasks, _ := filepath.Glob("/proc/self/task/*/status")
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread exited
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != cpu {
					t.Errorf("%s: Cpus_allowed_list %s, want %s", f, strings.TrimSpace(v), cpu)
				}
			}
		}
		if got := runtime.GOMAXPROCS(0); got != 1 {
			t.Errorf("GOMAXPROCS %d after pinning to one CPU", got)
		}
		return
	}
	own, err := processCPUs()
	if err != nil || len(own) == 0 {
		t.Fatalf("processCPUs = %v, %v", own, err)
	}
	cpu := own[len(own)-1]
	cmd := exec.Command(os.Args[0], "-test.run=^TestPinProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OPENXET_TEST_PIN="+load.CPUSet{cpu}.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pinned child: %v\n%s", err, out)
	}
}
