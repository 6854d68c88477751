package server

import (
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"openxet/xet"
)

// logLines parses the JSON request log into one map per line.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestRequestIDOnEveryAnswer: every answer, good or refused, on every kind
// of route, carries X-Request-Id; a sane id from the client is kept, any
// other is replaced by a fresh one; a refusal's body and the request's log
// line carry the same id.
func TestRequestIDOnEveryAnswer(t *testing.T) {
	logs := &lockedBuffer{}
	e := newTestEnv(t)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	alice := e.credential("alice", "write")
	fresh := regexp.MustCompile(`^[0-9a-f]{32}$`)
	routes := []struct {
		name, method, path, token string
		status                    int
	}{
		{"landing", "GET", "/", "", 200},
		{"CAS success", "GET", "/v1/chunks/default/" + strings.Repeat("0", 64), alice, 404},
		{"CAS refusal", "GET", "/v1/reconstructions/" + strings.Repeat("0", 64), "", 401},
		{"Hub success", "GET", "/api/whoami-v2", alice, 200},
		{"Hub refusal", "GET", "/api/models/alice/nope", alice, 404},
		{"admin refusal", "GET", "/api/openxet/v1/admin/tenants", alice, 403},
		{"no route", "DELETE", "/v1/nothing/here", "", 404},
	}
	sent := []struct {
		name, id string
		kept     bool
	}{
		{"none", "", false},
		{"sane", "client-id.42:abc/XYZ_+=", true},
		{"longest", strings.Repeat("r", maxRequestIDLen), true},
		{"too long", strings.Repeat("r", maxRequestIDLen+1), false},
		{"space", "two words", false},
		{"non-ASCII", "idé", false},
		{"tab", "id\twith-tab", false},
	}
	for _, rt := range routes {
		for _, s := range sent {
			name := rt.name + "/" + s.name
			var headers []string
			if s.id != "" {
				headers = append(headers, "X-Request-Id: "+s.id)
			}
			before := len(logs.String())
			r := e.do(rt.method, rt.path, rt.token, nil, headers...)
			if r.Status != rt.status {
				t.Fatalf("%s: status %d, want %d (%s)", name, r.Status, rt.status, r.Body)
			}
			got := r.Header.Get("X-Request-Id")
			if s.kept && got != s.id || !s.kept && !fresh.MatchString(got) {
				t.Errorf("%s: X-Request-Id %q (sent %q, kept %v)", name, got, s.id, s.kept)
			}
			if r.Status >= 400 {
				if id := r.json(t)["request_id"]; id != got {
					t.Errorf("%s: body request_id %v, header %q", name, id, got)
				}
			}
			e.handlers.waitIdle() // the line is written after the answer
			lines := logLines(t, logs.String()[before:])
			if len(lines) != 1 || lines[0]["request_id"] != got {
				t.Errorf("%s: log %v, want one line with request_id %q", name, lines, got)
			}
		}
	}
	// Two requests without an id get different ones.
	a, b := e.do("GET", "/healthz", "", nil), e.do("GET", "/healthz", "", nil)
	if a.Header.Get("X-Request-Id") == b.Header.Get("X-Request-Id") {
		t.Errorf("two requests share the id %q", a.Header.Get("X-Request-Id"))
	}
}

// TestRequestLogFields: the request line says its duration in
// milliseconds, the user agent and the request id; probes, /metrics and
// /v1/telemetry log at debug level unless refused.
func TestRequestLogFields(t *testing.T) {
	logs := &lockedBuffer{}
	e := newTestEnv(t)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	alice := e.credential("alice", "write")
	cases := []struct {
		method, path, token string
		status              int
		level               string
	}{
		{"GET", "/healthz", "", 200, "DEBUG"},
		{"GET", "/readyz", "", 200, "DEBUG"},
		{"GET", "/metrics", e.admin, 200, "DEBUG"},
		{"POST", "/v1/telemetry", alice, 204, "DEBUG"},
		{"GET", "/metrics", alice, 403, "INFO"},
		{"POST", "/v1/telemetry", "", 401, "INFO"},
		{"GET", "/v1/chunks/default/" + strings.Repeat("0", 64), alice, 404, "INFO"},
		{"GET", "/api/whoami-v2", alice, 200, "INFO"},
	}
	for _, c := range cases {
		name := c.method + " " + c.path
		before := len(logs.String())
		var body []byte
		if c.method == "POST" {
			body = []byte(`{"event":"x"}`)
		}
		r := e.do(c.method, c.path, c.token, body, "User-Agent: hf_xet/1.8.0; test agent", "X-Request-Id: rid-"+c.path)
		if r.Status != c.status {
			t.Fatalf("%s: status %d, want %d (%s)", name, r.Status, c.status, r.Body)
		}
		e.handlers.waitIdle() // the line is written after the answer
		lines := logLines(t, logs.String()[before:])
		if len(lines) != 1 {
			t.Fatalf("%s: %d log lines, want 1: %v", name, len(lines), lines)
		}
		l := lines[0]
		if l["level"] != c.level || l["user_agent"] != "hf_xet/1.8.0; test agent" || l["request_id"] != "rid-"+c.path {
			t.Errorf("%s: level %v, user_agent %v, request_id %v; want %s, the agent and the id", name, l["level"], l["user_agent"], l["request_id"], c.level)
		}
		if ms, ok := l["duration_ms"].(float64); !ok || ms < 0 {
			t.Errorf("%s: duration_ms %v (%T), want a number of milliseconds", name, l["duration_ms"], l["duration_ms"])
		}
		if _, ok := l["duration"]; ok {
			t.Errorf("%s: the line still has a duration without unit: %v", name, l["duration"])
		}
	}
	// At the default (info) level, the probes do not show.
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	before := len(logs.String())
	e.do("GET", "/healthz", "", nil)
	e.do("POST", "/v1/telemetry", alice, []byte("{}"))
	e.handlers.waitIdle()
	if out := logs.String()[before:]; out != "" {
		t.Errorf("probe and telemetry lines at info level: %s", out)
	}
}

// TestRequestIDInShardErrorFrames: a /v2/shards failure is an NDJSON error
// frame of a 200 answer; the frame carries the request id too.
func TestRequestIDInShardErrorFrames(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	_, info := xet.BuildXorb(randomChunks(61, 2, 10_000), false)
	f, cas := fileOf(info) // the xorb is never uploaded
	r := e.do("POST", "/v2/shards", alice, (&xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}).MarshalUpload(), "X-Request-Id: frame-test")
	lines := strings.Split(strings.TrimSpace(string(r.Body)), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last frame %q: %v", lines[len(lines)-1], err)
	}
	if r.Status != 200 || last["type"] != "error" || last["request_id"] != "frame-test" || r.Header.Get("X-Request-Id") != "frame-test" {
		t.Errorf("%d %s (X-Request-Id %q), want an error frame with request_id frame-test", r.Status, r.Body, r.Header.Get("X-Request-Id"))
	}
}

// TestRequestLogRefusalMessage: a refused request's log line carries the
// refusal's sentence beside its code, on a v1 answer and on a v2 error
// frame, so that an operator sees why a client's shard was refused.
func TestRequestLogRefusalMessage(t *testing.T) {
	logs := &lockedBuffer{}
	e := newTestEnv(t)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	alice := e.credential("alice", "write")
	// footer_size 200 and one entry after the CAS bookend: neither the end
	// of the shard nor room for a footer.
	bad := (&xet.Shard{}).MarshalUpload()
	bad[40] = xet.ShardFooterBytes
	bad = append(bad, make([]byte, xet.ShardEntryBytes)...)
	for _, path := range []string{"/v1/shards", "/v2/shards"} {
		before := len(logs.String())
		r := e.do("POST", path, alice, bad)
		if !strings.Contains(string(r.Body), "invalid_shard") {
			t.Fatalf("%s: %d %s, want invalid_shard", path, r.Status, r.Body)
		}
		e.handlers.waitIdle() // the line is written after the answer
		lines := logLines(t, logs.String()[before:])
		if len(lines) != 1 {
			t.Fatalf("%s: %d log lines, want 1: %v", path, len(lines), lines)
		}
		msg, _ := lines[0]["message"].(string)
		if lines[0]["error"] != "invalid_shard" || !strings.Contains(msg, "48 bytes after the CAS-info bookend") {
			t.Errorf("%s: log error %v message %q, want invalid_shard and the parser's reason", path, lines[0]["error"], msg)
		}
	}
}
