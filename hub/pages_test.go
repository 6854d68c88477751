package hub_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openxet/server"
)

// pageEnv is a server with a repo of alice holding files whose names and
// contents must never show to anyone but alice's credentials.
func pageEnv(t *testing.T) (e env, alice, head string) {
	t.Helper()
	e = newEnv(t, func(c *server.Config) { c.Version = "9.8.7-test" })
	alice = e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"secret-model","private":true}`)
	e.createRepoJSON(alice, `{"name":"secret-data","type":"dataset"}`)
	xetLine, _ := e.xetFileLine(alice, "weights/top-secret-weights.bin", 3)
	r := e.commitLines(alice, "alice/secret-model", regularFileLine("README-classified.md", []byte("# classified\n")), xetLine)
	if r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	return e, alice, mustHead(t, e, alice, "alice/secret-model")
}

// TestLandingPage: / is an HTML page that says what the server is, its
// version and readiness, and how to point hf at it.
func TestLandingPage(t *testing.T) {
	e, _, _ := pageEnv(t)
	r := e.Do("GET", "/", "", nil)
	page := string(r.Body)
	if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("landing: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<span id="version">9.8.7-test</span>`, `<span id="status" class="ok">ready</span>`,
		"export HF_ENDPOINT=" + e.URL, "export HF_TOKEN=hf_oxt_", "hf auth login --token", "hf auth whoami",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("landing page without %q", want)
		}
	}
	if strings.Contains(page, "<script") {
		t.Errorf("landing page has a script")
	}
	// The page tells the rule of docs/sharing.md, not the one before sharing.
	if strings.Contains(page, "sees only its own") || !strings.Contains(page, "internal") || !strings.Contains(page, "public") {
		t.Errorf("landing page does not say who reads a repo:\n%s", page)
	}
}

// TestRepoPagesShowNothingWithoutAToken: the URLs the hf CLI prints lead
// to a page; without a token it is the same for a private repo, a public
// one and one that does not exist, and shows no file, commit or size; with
// the tenant's token it lists the files; another tenant's token gets 404.
func TestRepoPagesShowNothingWithoutAToken(t *testing.T) {
	e, alice, head := pageEnv(t)
	bob := e.Credential("bob", "write")
	secrets := []string{"README-classified", "top-secret-weights", head, "initial commit", "KiB", "private"}
	anonymous := func(path string) string {
		t.Helper()
		r := e.Do("GET", path, "", nil)
		if r.Status != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
		page := string(r.Body)
		for _, s := range secrets {
			if strings.Contains(page, s) {
				t.Errorf("%s shows %q without a token", path, s)
			}
		}
		return page
	}
	for _, c := range []struct{ name, tail string }{
		{"/alice/secret-model", ""},
		{"/alice/secret-model", "/tree/main"},
		{"/alice/secret-model", "/tree/main/weights"},
		{"/alice/secret-model", "/blob/main/README-x.md"},
		{"/alice/secret-model", "/commit/" + head[:7]},
		{"/datasets/alice/secret-data", ""},
	} {
		real := anonymous(c.name + c.tail)
		other := anonymous("/alice/no-such-repo" + c.tail)
		if c.name != "/alice/secret-model" {
			other = anonymous("/datasets/alice/no-such-repo" + c.tail)
		}
		a := strings.ReplaceAll(strings.ReplaceAll(real, "secret-model", "X"), "secret-data", "X")
		if b := strings.ReplaceAll(other, "no-such-repo", "X"); a != b {
			t.Errorf("%s%s and a repo that does not exist differ by more than the name:\n%s\n---\n%s", c.name, c.tail, a, b)
		}
		if !strings.Contains(real, "hf download alice/") || !strings.Contains(real, "export HF_ENDPOINT="+e.URL) {
			t.Errorf("%s: no fetch instructions:\n%s", c.name, real)
		}
	}
	if page := anonymous("/datasets/alice/secret-data"); !strings.Contains(page, "--repo-type dataset") {
		t.Errorf("dataset page without --repo-type dataset:\n%s", page)
	}

	// With alice's token: the repo's files, sizes and commit.
	for _, path := range []string{"/alice/secret-model", "/alice/secret-model/tree/main", "/alice/secret-model/commit/" + head} {
		r := e.Do("GET", path, alice, nil)
		page := string(r.Body)
		if r.Status != 200 {
			t.Fatalf("%s with alice's token: %d %s", path, r.Status, r.Body)
		}
		for _, want := range []string{"README-classified.md", "weights/top-secret-weights.bin", head, ">13<", "39.1 KiB", "private"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s with alice's token: no %q in\n%s", path, want, page)
			}
		}
	}
	r := e.Do("GET", "/alice/secret-model/tree/main/weights", alice, nil)
	if page := string(r.Body); r.Status != 200 || strings.Contains(page, "README-classified") || !strings.Contains(page, "top-secret-weights") {
		t.Errorf("tree of weights/: %d\n%s", r.Status, page)
	}
	for _, c := range []struct {
		path, token string
		status      int
		xcode       string
	}{
		{"/alice/secret-model", bob, 404, "RepoNotFound"},
		{"/alice/secret-model/tree/main", bob, 404, "RepoNotFound"},
		{"/alice/secret-model/tree/nobranch", alice, 404, "RevisionNotFound"},
		{"/alice/secret-model/tree/main/nothing-here", alice, 404, "EntryNotFound"},
		{"/alice/secret-model", alice[:len(alice)-4] + "0000", 401, "unauthorized"},
	} {
		r := e.Do("GET", c.path, c.token, nil)
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.xcode {
			t.Errorf("%s: %d %q, want %d %s", c.path, r.Status, r.Header.Get("X-Error-Code"), c.status, c.xcode)
		}
		for _, s := range secrets[:3] {
			if c.token != alice && bytes.Contains(r.Body, []byte(s)) {
				t.Errorf("%s: refusal shows %q", c.path, s)
			}
		}
	}
	// API paths never become pages.
	for _, p := range []string{"/api/nothing", "/v1/nothing", "/v2/nothing"} {
		r := e.Do("GET", p, "", nil)
		if r.Status != 404 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s", p, r.Status, r.Header.Get("Content-Type"))
		}
	}
}

// chromium finds a headless Chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: install Debian's chromium package (apt-get install -y chromium) to run the browser test")
	return ""
}

// runChromium loads url headless and returns the DOM it built; with shot
// set it also writes a 1200x900 screenshot there.
func runChromium(t *testing.T, bin, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1200,900"}
	if shot != "" {
		args = append(args, "--screenshot="+shot)
	} else {
		args = append(args, "--dump-dom")
	}
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, errOut.String())
	}
	if shot != "" {
		if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
			t.Fatalf("chromium wrote no screenshot to %s: %v\n%s", shot, err, errOut.String())
		}
	}
	return out.String()
}

// TestPagesInABrowser loads the landing page and a repo page in headless
// Chromium, checks the DOM it built and leaves screenshots in the test's
// artifact directory (go test -artifacts keeps them). The page alice's
// token shows is saved to a file first, since a browser sends no token.
func TestPagesInABrowser(t *testing.T) {
	bin := chromium(t)
	e, alice, head := pageEnv(t)
	dir := t.ArtifactDir()

	dom := runChromium(t, bin, e.URL+"/", "")
	for _, want := range []string{`id="version">9.8.7-test<`, `id="status" class="ok">ready<`, "export HF_ENDPOINT=" + e.URL} {
		if !strings.Contains(dom, want) {
			t.Errorf("landing DOM without %q:\n%s", want, dom)
		}
	}
	runChromium(t, bin, e.URL+"/", filepath.Join(dir, "landing.png"))

	dom = runChromium(t, bin, e.URL+"/alice/secret-model/commit/"+head, "")
	if !strings.Contains(dom, `id="notice"`) || strings.Contains(dom, "top-secret-weights") || strings.Contains(dom, "README-classified") {
		t.Errorf("anonymous repo page DOM:\n%s", dom)
	}
	runChromium(t, bin, e.URL+"/alice/secret-model", filepath.Join(dir, "repo-anonymous.png"))

	r := e.Do("GET", "/alice/secret-model", alice, nil)
	file := filepath.Join(dir, "repo.html")
	if err := os.WriteFile(file, r.Body, 0o644); err != nil {
		t.Fatal(err)
	}
	dom = runChromium(t, bin, "file://"+file, "")
	// The header row, .gitattributes (every new repo's first commit) and
	// the two files of the test.
	if n := strings.Count(dom, "<tr>"); n != 4 || !strings.Contains(dom, "top-secret-weights.bin") || !strings.Contains(dom, head) {
		t.Errorf("repo page DOM with %d rows:\n%s", n, dom)
	}
	runChromium(t, bin, "file://"+file, filepath.Join(dir, "repo.png"))
	t.Logf("screenshots in %s", dir)
}
