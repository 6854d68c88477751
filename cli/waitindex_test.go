package cli

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"openxet/store/pgtest"
	"openxet/testproc"
)

// TestServeWaitsForItsIndex: a node started while its PostgreSQL index
// does not answer listens at once and answers /healthz 200, /readyz and
// every route 503 with Retry-After and a sentence, logs why, and serves
// normally once the index answers; SIGTERM while it waits stops it
// cleanly.
func TestServeWaitsForItsIndex(t *testing.T) {
	pg := pgtest.Start(t)
	index := pg.NewIndex(t)
	pg.Halt()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			pg.Resume()
		}
	})

	p := startWaitingServe(t, index)
	get := func(path string) (int, http.Header, string) {
		res, err := http.Get(p.url + path)
		if err != nil {
			return 0, nil, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header, string(b)
	}
	if !p.waitFor(func() bool { code, _, _ := get("/healthz"); return code == 200 }) {
		t.Fatalf("no /healthz while the index is down:\n%s", p.stderr)
	}
	for _, path := range []string{"/readyz", "/api/whoami-v2", "/v1/reconstructions/" + strings.Repeat("0", 64)} {
		code, h, body := get(path)
		if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, "its index does not answer yet") {
			t.Errorf("%s while the index is down: %d %v %s", path, code, h, body)
		}
	}
	if !p.waitFor(func() bool { return strings.Contains(p.stderr.String(), "the index does not answer; serving 503") }) {
		t.Errorf("no log line names the wait:\n%s", p.stderr)
	}

	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if !p.waitFor(func() bool { code, _, _ := get("/readyz"); return code == 200 }) {
		t.Fatalf("not ready once the index answers:\n%s", p.stderr)
	}
	if code, _, body := get("/api/whoami-v2"); code != 401 {
		t.Errorf("whoami without a token once started: %d %s", code, body)
	}
	p.stop()

	// SIGTERM while waiting: a clean exit.
	pg.Halt()
	resumed = false
	q := startWaitingServe(t, index)
	if !q.waitFor(func() bool { return strings.Contains(q.stderr.String(), "serving 503") }) {
		t.Fatalf("the second node did not wait:\n%s", q.stderr)
	}
	q.stop()
	if !strings.Contains(q.stderr.String(), "stopped while waiting for its index") {
		t.Errorf("stop while waiting:\n%s", q.stderr)
	}
}

// startWaitingServe starts `openxet serve` on index without waiting for
// it to be ready.
func startWaitingServe(t *testing.T, index string) *proc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", t.TempDir(), "--listen", addr, "--memory-budget", "512MiB", "--index", index)
	cmd.Args[0] = "openxet"
	cmd.Env = append(os.Environ(), "OPENXET_TEST_MAIN=1")
	p := &proc{t: t, cmd: cmd, url: "http://" + addr, stdout: &testproc.Buffer{}, stderr: &testproc.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return p
}
