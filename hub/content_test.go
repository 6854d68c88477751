package hub_test

import (
	"strconv"
	"strings"
	"testing"

	"openxet/server"
)

// TestUserContentIsNotAPage commits files a browser would run (HTML, SVG,
// XHTML, JavaScript, one stored through Xet) to a public repo and reads
// them on every route that serves a repo's bytes, as the owner and as an
// anonymous reader: none is sent as a type a browser renders as a page of
// the server's origin, every answer carries nosniff, the sandboxing policy
// and a Content-Disposition, and the bytes are the committed ones.
func TestUserContentIsNotAPage(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.AnonymousReads = true })
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m","private":false}`)
	page := []byte("<html><script>fetch('/api/whoami-v2').then(r=>r.text()).then(alert)</script></html>")
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(document.domain)"/>`)
	xetLine, xetBytes := e.xetFileLine(alice, "xet.html", 3)
	lines := []string{
		regularFileLine("evil.html", page), regularFileLine("EVIL.HTM", page), regularFileLine("evil.svg", svg),
		regularFileLine("evil.xhtml", page), regularFileLine("evil.js", page), regularFileLine("noext", page),
		regularFileLine("notes.txt", page), regularFileLine("README.md", []byte("# hi\n")), xetLine,
	}
	if r := e.commitLines(alice, "alice/m", lines...); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	want := map[string]struct {
		body   string
		inline bool
	}{
		"evil.html": {string(page), false}, "EVIL.HTM": {string(page), false}, "evil.svg": {string(svg), false},
		"evil.xhtml": {string(page), false}, "evil.js": {string(page), false}, "noext": {string(page), false},
		"notes.txt": {string(page), true}, "README.md": {"# hi\n", true}, "xet.html": {string(xetBytes), false},
	}
	for name, w := range want {
		for _, route := range []string{"resolve", "raw"} {
			for _, token := range []string{alice, ""} {
				for _, method := range []string{"GET", "HEAD"} {
					r := e.Do(method, "/alice/m/"+route+"/main/"+name, token, nil)
					what := method + " " + route + " " + name + " (token " + map[bool]string{true: "none", false: "owner's"}[token == ""] + ")"
					if r.Status != 200 {
						t.Errorf("%s: %d %s", what, r.Status, r.Body)
						continue
					}
					ct := strings.ToLower(r.Header.Get("Content-Type"))
					for _, active := range []string{"html", "svg", "xml", "javascript"} {
						if strings.Contains(ct, active) {
							t.Errorf("%s: Content-Type %q, a type a browser runs", what, ct)
						}
					}
					if r.Header.Get("X-Content-Type-Options") != "nosniff" {
						t.Errorf("%s: X-Content-Type-Options %q", what, r.Header.Get("X-Content-Type-Options"))
					}
					if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") || !strings.Contains(csp, "default-src 'none'") {
						t.Errorf("%s: Content-Security-Policy %q", what, csp)
					}
					disp := r.Header.Get("Content-Disposition")
					wantDisp := "attachment;"
					if w.inline {
						wantDisp = "inline;"
					}
					if !strings.HasPrefix(disp, wantDisp) || !strings.Contains(disp, "filename") {
						t.Errorf("%s: Content-Disposition %q, want %s…", what, disp, wantDisp)
					}
					if method == "GET" && route == "resolve" && string(r.Body) != w.body {
						t.Errorf("%s: the bytes changed (%d bytes, want %d)", what, len(r.Body), len(w.body))
					}
				}
			}
		}
	}
	// Every answer is nosniff, pages and refusals included.
	for _, p := range []string{"/", "/alice/m", "/api/models/alice/m", "/alice/m/resolve/main/nope.html", "/nobody/none"} {
		if r := e.Do("GET", p, "", nil); r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d, X-Content-Type-Options %q", p, r.Status, r.Header.Get("X-Content-Type-Options"))
		}
	}
}

// TestAnswersAboutUserContentKeepTheirType: the answers of resolve that are
// not the file's bytes carry their own type, not the file's: the Xet file
// info @huggingface/hub asks for (it reads the size from X-Linked-Size only
// under application/vnd.xet-fileinfo+json, and fails without it) and a
// refusal, which is JSON and no attachment.
func TestAnswersAboutUserContentKeepTheirType(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	line, data := e.xetFileLine(alice, "w.bin", 3)
	if r := e.commitLines(alice, "alice/m", line); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	r := e.Do("GET", "/alice/m/resolve/main/w.bin", alice, nil,
		"Range: bytes=0-0", "Accept: application/vnd.xet-fileinfo+json, */*")
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/vnd.xet-fileinfo+json" ||
		r.Header.Get("X-Linked-Size") != strconv.Itoa(len(data)) || r.Header.Get("Content-Disposition") != "" {
		t.Errorf("file info: %d Content-Type %q X-Linked-Size %q Content-Disposition %q", r.Status,
			r.Header.Get("Content-Type"), r.Header.Get("X-Linked-Size"), r.Header.Get("Content-Disposition"))
	}
	for _, method := range []string{"GET", "HEAD"} {
		r = e.Do(method, "/alice/m/resolve/main/w.bin", alice, nil, "Range: bytes=999999999-")
		if r.Status != 416 || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Content-Disposition") != "" {
			t.Errorf("%s unsatisfiable range: %d Content-Type %q Content-Disposition %q %s", method, r.Status,
				r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"), r.Body)
		}
	}
}
