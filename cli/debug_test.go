package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDebugHandler: server.debug_listen serves Go's profiler index and a
// runtime trace, and nothing else.
func TestDebugHandler(t *testing.T) {
	srv := httptest.NewServer(debugHandler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/trace?seconds=0.1": "go 1.",
	} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d, %d bytes, want %q in them", path, res.StatusCode, len(body), want)
		}
	}
	if res, err := http.Get(srv.URL + "/metrics"); err != nil || res.StatusCode != 404 {
		t.Errorf("/metrics on the profiler's listener: %v %v", res.StatusCode, err)
	}
}
