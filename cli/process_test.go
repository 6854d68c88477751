package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"openxet/testproc"
	"openxet/xet"
)

// The test binary doubles as the openxet binary: with OPENXET_TEST_MAIN set
// it runs the command line instead of the tests, so process tests exercise
// real, separate processes.
func TestMain(m *testing.M) {
	if step := os.Getenv("OPENXET_TEST_GC_KILL_AT"); step != "" {
		os.Exit(gcKillChild(os.Getenv("OPENXET_TEST_GC_DIR"), step)) // lifecycle_test.go
	}
	// `openxet load` starts the abuser as this executable's load-abuser.
	if os.Getenv("OPENXET_TEST_MAIN") == "1" || (len(os.Args) > 1 && os.Args[1] == loadAbuserName) {
		ctx, stop := signalContext()
		code := Run(ctx, os.Args, os.Stdout, os.Stderr, os.LookupEnv)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signalNotify(ch)
	go func() {
		<-ch
		cancel()
	}()
	return ctx, cancel
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	stdout *testproc.Buffer
	stderr *testproc.Buffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startServe runs `openxet serve` as a child process and waits until it
// answers /readyz.
func startServe(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	return startServeEnv(t, dataDir, nil, extra...)
}

// startServeEnv is startServe with env added to the child's environment.
func startServeEnv(t *testing.T, dataDir string, env []string, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", addr, "--memory-budget", "512MiB"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Args[0] = "openxet"
	cmd.Env = append(append(os.Environ(), env...), "OPENXET_TEST_MAIN=1")
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
		if t.Failed() {
			t.Logf("server stderr:\n%s", p.stderr)
		}
	})
	ready := func() bool {
		res, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	}
	if !p.waitFor(ready) {
		t.Fatalf("server did not become ready within %s:\n%s", childWait, p.stderr)
	}
	return p
}

// childWait bounds a wait for a child process to reach a state. It only
// catches a child that never gets there: a race-enabled child on a loaded
// two-core machine may take many seconds to start.
const childWait = 2 * time.Minute

// waitFor polls cond, a state of the child process no virtual clock can
// reach, until it holds (true) or childWait has passed (false).
func (p *proc) waitFor(cond func() bool) bool {
	deadline := time.Now().Add(childWait)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling a child process
	}
	return true
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("serve exited with %v\n%s", err, p.stderr)
	}
}

// adminToken is the first admin token the server printed. The server
// prints it before it answers /readyz, but the line may still be on its way
// through the pipe to this process: wait for it.
func (p *proc) adminToken(t *testing.T) string {
	t.Helper()
	p.waitFor(func() bool { return strings.Contains(p.stdout.String(), "store it now): ") })
	return adminToken(t, p.stdout.String())
}

func adminToken(t *testing.T, out string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if _, tok, ok := strings.Cut(sc.Text(), "store it now): "); ok {
			return strings.TrimSpace(tok)
		}
	}
	t.Fatalf("no admin token in %q", out)
	return ""
}

func request(t *testing.T, method, url, token string, body io.Reader) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func TestTwoProcessesShareADataDir(t *testing.T) {
	dir := t.TempDir()
	a := startServe(t, dir)
	admin := a.adminToken(t)
	b := startServe(t, dir)
	if strings.Contains(b.stdout.String(), "Token") {
		t.Fatal("second process printed another admin credential")
	}
	// A credential made through A works on B, and a xorb stored through A
	// counts on B.
	code, body := request(t, "POST", a.url+"/api/openxet/v1/admin/credentials", admin, strings.NewReader(`{"tenant":"alice","scopes":["write"]}`))
	if code != 201 {
		t.Fatalf("create credential: %d %s", code, body)
	}
	var cred struct{ Token string }
	json.Unmarshal(body, &cred)
	x, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte("openxet"), 3000)}, true)
	if code, body := request(t, "POST", a.url+"/v1/xorbs/default/"+info.Hash.String(), cred.Token, bytes.NewReader(x)); code != 200 {
		t.Fatalf("upload via A: %d %s", code, body)
	}
	code, body = request(t, "POST", b.url+"/v1/xorbs/default/"+info.Hash.String(), cred.Token, bytes.NewReader(x))
	if code != 200 || !strings.Contains(string(body), "false") {
		t.Fatalf("same upload via B: %d %s", code, body)
	}
	code, body = request(t, "GET", b.url+"/api/openxet/v1/admin/tenants/alice/limits", admin, nil)
	if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"usage_bytes":%d`, info.StreamLen)) {
		t.Fatalf("usage via B: %d %s", code, body)
	}
	a.stop()
	b.stop()
}

// TestShutdownLosesNoCommittedWrite: a request in progress when SIGTERM
// arrives completes, and what was acknowledged is there after a restart.
func TestShutdownLosesNoCommittedWrite(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, dir)
	admin := p.adminToken(t)
	x, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte("shutdown"), 5000)}, false)

	// Send the headers and half the body, then SIGTERM, then the rest.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", p.url+"/v1/xorbs/default/"+info.Hash.String(), pr)
	req.ContentLength = int64(len(x))
	req.Header.Set("Authorization", "Bearer "+admin)
	done := make(chan *http.Response, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	pw.Write(x[:len(x)/2])
	// The server has the request once its first half arrived; wait until
	// it shows in flight before signalling (signalling earlier tests
	// nothing: the server would refuse the connection).
	reserved := func() bool {
		return strings.Contains(metrics(t, p, admin), `openxet_memory_reserved_bytes `+fmt.Sprint(len(x)))
	}
	if !p.waitFor(reserved) {
		t.Fatalf("the upload never showed in the server's reserved memory:\n%s", p.stderr)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	pw.Write(x[len(x)/2:])
	pw.Close()
	res := <-done
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("upload in progress at shutdown: %v", res)
	}
	res.Body.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.stderr)
	}
	q := startServe(t, dir)
	code, body := request(t, "GET", q.url+"/api/openxet/v1/admin/tenants/admin/limits", admin, nil)
	if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"usage_bytes":%d`, info.StreamLen)) {
		t.Fatalf("after restart: %d %s", code, body)
	}
	req, _ = http.NewRequest("HEAD", q.url+"/v1/xorbs/default/"+info.Hash.String(), nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("xorb after restart: %v %v", res, err)
	}
	q.stop()
}

func metrics(t *testing.T, p *proc, token string) string {
	_, b := request(t, "GET", p.url+"/metrics", token, nil)
	return string(b)
}
