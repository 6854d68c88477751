package server

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"openxet/xet"
)

// TestRequestLogStages: each request line says where the request spent
// its time, with an attribute per stage it went through and none for the
// stages it did not.
func TestRequestLogStages(t *testing.T) {
	logs := &lockedBuffer{}
	e := newTestEnv(t)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	alice := e.credential("alice", "write")
	x, _ := xet.BuildXorb(randomChunks(66, 2, 10_000), false)
	f := e.upload(alice, x)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	e.do("GET", "/v1/reconstructions/"+f.Hash.String(), "hf_oxt_nobody_0000", nil)

	want := map[string]struct{ has, lacks []string }{
		"POST /v1/xorbs/":              {has: []string{"t_auth", "t_work_wait", "t_index", "t_memory_wait", "t_body", "t_validate", "t_write"}, lacks: []string{"t_open"}},
		"POST /v1/shards":              {has: []string{"t_auth", "t_work_wait", "t_index", "t_memory_wait", "t_body", "t_validate", "t_write"}, lacks: []string{"t_open"}},
		"GET /v1/reconstructions/ 200": {has: []string{"t_auth", "t_work_wait", "t_index", "t_memory_wait"}, lacks: []string{"t_body", "t_write"}},
		// Refused at auth: no stage got that far.
		"GET /v1/reconstructions/ 401": {lacks: []string{"t_auth", "t_work_wait", "t_index"}},
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] != "request" {
			continue
		}
		for k, w := range want {
			method, rest, _ := strings.Cut(k, " ")
			path, status, _ := strings.Cut(rest, " ")
			if m["method"] != method || !strings.HasPrefix(m["path"].(string), path) || (status != "" && status != jsonNumber(m["status"])) {
				continue
			}
			seen[k] = true
			for _, a := range w.has {
				if d, ok := m[a].(float64); !ok || d <= 0 {
					t.Errorf("%s: %s = %v, want a positive duration\n%s", k, a, m[a], line)
				}
			}
			for _, a := range w.lacks {
				if _, ok := m[a]; ok {
					t.Errorf("%s: has %s, a stage it did not go through\n%s", k, a, line)
				}
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no request line for %s", k)
		}
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
