package upstreamtest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"openxet/mirror/upstreamtest"
)

// shape is v's JSON structure without its values: object keys (sorted)
// with their shapes, the distinct shapes of an array's elements, and the
// type of each scalar.
func shape(v any) string {
	switch x := v.(type) {
	case map[string]any:
		var keys []string
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { return !isHash(k) }) {
			// Keyed by xorb hash: the shapes of the values.
			var vals []string
			for _, k := range keys {
				if s := shape(x[k]); !slices.Contains(vals, s) {
					vals = append(vals, s)
				}
			}
			slices.Sort(vals)
			return "{<hash>:" + strings.Join(vals, "|") + "}"
		}
		var b strings.Builder
		b.WriteString("{")
		for _, k := range keys {
			fmt.Fprintf(&b, "%s:%s,", k, shape(x[k]))
		}
		return b.String() + "}"
	case []any:
		var elems []string
		for _, e := range x {
			if s := shape(e); !slices.Contains(elems, s) {
				elems = append(elems, s)
			}
		}
		slices.Sort(elems)
		return "[" + strings.Join(elems, "|") + "]"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return "?"
}

func isHash(k string) bool {
	return len(k) == 64 && strings.Trim(k, "0123456789abcdef") == ""
}

func shapeOf(t *testing.T, body []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%q is not JSON: %v", body, err)
	}
	return shape(v)
}

func get(t *testing.T, url, token string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "upstream", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newServer(t *testing.T) *upstreamtest.Server {
	s := upstreamtest.New(t)
	s.Token = "hf_secret"
	s.AddRepo(upstreamtest.Repo{Type: "model", ID: "org/model", Files: []upstreamtest.File{
		{Path: "config.json", Content: []byte(`{"a": 1}`)},
		{Path: "dir/notes.txt", Content: []byte("notes\n")},
		{Path: "model.safetensors", Content: bytes.Repeat([]byte("0123456789abcdef"), 100_000), Xet: true},
		{Path: "weights.lfs", Content: bytes.Repeat([]byte("w"), 300_000), LFS: true},
	}})
	s.AddRepo(upstreamtest.Repo{Type: "model", ID: "org/gated", Gated: "manual", Files: []upstreamtest.File{
		{Path: "w.bin", Content: bytes.Repeat([]byte("g"), 100_000), Xet: true},
	}})
	return s
}

// TestAnswersHaveTheFixturesShapes: each JSON answer has the structure of
// its fixture in testdata/upstream (the Hub's, see its README).
func TestAnswersHaveTheFixturesShapes(t *testing.T) {
	s := newServer(t)
	api := s.URL() + "/api/models/"
	_, tok := get(t, api+"org/model/xet-read-token/main", "hf_secret")
	var token struct{ AccessToken string }
	json.Unmarshal(tok, &token)
	hash := s.XetHash("model", "org/model", "model.safetensors")
	cases := []struct {
		fixture, url, token string
		header              []string
	}{
		{"model-info.json", api + "org/model", "", nil},
		{"model-info.json", api + "org/model/revision/main", "", nil},
		{"model-info-gated.json", api + "org/gated/revision/main", "", nil},
		{"tree-page.json", api + "org/model/tree/main?recursive=true", "", nil},
		{"tree-gated.json", api + "org/gated/tree/main?recursive=true", "", nil},
		{"xet-read-token.json", api + "org/model/xet-read-token/main", "hf_secret", nil},
		{"reconstruction.json", s.CDNURL() + "/v1/reconstructions/" + hash, token.AccessToken, []string{"Range: bytes=1000-1599999"}},
	}
	for _, tc := range cases {
		res, body := get(t, tc.url, tc.token, tc.header...)
		if res.StatusCode != 200 {
			t.Errorf("%s: %d %s", tc.url, res.StatusCode, body)
			continue
		}
		if got, want := shapeOf(t, body), shapeOf(t, fixture(t, tc.fixture)); got != want {
			t.Errorf("%s: shape\n %s\nwant (%s)\n %s", tc.url, got, tc.fixture, want)
		}
	}
}

// TestHubHeadersAndErrors: resolve sends LFS and Xet files to the other
// host with the headers huggingface_hub reads; errors carry X-Error-Code.
func TestHubHeadersAndErrors(t *testing.T) {
	s := newServer(t)
	res, _ := get(t, s.URL()+"/org/model/resolve/main/model.safetensors", "")
	loc := res.Header.Get("Location")
	if res.StatusCode != 302 || !strings.HasPrefix(loc, s.CDNURL()+"/") || s.CDNURL() == s.URL() {
		t.Errorf("resolve of a Xet file: %d to %q", res.StatusCode, loc)
	}
	for _, h := range []string{"X-Repo-Commit", "X-Linked-Size", "X-Linked-Etag", "X-Xet-Hash", "ETag", "Link", "X-Xet-Refresh-Route"} {
		if res.Header.Get(h) == "" {
			t.Errorf("resolve of a Xet file has no %s", h)
		}
	}
	if res.Header.Get("X-Linked-Size") != "1600000" {
		t.Errorf("X-Linked-Size %q", res.Header.Get("X-Linked-Size"))
	}
	res, body := get(t, loc, "")
	if res.StatusCode != 200 || len(body) != 1_600_000 || s.FileBytesServed() != 1_600_000 {
		t.Errorf("CDN: %d, %d bytes, %d counted", res.StatusCode, len(body), s.FileBytesServed())
	}
	res, body = get(t, s.URL()+"/org/model/resolve/main/config.json", "", "Range: bytes=2-")
	if res.StatusCode != 206 || string(body) != `a": 1}` || res.Header.Get("Content-Range") != "bytes 2-7/8" || res.Header.Get("X-Repo-Commit") == "" {
		t.Errorf("ranged resolve of a regular file: %d %q %v", res.StatusCode, body, res.Header)
	}
	for _, tc := range []struct {
		url, token string
		status     int
		code       string
	}{
		{s.URL() + "/api/models/org/nope", "", 401, "RepoNotFound"},
		{s.URL() + "/api/models/org/nope", "hf_x", 404, "RepoNotFound"},
		{s.URL() + "/api/models/org/model/revision/dev", "", 404, "RevisionNotFound"},
		{s.URL() + "/org/model/resolve/main/nope", "", 404, "EntryNotFound"},
		{s.URL() + "/api/models/org/model/tree/main/nope", "", 404, "EntryNotFound"},
		{s.URL() + "/org/gated/resolve/main/w.bin", "", 401, "GatedRepo"},
		{s.URL() + "/org/gated/resolve/main/w.bin", "hf_x", 403, "GatedRepo"},
		{s.URL() + "/api/models/org/gated/xet-read-token/main", "", 401, "GatedRepo"},
	} {
		res, body := get(t, tc.url, tc.token)
		if res.StatusCode != tc.status || res.Header.Get("X-Error-Code") != tc.code || res.Header.Get("X-Error-Message") == "" || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s: %d %s %q %s, want %d %s", tc.url, res.StatusCode, res.Header.Get("X-Error-Code"), res.Header.Get("X-Error-Message"), body, tc.status, tc.code)
		}
	}
}

// TestStopStart: a stopped server refuses connections; started again it
// answers on the same address.
func TestStopStart(t *testing.T) {
	s := newServer(t)
	url := s.URL()
	s.Stop()
	if _, err := http.Get(url + "/api/models/org/model"); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start()
	if s.URL() != url {
		t.Fatalf("started on %s, was %s", s.URL(), url)
	}
	res, err := http.Get(url + "/api/models/org/model")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("after Start: %v %v", res, err)
	}
	res.Body.Close()
}
