package hub

import (
	"openxet/store"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRepoPathProblem: the paths a commit operation may name.
func TestRepoPathProblem(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"a.txt", true},
		{"d/e/f.bin", true},
		{".gitattributes", true},
		{"a b/ü.txt", true},
		{"..a", true},
		{"a..b", true},
		{strings.Repeat("a", 1024), true},

		{"", false},
		{"/", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"..", false},
		{"../x", false},
		{"a/../b", false},
		{"a/./b", false},
		{".git", false},
		{"a/.git/config", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\x7f", false},
		{"\xff", false},
		{strings.Repeat("a", 1025), false},
	} {
		if got := repoPathProblem(c.path); (got == "") != c.ok {
			t.Errorf("%q: problem %q, want ok %v", c.path, got, c.ok)
		}
	}
}

// FuzzRepoPathProblem: an accepted path has no component a tree cannot
// hold and stays inside the repo.
func FuzzRepoPathProblem(f *testing.F) {
	for _, s := range []string{"a.txt", "../x", "a//b", ".git/x", "a\x00", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if repoPathProblem(p) != "" {
			return
		}
		if p == "" || len(p) > store.MaxRepoPathBytes || !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\n\r\x7f") {
			t.Fatalf("%q accepted", p)
		}
		for _, part := range strings.Split(p, "/") {
			if part == "" || part == "." || part == ".." || part == ".git" {
				t.Fatalf("%q accepted with component %q", p, part)
			}
		}
	})
}
