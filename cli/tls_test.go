package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"openxet/testcert"
	"openxet/testproc"
	"openxet/xet"
)

func serialOf(t *testing.T, r *certReloader) int64 {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil || c == nil {
		t.Fatalf("GetCertificate: %v %v", c, err)
	}
	return c.Leaf.SerialNumber.Int64()
}

// TestCertReloaderFollowsFileChanges: a renewed certificate is served once
// a handshake finds the files changed (looked at once per interval), a
// broken pair keeps the previous certificate and says so in the log, and a
// later good pair is picked up.
func TestCertReloaderFollowsFileChanges(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 100, certFile, keyFile)
	var logs bytes.Buffer
	r, err := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Now = func() time.Time { return now }
	r.checked = now

	steps := []struct {
		name    string
		change  func()
		advance time.Duration
		want    int64
		log     string
	}{
		{"first", nil, 0, 100, ""},
		{"renewed, not looked at yet", func() { ca.Issue(t, 101, certFile, keyFile) }, certCheckInterval - time.Second, 100, ""},
		{"renewed, looked at", nil, time.Second, 101, "tls certificate reloaded"},
		{"unchanged", nil, certCheckInterval, 101, ""},
		{"key replaced by garbage", func() { os.WriteFile(keyFile, []byte("not a key"), 0o600) }, certCheckInterval, 101, "previous one stays in use"},
		{"key missing", func() { os.Remove(keyFile) }, certCheckInterval, 101, "server.tls_key"},
		{"good pair again", func() { ca.Issue(t, 102, certFile, keyFile) }, certCheckInterval, 102, "tls certificate reloaded"},
	}
	for _, st := range steps {
		logs.Reset()
		if st.change != nil {
			st.change()
		}
		now = now.Add(st.advance)
		if got := serialOf(t, r); got != st.want {
			t.Fatalf("%s: serial %d, want %d\nlog: %s", st.name, got, st.want, logs.String())
		}
		if st.log == "" && logs.Len() != 0 || !strings.Contains(logs.String(), st.log) {
			t.Fatalf("%s: log %q, want %q", st.name, logs.String(), st.log)
		}
	}
}

// TestCertReloaderOnSignal: each value on the signal channel loads the
// pair again, without waiting for the check interval.
func TestCertReloaderOnSignal(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 200, certFile, keyFile)
	synctest.Test(t, func(t *testing.T) {
		r, err := newCertReloader(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		hup := make(chan os.Signal, 1)
		done := make(chan struct{})
		go func() {
			r.watch(ctx, hup)
			close(done)
		}()
		ca.Issue(t, 201, certFile, keyFile)
		if got := serialOf(t, r); got != 200 {
			t.Fatalf("before the signal: serial %d, want 200 (the interval has not passed)", got)
		}
		hup <- syscall.SIGHUP
		synctest.Wait()
		if got := serialOf(t, r); got != 201 {
			t.Fatalf("after SIGHUP: serial %d, want 201", got)
		}
		cancel()
		<-done
	})
}

// TestServeRefusesBadTLSConfig: a certificate without its key, or a key
// that does not match, stops start-up with exit 2 naming the keys, before
// the data directory is touched.
func TestServeRefusesBadTLSConfig(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 1, certFile, keyFile)
	otherCert, otherKey := filepath.Join(dir, "other.pem"), filepath.Join(dir, "other.key")
	ca.Issue(t, 2, otherCert, otherKey)
	data := filepath.Join(t.TempDir(), "data")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"cert only", []string{"--tls-cert", certFile}, "server.tls_cert, server.tls_key: set both"},
		{"key only", []string{"--tls-key", keyFile}, "server.tls_cert, server.tls_key: set both"},
		{"key of another certificate", []string{"--tls-cert", certFile, "--tls-key", otherKey}, "private key does not match public key"},
		{"missing cert file", []string{"--tls-cert", filepath.Join(dir, "nope.pem"), "--tls-key", keyFile}, "config server.tls_cert: open"},
		{"cert is not PEM", []string{"--tls-cert", keyFile, "--tls-key", keyFile}, "server.tls_cert, server.tls_key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", data, "--listen", "127.0.0.1:0"}, c.args...)
			code, out, errOut := run(t, nil, args...)
			if code != 2 || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut, c.want)
			}
			if out != "" {
				t.Fatalf("stdout %q", out)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Fatalf("data directory touched: %v", err)
			}
			// config check says the same.
			code, _, errOut = run(t, nil, append([]string{"config", "check"}, c.args...)...)
			if code != 2 || !strings.Contains(errOut, c.want) {
				t.Fatalf("config check: exit %d, stderr %q; want 2 and %q", code, errOut, c.want)
			}
		})
	}
}

// lineWaiter collects a child's stderr lines and lets a test wait for one.
type lineWaiter struct {
	lines chan string
	all   *testproc.Buffer
}

func newLineWaiter(r io.Reader) *lineWaiter {
	w := &lineWaiter{lines: make(chan string, 1000), all: &testproc.Buffer{}}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.all.Write([]byte(sc.Text() + "\n"))
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	return w
}

// wait returns the first line from now on that contains s.
func (w *lineWaiter) wait(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(time.Minute) // fails the test; nothing waits on it otherwise
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("process ended before logging %q:\n%s", s, w.all)
			}
			if strings.Contains(l, s) {
				return l
			}
		case <-timeout:
			t.Fatalf("no log line with %q after a minute:\n%s", s, w.all)
		}
	}
}

// startServeLogged runs `openxet serve` with args as a separate process
// whose stdout and stderr lines the test can wait for.
func startServeLogged(t *testing.T, args ...string) (cmd *exec.Cmd, logs, outs *lineWaiter) {
	t.Helper()
	cmd = exec.Command(os.Args[0], append([]string{"serve", "--memory-budget", "512MiB"}, args...)...)
	cmd.Args[0] = "openxet"
	cmd.Env = append(os.Environ(), "OPENXET_TEST_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, newLineWaiter(stderr), newLineWaiter(stdout)
}

// TestServeSurvivesSIGHUPWithoutTLS: systemctl reload sends SIGHUP; without
// TLS there is nothing to reload, and the server goes on serving.
func TestServeSurvivesSIGHUPWithoutTLS(t *testing.T) {
	addr := freeAddr(t)
	cmd, logs, _ := startServeLogged(t, "--data-dir", t.TempDir(), "--listen", addr)
	logs.wait(t, "openxet serving")
	cmd.Process.Signal(syscall.SIGHUP)
	logs.wait(t, "SIGHUP: nothing to reload")
	if res, err := http.Get("http://" + addr + "/readyz"); err != nil || res.StatusCode != 200 {
		t.Fatalf("after SIGHUP: %v %v", res, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.all)
	}
}

// TestServeOverHTTPS runs `openxet serve` with server.tls_cert/tls_key as a
// separate process: a client that trusts the CA creates a credential,
// uploads a xorb, gets https fetch URLs in a reconstruction answer; after
// the certificate is renewed and the process gets SIGHUP, new connections
// see the new certificate; `openxet healthcheck` finds the server.
func TestServeOverHTTPS(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.Issue(t, 300, certFile, keyFile)
	addr := freeAddr(t)
	cmd, logs, outs := startServeLogged(t, "--data-dir", filepath.Join(dir, "data"), "--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile)
	if l := logs.wait(t, "openxet serving"); !strings.Contains(l, "addr=https://"+addr) {
		t.Fatalf("serving line %q does not name https://%s", l, addr)
	}
	base := "https://localhost:" + strings.Split(addr, ":")[1]
	client := ca.Client()
	get := func(method, path, token string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, logs.all)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}

	res, _ := get("GET", "/readyz", "", nil)
	if res.StatusCode != 200 || res.TLS.PeerCertificates[0].SerialNumber.Int64() != 300 {
		t.Fatalf("readyz: %d, serial %v", res.StatusCode, res.TLS.PeerCertificates[0].SerialNumber)
	}
	// Plain HTTP on the TLS port is refused, not served.
	if r, err := http.Get("http://" + addr + "/readyz"); err == nil && r.StatusCode == 200 {
		t.Fatal("plain http answered 200 on the TLS listener")
	}
	admin := adminToken(t, outs.wait(t, "store it now"))
	res, body := get("POST", "/api/openxet/v1/admin/credentials", admin, []byte(`{"tenant":"alice","scopes":["write"]}`))
	if res.StatusCode != 201 {
		t.Fatalf("create credential: %d %s", res.StatusCode, body)
	}
	var cred struct{ Token string }
	json.Unmarshal(body, &cred)
	x, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte("tls"), 4000)}, true)
	if res, body := get("POST", "/v1/xorbs/default/"+info.Hash.String(), cred.Token, x); res.StatusCode != 200 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}

	code, out, errOut := run(t, nil, "healthcheck", "--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile)
	if code != 0 || !strings.Contains(out, "ready: https://127.0.0.1:") {
		t.Fatalf("healthcheck: %d %q %q", code, out, errOut)
	}
	// With --url the certificate is verified: the test CA is not trusted.
	if code, _, errOut := run(t, nil, "healthcheck", "--url", base+"/readyz"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("healthcheck --url with an unknown CA: %d %q", code, errOut)
	}

	ca.Issue(t, 301, certFile, keyFile)
	cmd.Process.Signal(syscall.SIGHUP)
	if l := logs.wait(t, "tls certificate reloaded"); !strings.Contains(l, "reason=SIGHUP") || !strings.Contains(l, "serial=301") {
		t.Fatalf("reload line %q", l)
	}
	res, _ = get("GET", "/readyz", "", nil)
	if got := res.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 301 {
		t.Fatalf("after SIGHUP: serial %d, want 301", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	logs.wait(t, "openxet stopped")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, logs.all)
	}
}

func TestHealthcheckFailsWithoutServer(t *testing.T) {
	addr := freeAddr(t) // nothing listens there any more
	code, out, errOut := run(t, nil, "healthcheck", "--listen", addr)
	if code != 1 || out != "" || !strings.Contains(errOut, "healthcheck http://"+addr+"/readyz") {
		t.Fatalf("healthcheck of nothing: %d %q %q", code, out, errOut)
	}
}

func TestLocalReadyzURL(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/readyz",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/readyz",
		":8080":          "http://127.0.0.1:8080/readyz",
		"[::]:8080":      "http://[::1]:8080/readyz",
		"xet.lan:443":    "http://xet.lan:443/readyz",
	} {
		if got := localReadyzURL(Config{Listen: listen}); got != want {
			t.Errorf("%s: %s, want %s", listen, got, want)
		}
	}
	if got := localReadyzURL(Config{Listen: ":8443", TLSCert: "c", TLSKey: "k"}); got != "https://127.0.0.1:8443/readyz" {
		t.Errorf("tls: %s", got)
	}
}
