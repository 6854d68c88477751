package cli

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"openxet/testgit"
)

// TestCrashMidPush kills `openxet serve` with SIGKILL in the middle of a
// git push (issue 48's bad input): a proxy between git and the server
// counts the bytes of the receive-pack request and kills the server when
// a given share of the pack has passed (a third, two thirds, and the whole
// of it: the last lands while the server unpacks or commits; git's probe
// request before a large push does not count). After each
// restart main is where it was or where the push put it, never anywhere
// else; when it moved, every pushed file reads back byte for byte; and
// `openxet reindex --check` finds the index and the bucket agreeing, but
// for objects the bucket holds ahead of the index. A last push, with no
// kill, then lands everything the killed ones carried.
func TestCrashMidPush(t *testing.T) {
	if testing.Short() {
		t.Skip("crash harness skipped in -short mode")
	}
	testgit.Need(t, false)
	dir := serverDataDir(t)
	h := &crashHarness{t: t, dir: dir}
	alice := h.offlineCredential("alice", "write")
	h.secrets = append(h.secrets, alice)
	h.p = startServe(t, dir)
	if code, body := request(t, "POST", h.p.url+"/api/repos/create", alice, strings.NewReader(`{"name":"m"}`)); code != 200 {
		t.Fatalf("create repo: %d %s", code, body)
	}
	work := t.TempDir()
	remote := func(base string) string {
		u, _ := url.Parse(base)
		return "http://git:" + alice + "@" + u.Host + "/alice/m"
	}
	testgit.Must(t, work, nil, "clone", "-q", remote(h.p.url), "m")
	repo := filepath.Join(work, "m")
	want := map[string]string{} // every file committed locally: path → content
	for round, share := range []float64{1.0 / 3, 2.0 / 3, 1} {
		h.cycle = round + 1
		before := crashRevision(t, h.p.url, alice)
		packBytes := crashGitCommit(t, repo, round, want)
		proxy, killed := crashKillProxy(t, h.p, int64(share*float64(packBytes)))
		out, err := testgit.Run(t, repo, nil, "push", "-q", remote(proxy.URL), "main")
		proxy.Close()
		if killed.Load() == 0 {
			t.Fatalf("round %d: the push ended (%v: %s) before the kill", round, err, out)
		}
		h.kill()
		h.p = startServe(t, dir)
		head := testgit.Must(t, repo, nil, "rev-parse", "HEAD")
		switch after := crashRevision(t, h.p.url, alice); after {
		case before:
			t.Logf("round %d: killed after %d bytes of the push (%.0f%% asked); main did not move", round, killed.Load(), share*100)
		case head:
			t.Logf("round %d: killed after %d bytes of the push (%.0f%% asked); main moved", round, killed.Load(), share*100)
			crashFilesResolve(t, h.p.url, alice, want)
		default:
			t.Fatalf("round %d: main is %s after the kill; it was %s and the push carried %s", round, after, before, head)
		}
		crashNoHalfPush(t, h, round)
	}
	testgit.Must(t, repo, nil, "push", "-q", remote(h.p.url), "main")
	if got, head := crashRevision(t, h.p.url, alice), testgit.Must(t, repo, nil, "rev-parse", "HEAD"); got != head {
		t.Fatalf("after the last push main is %s, want %s", got, head)
	}
	crashFilesResolve(t, h.p.url, alice, want)
	crashNoHalfPush(t, h, 99)
	h.kill()
}

// crashGitCommit commits three text files of about 2 MiB each (base64 of
// random bytes: text, so no LFS, and almost incompressible) in repo, adds
// them to want and returns their size.
func crashGitCommit(t *testing.T, repo string, round int, want map[string]string) int {
	t.Helper()
	total := 0
	for i := range 3 {
		raw := make([]byte, 1536<<10)
		rand.Read(raw)
		content := base64.StdEncoding.EncodeToString(raw)
		name := fmt.Sprintf("round%d-%d.txt", round, i)
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = content
		total += len(content)
	}
	testgit.Must(t, repo, nil, "add", "-A")
	testgit.Must(t, repo, nil, "commit", "-q", "-m", fmt.Sprintf("round %d", round))
	return total
}

// crashKillProxy is a proxy to p that SIGKILLs p once after limit bytes of
// a receive-pack request have passed it (or at its end, when the request
// is shorter); killed is the bytes of the request read then (0: no kill).
func crashKillProxy(t *testing.T, p *proc, limit int64) (*httptest.Server, *atomic.Int64) {
	target, _ := url.Parse(p.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusBadGateway) // the kill: git is told the push failed
	}
	killed := &atomic.Int64{} // the bytes of the request read at the kill
	var once sync.Once
	kill := func(read int64) {
		once.Do(func() {
			p.cmd.Process.Kill()
			killed.Store(read)
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			r.Body = &killingReader{r: r.Body, left: limit, kill: kill}
		}
		rp.ServeHTTP(w, r)
	}))
	return srv, killed
}

// killingReader reads r and calls kill when left bytes have been read, or
// at the end of a body of more than probeBytes (git sends a large push
// after a probe, a request of 4 bytes, which must not trigger it).
type killingReader struct {
	r          io.ReadCloser
	left, read int64
	kill       func(read int64)
}

const probeBytes = 64 << 10

func (k *killingReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	k.left -= int64(n)
	k.read += int64(n)
	if k.left <= 0 || err == io.EOF && k.read > probeBytes {
		k.kill(k.read)
	}
	return n, err
}

func (k *killingReader) Close() error { return k.r.Close() }

// crashRevision is the commit main of alice/m names.
func crashRevision(t *testing.T, base, token string) string {
	t.Helper()
	code, body := request(t, "GET", base+"/api/models/alice/m/revision/main", token, nil)
	var info struct{ SHA string }
	if code != 200 || json.Unmarshal(body, &info) != nil || info.SHA == "" {
		t.Fatalf("model info: %d %s", code, body)
	}
	return info.SHA
}

// crashFilesResolve checks that every file of want reads back at main.
func crashFilesResolve(t *testing.T, base, token string, want map[string]string) {
	t.Helper()
	for p, content := range want {
		if code, body := request(t, "GET", base+"/alice/m/resolve/main/"+p, token, nil); code != 200 || string(body) != content {
			t.Errorf("%s answers %d (%d bytes), want 200 and its %d bytes", p, code, len(body), len(content))
		}
	}
}

// crashNoHalfPush checks with reindex --check that the index and the
// bucket agree, but for objects written ahead of the index.
func crashNoHalfPush(t *testing.T, h *crashHarness, round int) {
	t.Helper()
	for _, d := range h.check() {
		if d.index != "" || !d.leftover && d.table != "blobs" {
			t.Errorf("round %d: reindex --check: %+v", round, d)
		}
	}
}
