package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"openxet/server"
	"openxet/store"
	"openxet/xet"
)

type lfsObject struct {
	OID     string `json:"oid"`
	Size    int64  `json:"size"`
	Actions *struct {
		Upload struct {
			Href   string            `json:"href"`
			Header map[string]string `json:"header"`
		} `json:"upload"`
	} `json:"actions"`
}

// lfsBatch asks the batch API for an upload of content, offering transfers
// (nil for none), and returns the chosen transfer and the object.
func (e env) lfsBatch(token, repo string, transfers []string, content []byte) (string, lfsObject) {
	e.TB.Helper()
	sum := sha256.Sum256(content)
	req := map[string]any{"operation": "upload", "hash_algo": "sha256",
		"objects": []map[string]any{{"oid": hex.EncodeToString(sum[:]), "size": len(content)}}}
	if transfers != nil {
		req["transfers"] = transfers
	}
	body, _ := json.Marshal(req)
	r := e.Do("POST", "/"+repo+".git/info/lfs/objects/batch", token, body)
	if r.Status != 200 {
		e.TB.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	var out struct {
		Transfer string
		Objects  []lfsObject
	}
	if err := json.Unmarshal(r.Body, &out); err != nil || len(out.Objects) != 1 {
		e.TB.Fatalf("batch answer %s: %v", r.Body, err)
	}
	return out.Transfer, out.Objects[0]
}

// put sends body to an absolute URL with no Authorization header, as
// huggingface_hub and @huggingface/hub send the basic transfer's PUT.
func put(tb testing.TB, href string, body []byte) response {
	tb.Helper()
	req, err := http.NewRequest("PUT", href, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// xetFileHash is the file hash hf_xet computes for content (xet's chunker
// reproduces hf_xet's chunks: xet.TestChunkerMatchesHFXet).
func xetFileHash(t *testing.T, content []byte) xet.Hash {
	t.Helper()
	cr := xet.NewChunkReader(bytes.NewReader(content), nil)
	var agg xet.AggregatedHasher
	for {
		c, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return agg.FileHash()
		}
		if err != nil {
			t.Fatal(err)
		}
		agg.Add(xet.Leaf{Hash: xet.ChunkHash(c), Size: uint64(len(c))})
	}
}

// TestLFSBatchOffersWhatTheClientAsks: xet only when the client lists it,
// basic when it lists basic or nothing, and a 400 when it lists neither.
func TestLFSBatchOffersWhatTheClientAsks(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	content := randomBytes(1, 1000)
	sum := sha256.Sum256(content)
	for _, tc := range []struct {
		offered []string
		want    string
	}{
		{nil, "basic"},
		{[]string{"basic", "multipart"}, "basic"}, // huggingface_hub, @huggingface/hub
		{[]string{"basic", "xet"}, "xet"},
		{[]string{"xet"}, "xet"}, // git-xet
	} {
		transfer, obj := e.lfsBatch(alice, "alice/m", tc.offered, content)
		if transfer != tc.want || obj.Actions == nil {
			t.Fatalf("offered %v: transfer %q, actions %v; want %q with an upload action", tc.offered, transfer, obj.Actions, tc.want)
		}
		href := obj.Actions.Upload.Href
		switch tc.want {
		case "basic":
			if !strings.HasPrefix(href, e.URL+"/alice/m.git/info/lfs/objects/"+hex.EncodeToString(sum[:])+"?token=") {
				t.Fatalf("offered %v: basic href %s", tc.offered, href)
			}
		case "xet":
			if !strings.Contains(href, "/xet-write-token/") || obj.Actions.Upload.Header["X-Xet-Access-Token"] == "" {
				t.Fatalf("offered %v: xet action %+v", tc.offered, obj.Actions.Upload)
			}
		}
	}
	body, _ := json.Marshal(map[string]any{"operation": "upload", "transfers": []string{"multipart"},
		"objects": []map[string]any{{"oid": hex.EncodeToString(sum[:]), "size": len(content)}}})
	if r := e.Do("POST", "/alice/m.git/info/lfs/objects/batch", alice, body); r.Status != 400 {
		t.Fatalf("only multipart offered: %d %s, want 400", r.Status, r.Body)
	}
}

// TestLFSBasicUploadStoresAsXet: an object PUT to the basic href is stored
// as a Xet file (hf_xet's file hash, its SHA-256), can be committed by oid,
// downloads byte for byte, and dedups with a later upload of the same bytes.
func TestLFSBasicUploadStoresAsXet(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	content := randomBytes(2, 700_000)
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	transfer, obj := e.lfsBatch(alice, "alice/m", []string{"basic", "multipart"}, content)
	if transfer != "basic" || obj.Actions == nil {
		t.Fatalf("batch: %q %+v", transfer, obj)
	}
	if r := put(t, obj.Actions.Upload.Href, content); r.Status != 200 {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	ctx := context.Background()
	f, err := e.Store.FileBySHA256(ctx, "alice", oid)
	if err != nil {
		t.Fatal(err)
	}
	if want := xetFileHash(t, content); f.Hash != want || f.SizeBytes != uint64(len(content)) {
		t.Fatalf("registered file %s of %d bytes, want %s of %d", f.Hash, f.SizeBytes, want, len(content))
	}
	usage, _ := e.Store.Usage(ctx, "alice")

	// The batch now offers no upload; a PUT of the same object again is
	// answered without storing anything.
	if _, again := e.lfsBatch(alice, "alice/m", nil, content); again.Actions != nil {
		t.Fatalf("second batch offers an upload: %+v", again.Actions)
	}
	if r := put(t, obj.Actions.Upload.Href, content); r.Status != 200 {
		t.Fatalf("second PUT: %d %s", r.Status, r.Body)
	}
	if u, _ := e.Store.Usage(ctx, "alice"); u != usage {
		t.Fatalf("usage after the second PUT %d, want %d", u, usage)
	}

	line := fmt.Sprintf(`{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":%q,"size":%d}}`, oid, len(content))
	if r := e.commitLines(alice, "alice/m", line); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	r := e.Do("GET", "/alice/m/resolve/main/w.bin", alice, nil)
	if r.Status != 200 || !bytes.Equal(r.Body, content) {
		t.Fatalf("download: %d, %d bytes, equal %v", r.Status, len(r.Body), bytes.Equal(r.Body, content))
	}
	if got := r.Header.Get("X-Xet-Hash"); got != "" && got != f.Hash.String() {
		t.Fatalf("X-Xet-Hash %s, want %s", got, f.Hash)
	}

	// Another object sharing most of its bytes stores only the new ones.
	edited := append(bytes.Clone(content[:600_000]), randomBytes(3, 100_000)...)
	_, obj2 := e.lfsBatch(alice, "alice/m", nil, edited)
	if r := put(t, obj2.Actions.Upload.Href, edited); r.Status != 200 {
		t.Fatalf("PUT edited: %d %s", r.Status, r.Body)
	}
	if u, _ := e.Store.Usage(ctx, "alice"); u-usage > 300_000 {
		t.Fatalf("the edited object cost %d bytes of quota; it shares 600,000 of its 700,000", u-usage)
	}
}

// TestLFSBasicUploadRefusals: no token, a credential in the URL, a body
// that is not the oid's, a missing length and an object over the quota are
// refused, and none of them registers the object.
func TestLFSBasicUploadRefusals(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.Limits.QuotaBytes = 500_000 })
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	content := randomBytes(4, 300_000)
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	_, obj := e.lfsBatch(alice, "alice/m", nil, content)
	href := obj.Actions.Upload.Href
	bare, _, _ := strings.Cut(href, "?")
	other := bytes.Clone(content)
	other[0] ^= 1
	for _, tc := range []struct {
		name   string
		href   string
		body   []byte
		status int
	}{
		{"no token", bare, content, 401},
		{"a credential in the URL", bare + "?token=" + url.QueryEscape(alice), content, 401},
		{"other bytes", href, other, 400},
		{"shorter", href, content[:1000], 400},
	} {
		if r := put(t, tc.href, tc.body); r.Status != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, r.Status, r.Body, tc.status)
		}
	}
	big := randomBytes(5, 600_000)
	_, bigObj := e.lfsBatch(alice, "alice/m", nil, content) // href for content; reuse its token
	bigSum := sha256.Sum256(big)
	bigHref := strings.Replace(bigObj.Actions.Upload.Href, oid, hex.EncodeToString(bigSum[:]), 1)
	if r := put(t, bigHref, big); r.Status != 403 || !strings.Contains(string(r.Body), "quota_exceeded") {
		t.Fatalf("over the quota: %d %s, want 403 quota_exceeded", r.Status, r.Body)
	}
	if _, err := e.Store.FileBySHA256(context.Background(), "alice", oid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused PUT registered the object: %v", err)
	}
}

// TestRepoInfoAnswersXetEnabled: ?expand=xetEnabled (huggingface_hub) and
// ?expand[]=xetEnabled (@huggingface/hub) get xetEnabled: true.
func TestRepoInfoAnswersXetEnabled(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	for _, tc := range []struct {
		path string
		want any
	}{
		{"/api/models/alice/m/revision/main?expand=xetEnabled", true},
		{"/api/models/alice/m?expand%5B%5D=xetEnabled", true},
		{"/api/models/alice/m?expand=sha&expand=xetEnabled", true},
		{"/api/models/alice/m", nil},
	} {
		r := e.Do("GET", tc.path, alice, nil)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", tc.path, r.Status, r.Body)
		}
		if got := r.JSON(t)["xetEnabled"]; got != tc.want {
			t.Fatalf("%s: xetEnabled %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestLFSBasicUploadOfSeveralXorbs: an object over one xorb's 64 MiB is
// stored in several, and downloads byte for byte.
func TestLFSBasicUploadOfSeveralXorbs(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	content := make([]byte, 70<<20)
	for i := 0; i < len(content); i += sha256.Size {
		s := sha256.Sum256(fmt.Appendf(nil, "big:%d", i))
		copy(content[i:], s[:])
	}
	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	_, obj := e.lfsBatch(alice, "alice/m", []string{"basic"}, content)
	if r := put(t, obj.Actions.Upload.Href, content); r.Status != 200 {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	f, err := e.Store.FileBySHA256(context.Background(), "alice", oid)
	if err != nil {
		t.Fatal(err)
	}
	terms, _, err := e.Store.FileTerms(context.Background(), "alice", f.Hash, 0, f.SizeBytes)
	if err != nil || len(terms) < 2 || terms[0].Xorb == terms[len(terms)-1].Xorb {
		t.Fatalf("terms %+v, %v: want the file in more than one xorb", terms, err)
	}
	if want := xetFileHash(t, content); f.Hash != want {
		t.Fatalf("file hash %s, want %s", f.Hash, want)
	}
	line := fmt.Sprintf(`{"key":"lfsFile","value":{"path":"big.bin","algo":"sha256","oid":%q,"size":%d}}`, oid, len(content))
	if r := e.commitLines(alice, "alice/m", line); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/alice/m/resolve/main/big.bin", alice, nil); r.Status != 200 || !bytes.Equal(r.Body, content) {
		t.Fatalf("download: %d, %d bytes, equal %v", r.Status, len(r.Body), bytes.Equal(r.Body, content))
	}
}

// TestLFSBasicUploadOfAnEmptyObject: a 0-byte object is registered like
// hf_xet registers an empty file (zero hash, no terms) and can be committed.
func TestLFSBasicUploadOfAnEmptyObject(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	_, obj := e.lfsBatch(alice, "alice/m", nil, nil)
	if r := put(t, obj.Actions.Upload.Href, []byte{}); r.Status != 200 {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	sum := sha256.Sum256(nil)
	f, err := e.Store.FileBySHA256(context.Background(), "alice", hex.EncodeToString(sum[:]))
	if err != nil || !f.Hash.IsZero() || f.SizeBytes != 0 {
		t.Fatalf("registered %+v, %v; want the empty file", f, err)
	}
}

// TestURLTokenOnlyOnTheLFSUploadRoute: the CAS token the basic href
// carries authenticates that PUT and nothing else.
func TestURLTokenOnlyOnTheLFSUploadRoute(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	_, obj := e.lfsBatch(alice, "alice/m", nil, []byte("x"))
	_, query, _ := strings.Cut(obj.Actions.Upload.Href, "?")
	for _, p := range []string{"/api/models/alice/m", "/api/models/alice/m/xet-write-token/main", "/api/whoami-v2"} {
		if r := e.Do("GET", p+"?"+query, "", nil); r.Status != 401 {
			t.Errorf("GET %s with the URL token: %d %s, want 401", p, r.Status, r.Body)
		}
	}
}
