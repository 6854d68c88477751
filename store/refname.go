package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrBadRefName means a branch or tag name is not of the allowed form.
var ErrBadRefName = errors.New("invalid branch or tag name")

// maxRefNameBytes caps a branch or tag name.
const maxRefNameBytes = 200

// ValidRefName checks a branch or tag name as it is given (without
// refs/heads/ or refs/tags/): git's rules for a ref name (git
// check-ref-format --branch) plus what a Hub revision needs, so that a name
// never reads as something else in a URL or a revision.
//
// Refused: an empty name or one over 200 bytes; bytes that are not UTF-8;
// control characters (newlines, tabs, NUL, DEL), a space, or any of
// ~ ^ : ? * [ \; "..", "@{", "//"; a leading or trailing "/", a trailing
// "."; a component that starts with "." or ends with ".lock"; a leading
// "-"; the names "@" and "HEAD"; a name under "refs/" (a full ref name,
// such as refs/tags/x, is not a branch or tag name); and 40 hex digits,
// which read as a commit id. The error wraps ErrBadRefName and says which
// rule the name breaks.
func ValidRefName(name string) error {
	if why := refNameProblem(name); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadRefName, name, why)
	}
	return nil
}

// refNameProblem is the rule name breaks, or "" when it breaks none.
func refNameProblem(name string) string {
	switch {
	case name == "":
		return "a name is 1 to 200 bytes"
	case len(name) > maxRefNameBytes:
		return fmt.Sprintf("%d bytes, over the %d a name may have", len(name), maxRefNameBytes)
	case !utf8.ValidString(name):
		return "not UTF-8"
	case name == "@" || name == "HEAD":
		return "a reserved name"
	case strings.HasPrefix(name, "refs/"):
		return "a full ref name; give the branch or tag name without refs/…"
	case strings.HasPrefix(name, "-"):
		return `starts with "-"`
	case isCommitID(name):
		return "40 hex digits read as a commit id"
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "a control character"
		}
	}
	if i := strings.IndexAny(name, " ~^:?*[\\"); i >= 0 {
		return fmt.Sprintf("%q is not allowed", name[i])
	}
	for _, seq := range []string{"..", "@{", "//"} {
		if strings.Contains(name, seq) {
			return fmt.Sprintf("%q is not allowed", seq)
		}
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return `starts or ends with "/"`
	}
	if strings.HasSuffix(name, ".") {
		return `ends with "."`
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return `a component starts with "."`
		}
		if strings.HasSuffix(part, ".lock") {
			return `a component ends with ".lock"`
		}
	}
	return ""
}

// isCommitID reports whether s is 40 hex digits, the form of a commit id.
func isCommitID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
