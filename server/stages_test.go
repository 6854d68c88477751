package server

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"openxet/xet"
)

// TestRequestLogStages: each request line says where the request spent
// its time, with an attribute per stage it went through and none for the
// stages it did not.
func TestRequestLogStages(t *testing.T) {
	e, logs, alice, f := loggedUpload(t, 66)
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
	for _, m := range requestLines(logs.String()) {
		line, _ := json.Marshal(m)
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

	res := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	if res.Status != 200 {
		t.Fatalf("reconstruction: %d %s", res.Status, res.Body)
	}
	m := parseTiming(t, res.Header.Get("Server-Timing"))
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

// parseTiming reads a Server-Timing value into each metric's dur, failing
// t on a metric without a readable one.
func parseTiming(t *testing.T, v string) map[string]float64 {
	t.Helper()
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

// TestRequestStart: every spelling of X-Request-Start in use is read to
// the same instant, and anything else is refused.
func TestRequestStart(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Time
	}{
		{"t=1796180645.123", at.Truncate(time.Millisecond)}, // nginx ${msec}
		{"1796180645", at.Truncate(time.Second)},
		{"1796180645123", at.Truncate(time.Millisecond)},       // milliseconds (Heroku)
		{"t=1796180645123456", at.Truncate(time.Microsecond)},  // Apache %t
		{"1796180645123456789", at},                            // nanoseconds
		{"t=1796180645.123456", at.Truncate(time.Microsecond)}, // seconds with microseconds
	} {
		got, ok := requestStart(c.v)
		if !ok || !got.Equal(c.want) {
			t.Errorf("requestStart(%q) = %v, %v; want %v", c.v, got, ok, c.want)
		}
	}
	for _, v := range []string{"", "t=", "t", "abc", "-5", "+5", "0", "t=0", "1e9", "0x10", "NaN", "Inf", "1.2.3", "1.", ".5",
		" t=1796180645", "t=1796180645 ", "1_796_180_645", "t=t=1796180645", "99999999999999999999", "123456789012345678901"} {
		if got, ok := requestStart(v); ok {
			t.Errorf("requestStart(%q) = %v; want it refused", v, got)
		}
	}
}

// TestQueueTime: the wait is the arrival less the time sent, and a time
// sent in the future or more than maxQueue ago gives none.
func TestQueueTime(t *testing.T) {
	arrival := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	micros := func(d time.Duration) string { return "t=" + strconv.FormatInt(arrival.Add(-d).UnixMicro(), 10) }
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{micros(1500 * time.Microsecond), 1500 * time.Microsecond},
		{micros(0), 0},
		{micros(maxQueue), maxQueue},
		{micros(maxQueue + time.Microsecond), noQueue},
		{micros(-time.Microsecond), noQueue}, // the sender's clock is ahead
		{"", noQueue},
		{"soon", noQueue},
	} {
		if got := queueTime(c.v, arrival); got != c.want {
			t.Errorf("queueTime(%q) = %v, want %v", c.v, got, c.want)
		}
	}
}

// FuzzRequestStart: no value panics, and one that is read is digits (with
// "t=" and one fraction at most) naming a time after 1970.
func FuzzRequestStart(f *testing.F) {
	for _, s := range []string{"t=1796180645.123", "1796180645123456", "1796180645123456789", "", "t=", "1e9", "9223372036854775807", "8999999999999999999.9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := requestStart(v)
		if !ok {
			return
		}
		digits := strings.ReplaceAll(strings.TrimPrefix(v, "t="), ".", "")
		if digits == "" || !allDigits(digits) || strings.Count(v, ".") > 1 {
			t.Fatalf("requestStart(%q) accepted it", v)
		}
		if !got.After(time.Unix(0, 0)) {
			t.Fatalf("requestStart(%q) = %v, before 1970", v, got)
		}
		_ = queueTime(v, time.Now())
	})
}

// TestServerTimingQueue: a request that says when it was sent gets the
// wait before its arrival as Server-Timing's queue and the request log's
// t_queue, outside the total; one whose X-Request-Start is not to be
// believed gets neither, and is served all the same.
func TestServerTimingQueue(t *testing.T) {
	e, logs, alice, f := loggedUpload(t, 68)
	path := "/v1/reconstructions/" + f.Hash.String()

	// Sent ten minutes ago by the test's clock, which is the server's: the
	// wait is at least that, and far below maxQueue however slow the
	// machine.
	sent := time.Now().Add(-10 * time.Minute)
	res := e.do("GET", path, alice, nil, headerRequestStart+": t="+strconv.FormatInt(sent.UnixMicro(), 10))
	m := parseTiming(t, res.Header.Get(headerServerTiming))
	if res.Status != 200 || m["queue"] < 600_000 || m["queue"] > float64(maxQueue/time.Millisecond) {
		t.Errorf("sent 10 minutes ago: %d, Server-Timing %q; want 200 and a queue of 10 minutes", res.Status, res.Header.Get(headerServerTiming))
	}
	if m["total"] >= 600_000 {
		t.Errorf("Server-Timing %q: the total counts the queue", res.Header.Get(headerServerTiming))
	}
	var line map[string]any
	for _, m := range requestLines(logs.String()) {
		if m["method"] == "GET" {
			line = m
		}
	}
	if q, ok := line["t_queue"].(float64); !ok || q < float64(10*time.Minute) {
		t.Errorf("request line %v: t_queue %v, want 10 minutes or more", line, line["t_queue"])
	}

	for _, v := range []string{
		"t=" + strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10),    // from a clock ahead of ours
		"t=" + strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMicro(), 10), // older than maxQueue
		"yesterday",
	} {
		before := len(logs.String())
		res := e.do("GET", path, alice, nil, headerRequestStart+": "+v)
		timing := res.Header.Get(headerServerTiming)
		if res.Status != 200 || strings.Contains(timing, "queue") || !strings.Contains(timing, "total") {
			t.Errorf("X-Request-Start %q: %d, Server-Timing %q; want 200 without a queue", v, res.Status, timing)
		}
		if line := logs.String()[before:]; strings.Contains(line, "t_queue") {
			t.Errorf("X-Request-Start %q: the request line has t_queue:\n%s", v, line)
		}
	}
}

// loggedUpload returns a test server whose request log (JSON) goes to
// logs, a credential of tenant alice, and a file alice uploaded (from
// chunks of seed).
func loggedUpload(t *testing.T, seed uint64) (e *testEnv, logs *lockedBuffer, alice string, f xet.FileInfo) {
	logs = &lockedBuffer{}
	e = newTestEnv(t)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	alice = e.credential("alice", "write")
	x, _ := xet.BuildXorb(randomChunks(seed, 2, 10_000), false)
	return e, logs, alice, e.upload(alice, x)
}

// requestLines returns the request log's lines ("msg":"request") in log,
// decoded.
func requestLines(log string) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" {
			lines = append(lines, m)
		}
	}
	return lines
}
