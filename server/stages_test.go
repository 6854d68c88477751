package server

import (
	"encoding/json"
	"log/slog"
	"strconv"
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

// TestServerTimingHeader: an authenticated request's answer carries its
// time in the server and its stage times in Server-Timing, so a client can
// tell the server's share of a latency from its own; an answer to a request
// that did not authenticate carries none.
func TestServerTimingHeader(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	x, _ := xet.BuildXorb(randomChunks(67, 2, 10_000), false)
	f := e.upload(alice, x)

	parse := func(v string) map[string]float64 {
		m := map[string]float64{}
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			d, ok := strings.CutPrefix(params, "dur=")
			if !ok {
				t.Fatalf("Server-Timing %q: metric %q has no dur", v, name)
			}
			f, err := strconv.ParseFloat(d, 64)
			if err != nil || f < 0 {
				t.Fatalf("Server-Timing %q: metric %q dur %q", v, name, d)
			}
			m[name] = f
		}
		return m
	}
	res := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	if res.Status != 200 {
		t.Fatalf("reconstruction: %d %s", res.Status, res.Body)
	}
	m := parse(res.Header.Get("Server-Timing"))
	for _, name := range []string{"total", "auth", "index"} {
		if _, ok := m[name]; !ok {
			t.Errorf("Server-Timing %q lacks %s", res.Header.Get("Server-Timing"), name)
		}
	}
	if _, ok := m["write"]; ok {
		t.Errorf("Server-Timing %q has write, a stage a read does not go through", res.Header.Get("Server-Timing"))
	}
	sum := 0.0
	for k, v := range m {
		if k != "total" {
			sum += v
		}
	}
	// Stages are parts of the total, rounded down to the microsecond each.
	if sum > m["total"]+0.001*float64(len(m)) {
		t.Errorf("Server-Timing %q: stages add up to %.3f ms, more than the total", res.Header.Get("Server-Timing"), sum)
	}

	for _, tok := range []string{"", "hf_oxt_nobody_0000"} {
		res := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), tok, nil)
		if res.Status != 401 || res.Header.Get("Server-Timing") != "" {
			t.Errorf("token %q: %d, Server-Timing %q; want 401 without it", tok, res.Status, res.Header.Get("Server-Timing"))
		}
	}
}
