// Package refusal is the shape of a refused request as the client sees it
// (docs/design.md §7): a status, a wire code, a sentence, a hint and the fields the
// code needs, and how a Hub route words them for the stock clients.
//
// It is shared by the two packages that refuse requests over HTTP: server,
// which attaches HTTP meaning to every other package's errors in one table
// and renders all refusals, and hub, the Hub API that server mounts. The
// sentinels are the refusals both decide (hub's other refusals are its own
// typed errors); server's table maps them all to this shape.
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
	// ErrUpstreamUnreachable: a mirror's upstream did not answer and what
	// was asked for is not mirrored yet (503 upstream_unreachable).
	ErrUpstreamUnreachable = errors.New("upstream unreachable")
	// ErrUpstreamBadAnswer: a mirror's upstream answered something that
	// does not check out (a size or hash that is not what it named); it
	// was refused, not served (502 upstream_bad_answer).
	ErrUpstreamBadAnswer = errors.New("upstream answered something invalid")
)

// Refused is a refusal of a kind (one of the sentinels, or another
// package's) with its sentence for the client. Wrap makes one; Message
// reads the sentence back without parsing any error text.
type Refused struct {
	Kind    error
	Message string
}

func (r *Refused) Error() string { return r.Kind.Error() + ": " + r.Message }
func (r *Refused) Unwrap() error { return r.Kind }

// Wrap refuses with kind and a sentence for the client: errors.Is(err,
// kind) holds, and Message gives the sentence back.
func Wrap(kind error, format string, args ...any) error {
	return &Refused{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Message is the sentence of the refusal of kind in err's chain (see
// Wrap), or all of err's text when it has none.
func Message(err error, kind error) string {
	if r := find(err, kind); r != nil {
		return r.Message
	}
	return err.Error()
}

// find walks err's tree as errors.Is does for the first Refused of kind.
func find(err, kind error) *Refused {
	switch e := err.(type) {
	case nil:
		return nil
	case *Refused:
		if errors.Is(e.Kind, kind) {
			return e
		}
		return find(e.Kind, kind)
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			if r := find(c, kind); r != nil {
				return r
			}
		}
		return nil
	default:
		return find(errors.Unwrap(err), kind)
	}
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
