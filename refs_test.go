package main

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// Patterns of TestReferencesStayInRepo. None matches its own source text.
var (
	// An absolute path of the machine the project was built on.
	machinePath = regexp.MustCompile(`(^|[^.\w])/wor[k]/`)
	// The names of notes that live outside the repository.
	outsideNote = regexp.MustCompile(`xet-protocol\.md|limits-note[s]|round3-note[s]|\bclients\.md|\bstyle\.md|\bseed/001[8]`)
	// The limits decision by number: docs/design.md §13 holds it.
	decisionRecord = regexp.MustCompile(`(?i)\b(decision|record)\s+0018\b`)
	// A section reference, with the page it names, if any.
	sectionRef = regexp.MustCompile(`(?:(docs/)?([\w-]+)\.md )?§(\d+(?:\.\d+)*)`)
	// A numbered heading of a docs page: "## 6." or "### 6.3 ...".
	numberedHeading = regexp.MustCompile(`(?m)^#{1,6} (\d+(?:\.\d+)*)\.? `)
	// A section of BENCHMARKS.md cited by its heading: BENCHMARKS.md, "GC".
	benchSection = regexp.MustCompile(`BENCHMARKS\.md,? \(?"([^"]+)"`)
)

// TestReferencesStayInRepo keeps every comment and document pointing
// inside the repository: no path of one machine, no note kept elsewhere,
// the limits decision named by where it is (docs/design.md §13), every
// section reference naming its page and a numbered heading that page has,
// as in docs/design.md §9 or docs/protocol.md §6.3 (pages in docs/ may
// leave out the "docs/", or the page's name when they cite themselves),
// and every section of BENCHMARKS.md cited by name a heading it has. It
// reads every file git tracks or would track (tracked and untracked, not
// ignored); only files that are not UTF-8 text (captured xorbs and
// shards) are not read.
func TestReferencesStayInRepo(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	headings := map[string]map[string]bool{} // docs page → its section numbers
	sections := func(page string) map[string]bool {
		if h, ok := headings[page]; ok {
			return h
		}
		h := map[string]bool{}
		if b, err := os.ReadFile(page); err == nil {
			for _, m := range numberedHeading.FindAllSubmatch(b, -1) {
				h[string(m[1])] = true
			}
		}
		headings[page] = h
		return h
	}
	bench, err := os.ReadFile("BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	benchHeadings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(bench), -1) {
		benchHeadings[m[1]] = true
	}
	read := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(name); err != nil || !fi.Mode().IsRegular() {
			continue // deleted from the work tree, or a symlink (.venv)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			continue
		}
		read++
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			at := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s:%d: "+format, append([]any{name, i + 1}, args...)...)
			}
			if machinePath.MatchString(line) {
				at("a path of one machine: %s", strings.TrimSpace(line))
			}
			if m := outsideNote.FindString(line); m != "" {
				at("%s is not in the repository: point at docs/", m)
			}
			if decisionRecord.MatchString(line) && name != "docs/design.md" {
				at("the limits decision is docs/design.md §13: %s", strings.TrimSpace(line))
			}
			for _, m := range benchSection.FindAllStringSubmatch(line, -1) {
				if !benchHeadings[m[1]] {
					at("BENCHMARKS.md has no heading %q", m[1])
				}
			}
			for _, m := range sectionRef.FindAllStringSubmatch(line, -1) {
				prefix, page, num := m[1], m[2], m[3]
				inDocs := path.Dir(name) == "docs"
				var target string
				switch {
				case page == "" && inDocs:
					target = name
				case page == "":
					at("§%s names no page: write docs/design.md §%s or docs/protocol.md §%s", num, num, num)
					continue
				case prefix == "" && !inDocs:
					at("%s.md §%s: write docs/%s.md §%s", page, num, page, num)
					continue
				default:
					target = "docs/" + page + ".md"
				}
				if !sections(target)[num] {
					at("%s has no section %s", target, num)
				}
			}
		}
	}
	if read < 100 {
		t.Fatalf("read %d text files; git ls-files found too few", read)
	}
}
