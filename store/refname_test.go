package store

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestValidRefName: branch and tag names follow git check-ref-format
// (--branch) and never read as a full ref or a commit id.
func TestValidRefName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"dev", true},
		{"v1.0", true},
		{"feature/x-y_z", true},
		{"release/2024.01", true},
		{"a.b.c", true},
		{"über", true},
		{"x@y", true},
		{"HEADS", true},
		{strings.Repeat("a", 200), true},
		{strings.Repeat("a", 39) + "g", true},
		{strings.Repeat("a", 41), true},

		{"", false},
		{strings.Repeat("a", 201), false},
		{"a..b", false},
		{"..", false},
		{"x.lock", false},
		{"a/x.lock/b", false},
		{"a b", false},
		{"a~1", false},
		{"a^", false},
		{"a:b", false},
		{"a?", false},
		{"a*", false},
		{"a[b", false},
		{`a\b`, false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\tb", false},
		{"a\x7fb", false},
		{"a\x1bb", false},
		{"refs/tags/evil", false},
		{"refs/heads/x", false},
		{"refs/x", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"a.", false},
		{".a", false},
		{"a/.b", false},
		{"a@{1}", false},
		{"@", false},
		{"HEAD", false},
		{"-x", false},
		{strings.Repeat("ab", 20), false},
		{strings.Repeat("AB", 20), false},
		{"\xff\xfe", false},
	} {
		err := ValidRefName(c.name)
		if c.ok && err != nil {
			t.Errorf("%q: refused: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, ErrBadRefName) {
			t.Errorf("%q: got %v, want ErrBadRefName", c.name, err)
		}
	}
}

// FuzzValidRefName: a name is refused with ErrBadRefName, or it breaks none
// of the rules, checked here one by one.
func FuzzValidRefName(f *testing.F) {
	for _, s := range []string{"main", "a..b", "x.lock", "refs/tags/v", "a/b", "a@{", strings.Repeat("0", 40), "a b", ".x", "-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidRefName(name)
		if err != nil {
			if !errors.Is(err, ErrBadRefName) {
				t.Fatalf("%q: %v is not ErrBadRefName", name, err)
			}
			return
		}
		bad := name == "" || len(name) > maxRefNameBytes || !utf8.ValidString(name) || strings.ContainsAny(name, " ~^:?*[\\") ||
			strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//") ||
			strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") ||
			strings.HasPrefix(name, "refs/") || strings.HasPrefix(name, "-") || name == "@" || name == "HEAD" || isCommitID(name)
		for _, r := range name {
			bad = bad || r < 0x20 || r == 0x7f
		}
		for _, part := range strings.Split(name, "/") {
			bad = bad || strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock")
		}
		if bad {
			t.Fatalf("%q accepted", name)
		}
	})
}
