package upstream_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"openxet/mirror"
	"openxet/mirror/upstream"
)

// A revision answer and tree pages that do not add up are ErrBadAnswer:
// each case is an upstream answering one thing wrong.
func TestRevisionRefusals(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	info := `{"sha":"` + sha + `","siblings":[{"rfilename":"a.txt"}],"gated":false,"lastModified":"2026-11-05T12:00:00.000Z"}`
	file := func(path string) string {
		return `{"type":"file","path":"` + path + `","size":3,"oid":"0123456789abcdef0123456789abcdef01234567"}`
	}
	page := "[" + file("a.txt") + "]"
	cases := []struct {
		name  string
		info  string
		pages map[string]string // cursor → body
		link  func(base, cursor string) string
		opts  func(*upstream.Options)
		rev   string
	}{
		{name: "fine", info: info, pages: map[string]string{"": page}},
		{name: "info not JSON", info: `<html>`, pages: map[string]string{"": page}},
		{name: "info without sha", info: `{"siblings":[]}`, pages: map[string]string{"": page}},
		{name: "short sha", info: `{"sha":"abc"}`, pages: map[string]string{"": page}},
		{name: "another commit than asked", info: info, rev: strings.Repeat("f", 40), pages: map[string]string{"": page}},
		{name: "gated a number", info: `{"sha":"` + sha + `","gated":3}`, pages: map[string]string{"": page}},
		{name: "bad lastModified", info: `{"sha":"` + sha + `","lastModified":"yesterday"}`, pages: map[string]string{"": page}},
		{name: "sibling not in the tree", info: info, pages: map[string]string{"": "[" + file("b.txt") + "]"}},
		{name: "tree not an array", info: info, pages: map[string]string{"": `{"a":1}`}},
		{name: "path escapes", info: info, pages: map[string]string{"": "[" + file("a.txt") + "," + file("../etc/passwd") + "]"}},
		{name: "absolute path", info: info, pages: map[string]string{"": "[" + file("a.txt") + "," + file("/x") + "]"}},
		{name: "duplicate path", info: info, pages: map[string]string{"": "[" + file("a.txt") + "," + file("a.txt") + "]"}},
		{name: "negative size", info: info, pages: map[string]string{"": `[{"type":"file","path":"a.txt","size":-1,"oid":"0123456789abcdef0123456789abcdef01234567"}]`}},
		{name: "lfs size differs", info: info, pages: map[string]string{"": `[{"type":"file","path":"a.txt","size":3,"oid":"0123456789abcdef0123456789abcdef01234567","lfs":{"oid":"` + strings.Repeat("ab", 32) + `","size":4}}]`}},
		{name: "unknown type", info: info, pages: map[string]string{"": `[{"type":"symlink","path":"a.txt"}]`}},
		{name: "next page on another host", info: info, pages: map[string]string{"": page},
			link: func(string, string) string { return "http://elsewhere.invalid/api/next" }},
		{name: "pages loop", info: info, pages: map[string]string{"": page, "1": "[]"},
			link: func(base, cursor string) string { return base + "?recursive=true&cursor=1" }},
		{name: "too many files", info: info, pages: map[string]string{"": "[" + file("a.txt") + "," + file("b.txt") + "]"},
			opts: func(o *upstream.Options) { o.MaxFiles = 1 }},
		{name: "answer too long", info: info, pages: map[string]string{"": page},
			opts: func(o *upstream.Options) { o.MaxJSONBytes = 50 }},
		{name: "410 Gone", info: "", pages: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case tc.info == "":
					w.WriteHeader(http.StatusGone)
				case strings.Contains(r.URL.Path, "/revision/"):
					w.Write([]byte(tc.info))
				case strings.Contains(r.URL.Path, "/tree/"):
					cursor := r.URL.Query().Get("cursor")
					if tc.link != nil {
						w.Header().Set("Link", "<"+tc.link("http://"+r.Host+r.URL.Path, cursor)+`>; rel="next"`)
					}
					w.Write([]byte(tc.pages[cursor]))
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			o := upstream.Options{BaseURL: srv.URL}
			if tc.opts != nil {
				tc.opts(&o)
			}
			rev := tc.rev
			if rev == "" {
				rev = "main"
			}
			got, err := newClient(t, o).Revision(context.Background(), mirror.RepoRef{Type: "model", ID: "org/m"}, rev)
			if tc.name == "fine" {
				if err != nil || got.SHA != sha || len(got.Files) != 1 {
					t.Fatalf("%+v, %v", got, err)
				}
				return
			}
			if !errors.Is(err, mirror.ErrBadAnswer) {
				t.Fatalf("%v, want ErrBadAnswer", err)
			}
		})
	}
}

// TestArgumentChecks: Open and Revision refuse a bad repo, revision,
// commit, path or offset before any request.
func TestArgumentChecks(t *testing.T) {
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests++ }))
	defer srv.Close()
	c := newClient(t, upstream.Options{BaseURL: srv.URL})
	ctx := context.Background()
	good := mirror.RepoRef{Type: "model", ID: "org/m"}
	sha := strings.Repeat("a", 40)
	f := mirror.File{Path: "a.bin", Size: 10}
	for name, err := range map[string]error{
		"repo type": func() error {
			_, err := c.Revision(ctx, mirror.RepoRef{Type: "bucket", ID: "org/m"}, "main")
			return err
		}(),
		"repo id": func() error {
			_, err := c.Revision(ctx, mirror.RepoRef{Type: "model", ID: "org/../m"}, "main")
			return err
		}(),
		"one-part id": func() error { _, err := c.Revision(ctx, mirror.RepoRef{Type: "model", ID: "m"}, "main"); return err }(),
		"empty rev":   func() error { _, err := c.Revision(ctx, good, ""); return err }(),
		"short sha":   func() error { _, err := c.Open(ctx, good, "main", f, 0); return err }(),
		"offset":      func() error { _, err := c.Open(ctx, good, sha, f, 11); return err }(),
		"negative":    func() error { _, err := c.Open(ctx, good, sha, f, -1); return err }(),
		"path":        func() error { _, err := c.Open(ctx, good, sha, mirror.File{Path: "../a", Size: 1}, 0); return err }(),
		"bad xet hash": func() error {
			_, err := c.Open(ctx, good, sha, mirror.File{Path: "a", Size: 1, XetHash: "zz"}, 0)
			return err
		}(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if requests != 0 {
		t.Errorf("%d requests sent", requests)
	}
	for _, base := range []string{"", "ftp://x", "http://", "http://x/?q=1", "::"} {
		if _, err := upstream.New(upstream.Options{BaseURL: base}); err == nil {
			t.Errorf("New(%q): no error", base)
		}
	}
}

// TestRedirects: resolve follows a redirect to another host without the
// token and keeps it on the upstream's host.
func TestRedirects(t *testing.T) {
	var cdnAuth, hubAuth []string
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cdnAuth = append(cdnAuth, r.Header.Get("Authorization"))
		w.Write([]byte("abc"))
	}))
	defer cdn.Close()
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hubAuth = append(hubAuth, r.Header.Get("Authorization"))
		if strings.HasPrefix(r.URL.Path, "/renamed/") {
			http.Redirect(w, r, cdn.URL+"/obj", http.StatusFound)
			return
		}
		// A relative redirect first (a renamed repo), on the same host.
		http.Redirect(w, r, "/renamed"+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer hub.Close()
	c := newClient(t, upstream.Options{BaseURL: hub.URL, Token: "hf_secret"})
	got := readAll(t, c, mirror.RepoRef{Type: "model", ID: "org/m"}, strings.Repeat("a", 40), mirror.File{Path: "x.bin", Size: 3}, 0)
	if string(got) != "abc" {
		t.Fatalf("got %q", got)
	}
	if len(hubAuth) != 2 || hubAuth[0] != "Bearer hf_secret" || hubAuth[1] != "Bearer hf_secret" || len(cdnAuth) != 1 || cdnAuth[0] != "" {
		t.Fatalf("hub saw %q, cdn saw %q", hubAuth, cdnAuth)
	}
}
