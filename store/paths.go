package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxRepoPathBytes caps a path in a repo.
const MaxRepoPathBytes = 1024

// PathProblem is why p cannot name a file or folder in a repo, or "" when
// it can: a path is 1 to MaxRepoPathBytes bytes of UTF-8 without control
// characters (NUL, newlines, DEL), its components separated by single "/",
// none of them ".", ".." or ".git", also when split again at a backslash (a
// Windows client's separator); it neither starts nor ends with "/".
// Every tree openxet records obeys it: a commit's (hub) and a mirrored
// upstream's (mirror), so that no client writes outside its target folder
// or into a git work tree's .git.
func PathProblem(p string) string {
	switch {
	case p == "":
		return "the path is empty"
	case len(p) > MaxRepoPathBytes:
		return fmt.Sprintf("the path has %d bytes, over the %d a path may have", len(p), MaxRepoPathBytes)
	case !utf8.ValidString(p):
		return "the path is not UTF-8"
	case strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/"):
		return `the path starts or ends with "/"`
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "the path has a control character"
		}
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" {
			return `the path has an empty component ("//")`
		}
		// A backslash separates folders on Windows, where a client
		// writes the file: "..\x" climbs out of the target folder there.
		for _, sub := range strings.Split(part, `\`) {
			switch sub {
			case ".", "..":
				return fmt.Sprintf("the path has a %q component (folders are separated by / and, on Windows, \\)", sub)
			case ".git":
				return `the path has a ".git" component`
			}
		}
	}
	return ""
}
