// Package refusal is the shape of a refused request as the client sees it
// (design §7): a status, a wire code, a sentence, a hint and the fields the
// code needs, and how a Hub route words them for the stock clients.
//
// It is shared by the two packages that refuse requests over HTTP: server,
// which attaches HTTP meaning to every other package's errors in one table
// and renders all refusals, and hub, the Hub API that server mounts, which
// returns its refusals in this shape. The sentinels are the refusals both
// decide; server's table maps them.
package refusal

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a refusal as the client sees it. Status is the HTTP status, Code
// the wire code (docs/api.md), Message the sentence, Hint what to do;
// Fields are extra body fields, RetryAfter a Retry-After in seconds (0:
// none), Headers extra answer headers; Cause is the error refused, if any.
type Error struct {
	Status     int
	Code       string
	Message    string
	Hint       string
	Fields     map[string]any
	RetryAfter int
	Headers    map[string]string
	Cause      error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Cause }

// Sentinels for refusals that both server and hub decide; Wrap gives them
// their sentence.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNotFound   = errors.New("not found")
	ErrForbidden  = errors.New("forbidden")
	// ErrLengthRequired: an upload without Content-Length (411).
	ErrLengthRequired = errors.New("length required")
)

// Wrap wraps a sentinel with a sentence for the client; Message gets the
// sentence back.
func Wrap(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}

// Message is the text of err after kind's own prefix (see Wrap), or all of
// it when that prefix is not there.
func Message(err error, kind error) string {
	s := err.Error()
	if i := strings.Index(s, kind.Error()+": "); i >= 0 {
		return s[i+len(kind.Error())+2:]
	}
	return s
}

// HubText is the message and hint as one text, for the Hub clients:
// huggingface_hub prints X-Error-Message (and the body's "error" when it
// differs), @huggingface/hub prints the body's "error" and appends ". URL:
// …". The hint starts a sentence; the message keeps its case (it may start
// with a name); the text ends without a period, since both clients add one.
func (e *Error) HubText() string {
	msg := strings.TrimSuffix(e.Message, ".")
	if hint := upperFirst(strings.TrimSuffix(e.Hint, ".")); hint != "" {
		msg += ". " + hint
	}
	return msg
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
