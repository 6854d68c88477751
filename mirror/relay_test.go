package mirror_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/mirror"
	"openxet/mirror/upstream"
	"openxet/xet"
)

// reconAnswer is a v1 reconstruction answer as hf_xet reads it.
type reconAnswer struct {
	Offset uint64 `json:"offset_into_first_range"`
	Terms  []struct {
		Hash     string `json:"hash"`
		Unpacked uint64 `json:"unpacked_length"`
		Range    struct{ Start, End uint32 }
	} `json:"terms"`
	FetchInfo map[string][]struct {
		Range    struct{ Start, End uint32 }
		URL      string                      `json:"url"`
		URLRange struct{ Start, End uint64 } `json:"url_range"`
	} `json:"fetch_info"`
}

// download reads the file an answer describes through its fetch URLs, as
// hf_xet does, checking every fetch is a 206 of the url_range.
func download(t *testing.T, e *mirrorEnv, rec reconAnswer) []byte {
	t.Helper()
	var out []byte
	for i, term := range rec.Terms {
		var raw []byte
		var first uint32
		for _, fi := range rec.FetchInfo[term.Hash] {
			if fi.Range.Start <= term.Range.Start && term.Range.End <= fi.Range.End {
				r := fetchURL(t, e, fi.URL, fmt.Sprintf("Range: bytes=%d-%d", fi.URLRange.Start, fi.URLRange.End))
				if r.Status != http.StatusPartialContent || uint64(len(r.Body)) != fi.URLRange.End-fi.URLRange.Start+1 {
					t.Fatalf("fetch of term %d: %d, %d bytes: %s", i, r.Status, len(r.Body), r.Body)
				}
				raw, first = r.Body, fi.Range.Start
				break
			}
		}
		var data []byte
		for c, off := first, 0; c < term.Range.End; c++ {
			n := xet.ChunkHeaderBytes + (int(raw[off+1]) | int(raw[off+2])<<8 | int(raw[off+3])<<16)
			if c >= term.Range.Start {
				var err error
				if data, _, err = xet.AppendChunks(data, raw[off:off+n]); err != nil {
					t.Fatalf("term %d chunk %d: %v", i, c, err)
				}
			}
			off += n
		}
		if i == 0 {
			data = data[rec.Offset:]
		}
		out = append(out, data...)
	}
	return out
}

// fetchURL sends GET to an absolute fetch URL of the mirror, without a
// token (the URL is the authorisation).
func fetchURL(t *testing.T, e *mirrorEnv, raw string, headers ...string) struct {
	Status int
	Body   []byte
} {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(raw, e.URL) {
		t.Fatalf("fetch URL %q is not the mirror's", raw)
	}
	r := e.Do("GET", u.RequestURI(), "", nil, headers...)
	return struct {
		Status int
		Body   []byte
	}{r.Status, r.Body}
}

func reconstruct(t *testing.T, e *mirrorEnv, cas, hash string, headers ...string) reconAnswer {
	t.Helper()
	r := e.Do("GET", "/v1/reconstructions/"+hash, cas, nil, headers...)
	var rec reconAnswer
	if r.Status != 200 || json.Unmarshal(r.Body, &rec) != nil {
		t.Fatalf("reconstruction: %d %s", r.Status, r.Body)
	}
	return rec
}

func relayed(rec reconAnswer) (relay, local int) {
	for _, entries := range rec.FetchInfo {
		for _, fi := range entries {
			if strings.Contains(fi.URL, "&f=") {
				relay++
			} else {
				local++
			}
		}
	}
	return relay, local
}

// TestRelay is the first Xet download of a file not mirrored yet: it is
// answered from the upstream's plan through relay grants while the pull
// stores the file, each upstream range crosses once for both, and once the
// file is stored the mirror answers from its own xorbs. The relay's URLs
// are bound to what was signed, and end with the relay.
func TestRelay(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(21, 3<<20)
	up := u.repo(t, "meta", "relay", map[string][]byte{"model.safetensors": weights}, nil)
	cl, err := upstream.New(upstream.Options{BaseURL: u.URL, Token: u.token, Retries: -1, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	e := newMirror(t, u, withClient(cl))
	tok := e.Credential("ci", "read")
	entry, _ := up.Entry("model.safetensors")
	xt := e.Do("GET", "/api/models/meta/relay/xet-read-token/main", tok, nil).JSON(t)
	cas, _ := xt["accessToken"].(string)

	base := u.fileRequests(t)
	rec := reconstruct(t, e, cas, entry.XetHash)
	if r, l := relayed(rec); r == 0 || l != 0 {
		t.Fatalf("first reconstruction: %d relay and %d local fetch URLs, want only relay ones", r, l)
	}
	// Twenty clients at once read the plan's ranges with the pull.
	var wg sync.WaitGroup
	got := make([][]byte, 20)
	for i := range got {
		wg.Go(func() { got[i] = download(t, e, rec) })
	}
	wg.Wait()
	for i, b := range got {
		if !bytes.Equal(b, weights) {
			t.Fatalf("relayed download %d: %d bytes differ from the upstream's file", i, len(b))
		}
	}
	waitStored(t, e, 1)
	ranges := 0
	for _, entries := range rec.FetchInfo {
		ranges += len(entries)
	}
	// The plan's reconstruction, and each range once: the pull reads the
	// plan and the ranges the relay holds, and asks the upstream nothing,
	// so a file its clients read whole is stored even if the upstream is
	// gone by the time the pull runs.
	if n := u.fileRequests(t) - base; n != 1+ranges {
		t.Errorf("upstream file requests %d, want %d (1 reconstruction, %d ranges once)", n, 1+ranges, ranges)
	}
	if s := e.m.Stats(); s.RelayPlans != 1 || s.RelayBytes == 0 {
		t.Errorf("stats %+v: want 1 relay plan and its bytes", s)
	}
	checkRelayGrants(t, e, rec)

	// Stored now: the mirror's own xorbs, and the same bytes.
	after := reconstruct(t, e, cas, entry.XetHash)
	if r, l := relayed(after); r != 0 || l == 0 {
		t.Errorf("reconstruction once stored: %d relay and %d local fetch URLs", r, l)
	}
	if b := download(t, e, after); !bytes.Equal(b, weights) {
		t.Error("the stored file differs")
	}
	// The relay over, its URLs answer as a file that is not there.
	cl.Close()
	for _, entries := range rec.FetchInfo {
		if r := fetchURL(t, e, entries[0].URL); r.Status != 404 {
			t.Errorf("a relay URL after the relay: %d %s", r.Status, r.Body)
		}
	}
	e.checkIndex(t)
}

// checkRelayGrants: a relay URL changed in any signed part is refused.
func checkRelayGrants(t *testing.T, e *mirrorEnv, rec reconAnswer) {
	t.Helper()
	var one string
	for _, entries := range rec.FetchInfo {
		one = entries[0].URL
	}
	u, _ := url.Parse(one)
	for _, change := range []func(q url.Values){
		func(q url.Values) { q.Set("f", strings.Repeat("0", 64)) },
		func(q url.Values) { q.Del("f") },
		func(q url.Values) { q.Set("p", "model/ci/elsewhere") },
	} {
		v := *u
		q := v.Query()
		change(q)
		v.RawQuery = q.Encode()
		if r := fetchURL(t, e, v.String()); r.Status != 403 {
			t.Errorf("tampered relay URL %s: %d %s", v.RawQuery, r.Status, r.Body)
		}
	}
}

func withClient(cl *upstream.Client) func(*mirror.Config) {
	return func(c *mirror.Config) { c.Upstream = cl }
}

// waitStored waits until the mirror has pulled n files (the pull a relay
// starts runs beside the request).
func waitStored(t *testing.T, e *mirrorEnv, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); e.m.Stats().UpstreamFiles < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the pull under the relay did not end: %+v", e.m.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
