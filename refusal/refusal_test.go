package refusal

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHubText: the Hub clients print the message and the hint as one
// sentence, the hint capitalised, without a final period (they add one).
func TestHubText(t *testing.T) {
	for _, c := range []struct{ msg, hint, want string }{
		{"repository a/b not found", "check the repo id", "repository a/b not found. Check the repo id"},
		{"tenant alice: over quota.", "Delete files.", "tenant alice: over quota. Delete files"},
		{"You already created this model repo", "", "You already created this model repo"},
		{"x", "1 to 200 characters", "x. 1 to 200 characters"},
	} {
		e := &Error{Code: "c", Message: c.msg, Hint: c.hint}
		if got := e.HubText(); got != c.want {
			t.Errorf("%q + %q: %q, want %q", c.msg, c.hint, got, c.want)
		}
	}
}

// TestBody: "error" is the code on CAS routes and the sentence on Hub
// routes, where the code moves to "code"; fields and the request id join.
func TestBody(t *testing.T) {
	e := &Error{Status: 403, Code: "quota_exceeded", Message: "over", Hint: "delete files", Fields: map[string]any{"quota": 10}}
	for _, c := range []struct {
		hub  bool
		id   string
		want map[string]any
	}{
		{false, "r1", map[string]any{"error": "quota_exceeded", "message": "over", "hint": "delete files", "quota": 10.0, "request_id": "r1"}},
		{true, "r1", map[string]any{"error": "over. Delete files", "code": "quota_exceeded", "message": "over", "hint": "delete files", "quota": 10.0, "request_id": "r1"}},
		{false, "", map[string]any{"error": "quota_exceeded", "message": "over", "hint": "delete files", "quota": 10.0}},
	} {
		var got map[string]any
		if err := json.Unmarshal(e.AppendJSON(nil, c.id, c.hub), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("hub %v, id %q:\n%s", c.hub, c.id, diff)
		}
	}
}

// bodyMap is the body AppendJSON writes, built as a map: the reference
// FuzzAppendJSON marshals with encoding/json.
func bodyMap(e *Error, requestID string, hub bool) map[string]any {
	m := map[string]any{"error": e.Code, "message": e.Message}
	if hub {
		m["error"], m["code"] = e.HubText(), e.Code
	}
	if e.Hint != "" {
		m["hint"] = e.Hint
	}
	for k, v := range e.Fields {
		m[k] = v
	}
	if requestID != "" {
		m["request_id"] = requestID
	}
	return m
}

// TestWrap: a wrapped sentinel is found with errors.Is and its sentence
// comes back whole, even when wrapped again.
func TestWrap(t *testing.T) {
	err := fmt.Errorf("context: %w", Wrap(ErrBadRequest, "limit %q is bad", "x"))
	if !errors.Is(err, ErrBadRequest) || errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is: %v", err)
	}
	if got := Message(err, ErrBadRequest); got != `limit "x" is bad` {
		t.Errorf("Message: %q", got)
	}
}

// FuzzAppendJSON: AppendJSON writes the bytes json.Marshal writes for bodyMap,
// whatever the strings (escapes, invalid UTF-8, U+2028) and whichever
// fields collide with the refusal's own keys.
func FuzzAppendJSON(f *testing.F) {
	f.Add("rate_limited", "credential rate limit reached", "slow down <&>", "credential", "limit", int64(3), "r1", false)
	f.Add("quota_exceeded", "over\x00\x1f\"\\\u2028\u2029", "", "\xff\xfe", "hint", int64(-1), "", true)
	f.Add("c", "m", "h", "v", "request_id", int64(1<<62), "id\t\n\r\b\f", true)
	f.Fuzz(func(t *testing.T, code, msg, hint, str, key string, n int64, id string, hub bool) {
		for _, fields := range []map[string]any{
			nil,
			{key: str},
			{key: n, "other": str},
			{"error": n, "message": int(n), "code": str, key: []string{str}},
		} {
			e := &Error{Status: 429, Code: code, Message: msg, Hint: hint, Fields: fields}
			want, err := json.Marshal(bodyMap(e, id, hub))
			if err != nil {
				t.Fatal(err)
			}
			if got := e.AppendJSON(nil, id, hub); string(got) != string(want) {
				t.Fatalf("fields %v, id %q, hub %v:\n got %s\nwant %s", fields, id, hub, got, want)
			}
		}
	})
}

// TestMessageIsTyped: the sentence comes from the refusal itself, not
// from its text: a sentence that contains another kind's prefix, a
// refusal inside errors.Join, and an error of the kind with no sentence.
func TestMessageIsTyped(t *testing.T) {
	tricky := Wrap(ErrNotFound, "bad request: is part of this sentence")
	joined := errors.Join(errors.New("other"), fmt.Errorf("ctx: %w", Wrap(ErrForbidden, "no access")))
	plain := fmt.Errorf("ctx: %w", ErrBadRequest)
	for _, c := range []struct {
		err  error
		kind error
		want string
	}{
		{tricky, ErrNotFound, "bad request: is part of this sentence"},
		{tricky, ErrBadRequest, "not found: bad request: is part of this sentence"},
		{joined, ErrForbidden, "no access"},
		{plain, ErrBadRequest, "ctx: bad request"},
	} {
		if got := Message(c.err, c.kind); got != c.want {
			t.Errorf("Message(%v, %v) = %q, want %q", c.err, c.kind, got, c.want)
		}
	}
}
