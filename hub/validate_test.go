package hub_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestValidateYAML: POST /api/validate-yaml answers without a token (as
// huggingface_hub's ModelCard.push_to_hub and metadata_update send it),
// 200 with no errors for a card whose metadata is a YAML mapping, 200 with
// a warning for one without metadata, and 400 with the errors
// huggingface_hub prints for metadata that is not YAML or not a mapping.
func TestValidateYAML(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "read")
	card := func(content string) []byte {
		b, _ := json.Marshal(map[string]string{"content": content, "repoType": "model"})
		return b
	}
	valid := "---\nlicense: mit\ntags:\n- text\n---\n# Model\n"
	for _, c := range []struct {
		name, token, ct string
		body            []byte
		warnings        int
	}{
		{"anonymous", "", "application/json", card(valid), 0},
		{"with a token", alice, "application/json", card(valid), 0},
		{"CRLF", "", "application/json", card(strings.ReplaceAll(valid, "\n", "\r\n")), 0},
		{"form", "", "application/x-www-form-urlencoded", []byte(url.Values{"content": {valid}, "repoType": {"dataset"}}.Encode()), 0},
		{"no metadata", "", "application/json", card("# Model\n"), 1},
		{"empty metadata", "", "application/json", card("---\n---\n# Model\n"), 1},
		{"null metadata", "", "application/json", card("---\n# a comment\n---\n"), 1},
		{"empty card", "", "application/json", card(""), 1},
	} {
		r := e.Do("POST", "/api/validate-yaml", c.token, c.body, "Content-Type: "+c.ct)
		var got struct {
			Errors   []map[string]string
			Warnings []map[string]string
		}
		if err := json.Unmarshal(r.Body, &got); r.Status != 200 || err != nil || got.Errors == nil || len(got.Errors) != 0 || len(got.Warnings) != c.warnings {
			t.Errorf("%s: %d %s, want 200 with no errors and %d warnings", c.name, r.Status, r.Body, c.warnings)
		}
		if c.warnings > 0 && !strings.Contains(got.Warnings[0]["message"], "empty or missing yaml metadata") {
			t.Errorf("%s: warnings %v", c.name, got.Warnings)
		}
	}
}

// TestValidateYAMLRefusals: metadata that is not YAML or not a mapping is
// 400 with errors[].message (HfApi raises ValueError with them); a body
// over 2 MiB is 413 unread; another method is 405; a bad token is 401 as on
// every route, even though no token is needed.
func TestValidateYAMLRefusals(t *testing.T) {
	e := newEnv(t)
	card := func(content string) []byte {
		b, _ := json.Marshal(map[string]string{"content": content})
		return b
	}
	for _, c := range []struct {
		name, content, text string
	}{
		{"bad YAML", "---\nlicense: [mit\n---\n", "the metadata of the card is not valid YAML: yaml: line 1: did not find expected ',' or ']'"},
		{"a list", "---\n- a\n- b\n---\n", "the metadata of the card is a YAML list, not a mapping"},
		{"a scalar", "---\njust text\n---\n", "the metadata of the card is a YAML scalar (just text), not a mapping"},
	} {
		r := e.Do("POST", "/api/validate-yaml", "", card(c.content), "Content-Type: application/json")
		m := hubRefusal(t, c.name, r, 400, "bad_request", "bad_request",
			c.text+". Fix the YAML between the --- lines at the top of README.md: it must be a mapping of keys to values")
		errs, _ := m["errors"].([]any)
		if len(errs) != 1 || errs[0].(map[string]any)["message"] != c.text {
			t.Errorf("%s: errors %v, want one with message %q", c.name, m["errors"], c.text)
		}
		if w, ok := m["warnings"].([]any); !ok || len(w) != 0 {
			t.Errorf("%s: warnings %v, want []", c.name, m["warnings"])
		}
	}
	for _, c := range []struct{ name, body, text string }{
		{"not JSON", "{", "the body is not a card to validate"},
		{"no content", `{"repoType":"model"}`, "the body names no content"},
		{"unknown type", `{"content":"","repoType":"kernel"}`, "unknown repo type"},
	} {
		r := e.Do("POST", "/api/validate-yaml", "", []byte(c.body), "Content-Type: application/json")
		if r.Status != 400 || r.Header.Get("X-Error-Code") != "bad_request" || !strings.Contains(r.Header.Get("X-Error-Message"), c.text) {
			t.Errorf("%s: %d %q %s, want 400 bad_request %q", c.name, r.Status, r.Header.Get("X-Error-Code"), r.Body, c.text)
		}
	}
	big := card("---\nlicense: mit\n---\n" + strings.Repeat("x", 2<<20))
	hubRefusal(t, "too large", e.Do("POST", "/api/validate-yaml", "", big, "Content-Type: application/json"), 413, "payload_too_large", "payload_too_large",
		"the body is over the 2097152-byte limit of a repo card. A README.md's metadata is its YAML front matter; send the card without large content")
	r := e.Do("GET", "/api/validate-yaml", "", nil)
	if r.Status != 405 || r.Header.Get("X-Error-Code") != "method_not_allowed" {
		t.Errorf("GET: %d %q %s, want 405 method_not_allowed", r.Status, r.Header.Get("X-Error-Code"), r.Body)
	}
	r = e.Do("POST", "/api/validate-yaml", "not-a-token", card("---\na: 1\n---\n"), "Content-Type: application/json")
	if r.Status != 401 || r.Header.Get("X-Error-Code") != "unauthorized" || bytes.Contains(r.Body, []byte("warnings")) {
		t.Errorf("bad token: %d %q %s, want 401 unauthorized", r.Status, r.Header.Get("X-Error-Code"), r.Body)
	}
}
