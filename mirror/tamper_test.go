package mirror_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"openxet/mirror/upstream"
)

// tamperProxy stands in front of a real upstream and changes its answers
// as a lying upstream would; every URL of the upstream in a JSON answer
// (the CAS URL, fetch URLs) is rewritten to the proxy, so that every
// request goes through it.
type tamperProxy struct {
	*httptest.Server
	mu sync.Mutex
	// jsonEdit changes a JSON answer's body (after the URL rewrite);
	// pathEdit a request's path; fetchEdit a fetch answer's body.
	jsonEdit  func(path string, body []byte) []byte
	pathEdit  func(path string) string
	fetchEdit func(body []byte) []byte
}

func newTamperProxy(t *testing.T, target string) *tamperProxy {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{}
	rp := httputil.NewSingleHostReverseProxy(tu)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		p.mu.Lock()
		if p.pathEdit != nil {
			r.URL.Path = p.pathEdit(r.URL.Path)
		}
		p.mu.Unlock()
	}
	rp.ModifyResponse = func(res *http.Response) error {
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		p.mu.Lock()
		switch {
		case strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"):
			body = bytes.ReplaceAll(body, []byte(target), []byte(p.URL))
			if p.jsonEdit != nil {
				body = p.jsonEdit(res.Request.URL.Path, body)
			}
		case strings.HasPrefix(res.Request.URL.Path, "/v1/fetch/") && p.fetchEdit != nil:
			body = p.fetchEdit(body)
		}
		p.mu.Unlock()
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	p.Server = httptest.NewServer(rp)
	t.Cleanup(p.Close)
	return p
}

// TestRelayChecksBeforeTheLastByte is a lying upstream behind the relay
// of a first Xet download (issue 45 item 1): a flipped byte, a swapped
// reconstruction, a xetHash naming other content (another file's, or
// content the tree hides), each through a real upstream. No client gets the whole file unchecked: the last byte of the
// range that would complete its copy waits for the check, and a copy that
// does not check out is cut there, so that the download fails; the relay
// then refuses further plans of the file, and nothing is stored. Through
// the same proxy unchanged, the download is whole and the check passes.
func TestRelayChecksBeforeTheLastByte(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(45, 3<<20)
	other := randomBytes(46, 3<<20)
	up := u.repo(t, "meta", "lie", map[string][]byte{"model.safetensors": weights, "other.safetensors": other}, nil)
	realHash := func(name string) string {
		e, ok := up.Entry(name)
		if !ok {
			t.Fatalf("no %s upstream", name)
		}
		return e.XetHash
	}
	hw, ho := realHash("model.safetensors"), realHash("other.safetensors")

	for _, tc := range relayLies(hw, ho) {
		for _, windows := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d windows", tc.name, windows), func(t *testing.T) {
				checkRelayLie(t, u, weights, hw, ho, tc, windows)
			})
		}
	}
}

// relayLie is a way an upstream lies, set on the proxy in front of it.
type relayLie struct {
	name string
	lie  func(p *tamperProxy)
}

// relayLies are the lies of TestRelayChecksBeforeTheLastByte; hw and ho
// are the Xet hashes of model.safetensors and other.safetensors.
func relayLies(hw, ho string) []relayLie {
	return []relayLie{
		{"honest", func(p *tamperProxy) {}},
		{"flipped byte", func(p *tamperProxy) {
			// A data byte of the first chunk: random bytes are stored
			// uncompressed, so the chunk still decodes, to other bytes.
			p.fetchEdit = func(b []byte) []byte {
				if len(b) > 100 {
					b[100] ^= 0xff
				}
				return b
			}
		}},
		{"swapped reconstruction", func(p *tamperProxy) {
			p.pathEdit = func(path string) string {
				return strings.Replace(path, "/v1/reconstructions/"+hw, "/v1/reconstructions/"+ho, 1)
			}
		}},
		{"xetHash of another file", func(p *tamperProxy) {
			// model.safetensors listed with other's Xet hash (its own size
			// and SHA-256), other.safetensors as it is.
			p.jsonEdit = func(path string, b []byte) []byte {
				if strings.Contains(path, "/tree/") || strings.Contains(path, "/paths-info/") {
					return bytes.ReplaceAll(b, []byte(hw), []byte(ho))
				}
				return b
			}
		}},
		{"xetHash of hidden content", func(p *tamperProxy) {
			// The same, with other.safetensors left out of the tree and of
			// the revision's siblings.
			p.jsonEdit = func(path string, b []byte) []byte {
				if strings.Contains(path, "/revision/") {
					var info map[string]any
					d := json.NewDecoder(bytes.NewReader(b))
					d.UseNumber()
					if d.Decode(&info) != nil {
						return b
					}
					sib, _ := info["siblings"].([]any)
					info["siblings"] = slices.DeleteFunc(sib, func(s any) bool { return s.(map[string]any)["rfilename"] == "other.safetensors" })
					b, _ = json.Marshal(info)
					return b
				}
				if !strings.Contains(path, "/tree/") && !strings.Contains(path, "/paths-info/") {
					return b
				}
				var entries []map[string]any
				d := json.NewDecoder(bytes.NewReader(b))
				d.UseNumber()
				if d.Decode(&entries) != nil {
					return b
				}
				entries = slices.DeleteFunc(entries, func(e map[string]any) bool { return e["path"] == "other.safetensors" })
				out, _ := json.Marshal(entries)
				return bytes.ReplaceAll(out, []byte(hw), []byte(ho))
			}
		}},
	}
}

// checkRelayLie downloads model.safetensors through a mirror whose
// upstream lies as tc says, in windows windows, and checks the outcome.
func checkRelayLie(t *testing.T, u *upstreamEnv, weights []byte, hw, ho string, tc relayLie, windows int) {
	t.Helper()
	p := newTamperProxy(t, u.URL)
	tc.lie(p)
	cl, err := upstream.New(upstream.Options{BaseURL: p.URL, Token: u.token, Retries: -1, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	e := newMirror(t, u, withClient(cl))
	tok := e.Credential("ci", "read")
	xt := e.Do("GET", "/api/models/meta/lie/xet-read-token/main", tok, nil).JSON(t)
	cas, _ := xt["accessToken"].(string)
	if cas == "" {
		t.Fatalf("xet-read-token: %v", xt)
	}
	listed := hw
	if strings.HasPrefix(tc.name, "xetHash") {
		listed = ho
	}
	if tc.name == "xetHash of another file" {
		// Two entries claim one content with two SHA-256s:
		// asked for by its hash, it is neither relayed nor
		// pulled.
		r := e.Do("GET", "/v1/reconstructions/"+listed, cas, nil)
		if r.Status != http.StatusBadGateway || r.JSON(t)["error"] != "upstream_bad_answer" {
			t.Fatalf("reconstruction of a hash two entries claim differently: %d %s", r.Status, r.Body)
		}
		if s := e.m.Stats(); s.UpstreamFiles != 0 || s.RelayPlans != 0 {
			t.Errorf("stats %+v: relayed or stored", s)
		}
		e.checkIndex(t)
		return
	}
	// hf_xet asks a large file's plan a window at a time.
	var got []byte
	cut := 0
	for w := range windows {
		size := len(weights)
		from, to := w*size/windows, (w+1)*size/windows-1
		rec := reconstruct(t, e, cas, listed, fmt.Sprintf("Range: bytes=%d-%d", from, to))
		if r, l := relayed(rec); r == 0 || l != 0 {
			t.Fatalf("reconstruction: %d relay and %d local fetch URLs, want only relay ones", r, l)
		}
		b, c := fetchAll(t, e, rec)
		b = b[:min(len(b), to-from+1)] // the last term may run past the window
		got, cut = append(got, b...), cut+c
	}
	if tc.name == "honest" {
		if cut != 0 || !bytes.Equal(got, weights) {
			t.Fatalf("honest upstream: %d fetches cut, %d bytes, equal %v", cut, len(got), bytes.Equal(got, weights))
		}
		waitStored(t, e, 1)
		e.checkIndex(t)
		return
	}
	if cut == 0 {
		t.Fatalf("every fetch of a lying upstream's file completed (%d bytes, sha256 %s); want the last one cut", len(got), sha(got))
	}
	// The relay refuses the file now: a new plan is the upstream's
	// bad answer, and the file never gets stored.
	r := e.Do("GET", "/v1/reconstructions/"+listed, cas, nil)
	if r.Status != http.StatusBadGateway || r.JSON(t)["error"] != "upstream_bad_answer" {
		t.Errorf("reconstruction after the failed check: %d %s", r.Status, r.Body)
	}
	if s := e.m.Stats(); s.UpstreamFiles != 0 {
		t.Errorf("stats %+v: a lying upstream's file was stored", s)
	}
	e.checkIndex(t)
}

// fetchAll fetches every range of a plan through its fetch URLs, in
// order, and returns the bytes of the answers that came whole, decoded as
// hf_xet decodes them when all did, and how many answers were cut short.
func fetchAll(t *testing.T, e *mirrorEnv, rec reconAnswer) (file []byte, cut int) {
	t.Helper()
	for _, entries := range rec.FetchInfo {
		for _, fi := range entries {
			r := fetchURL(t, e, fi.URL, fmt.Sprintf("Range: bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End))
			if r.Status != http.StatusPartialContent {
				t.Fatalf("fetch: %d %s", r.Status, r.Body)
			}
			if uint64(len(r.Body)) != fi.URLRange.End-fi.URLRange.Start+1 {
				cut++
			}
		}
	}
	if cut > 0 {
		return nil, cut
	}
	return download(t, e, rec), 0
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
