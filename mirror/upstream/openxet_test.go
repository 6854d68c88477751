package upstream_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"openxet/mirror"
	"openxet/mirror/upstream"
	"openxet/server/servertest"
	"openxet/store"
	"openxet/xet"
)

// A real openxet server is the upstream of these tests: its Hub routes
// (revision, tree, resolve, xet-read-token) and its CAS (reconstructions,
// signed fetch URLs) are what huggingface.co's look like to the clients.

// realRepo is a repo of an openxet upstream with a Xet file and a regular
// file.
type realRepo struct {
	env     *servertest.Env
	token   string // a read credential of the repo's tenant
	repo    mirror.RepoRef
	sha     string
	xetFile []byte // "model.bin"
	xetHash string
	config  []byte // "config.json", a regular file kept in git
}

// newRealUpstream starts an openxet server and commits to alice/m a Xet
// file of size bytes (seeded; part random, part compressible, with a
// repeated stretch so that terms reuse a xorb) uploaded as hf_xet does,
// and a small regular file.
func newRealUpstream(tb testing.TB, size int, seed uint64) realRepo {
	tb.Helper()
	env := servertest.New(tb)
	write := env.Credential("alice", "write")
	if r := env.Do("POST", "/api/repos/create", write, []byte(`{"name":"m"}`)); r.Status != 200 {
		tb.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
	content := fileContent(size, seed)
	hash := uploadXet(tb, env, write, content)
	config := []byte(`{"model_type": "test", "hidden_size": 8}` + "\n")
	sum := sha256.Sum256(content)
	body := `{"key":"header","value":{"summary":"test","description":"upload of model.bin"}}` + "\n" +
		fmt.Sprintf(`{"key":"lfsFile","value":{"path":"model.bin","algo":"sha256","oid":%q,"size":%d}}`, hex.EncodeToString(sum[:]), len(content)) + "\n" +
		fmt.Sprintf(`{"key":"file","value":{"path":"config.json","content":%q,"encoding":"base64"}}`, base64.StdEncoding.EncodeToString(config)) + "\n"
	if r := env.Do("POST", "/api/models/alice/m/commit/main", write, []byte(body)); r.Status != 200 {
		tb.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	var info struct{ SHA string }
	r := env.Do("GET", "/api/models/alice/m", write, nil)
	if err := json.Unmarshal(r.Body, &info); err != nil || info.SHA == "" {
		tb.Fatalf("repo info: %d %s", r.Status, r.Body)
	}
	return realRepo{env: env, token: env.Credential("alice", "read"), repo: mirror.RepoRef{Type: "model", ID: "alice/m"},
		sha: info.SHA, xetFile: content, xetHash: hash, config: config}
}

// fileContent is size bytes: random, then text that compresses, then a
// copy of the first MiB.
func fileContent(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]byte, 0, size)
	for len(out) < size/2 {
		out = append(out, byte(r.Uint32()))
	}
	for i := 0; len(out) < size*3/4; i++ {
		out = append(out, fmt.Sprintf("line %d of a compressible stretch %d\n", i, i%7)...)
	}
	out = append(out, out[:min(1<<20, size-len(out))]...)
	for len(out) < size {
		out = append(out, byte(r.Uint32()))
	}
	return out[:size]
}

// chunks cuts data at its content-defined chunk boundaries.
func chunks(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := xet.ChunkLen(data)
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// xetHashOf is the Xet file hash of data, as hf_xet computes it.
func xetHashOf(data []byte) string {
	var leaves []xet.Leaf
	for _, c := range chunks(data) {
		leaves = append(leaves, xet.Leaf{Hash: xet.ChunkHash(c), Size: uint64(len(c))})
	}
	return xet.FileHash(leaves).String()
}

// uploadXet uploads content through the CAS as hf_xet does: chunks
// deduplicated by hash into xorbs of at most 16 chunks (LZ4-compressed
// where that helps), then a shard with the file's terms and SHA-256. It
// returns the file's Xet hash.
func uploadXet(tb testing.TB, env *servertest.Env, token string, content []byte) string {
	tb.Helper()
	type loc struct {
		xorb  int
		index uint32
	}
	seen := map[xet.Hash]loc{}
	var xorbs [][][]byte
	var order []loc
	var leaves []xet.Leaf
	for _, c := range chunks(content) {
		h := xet.ChunkHash(c)
		leaves = append(leaves, xet.Leaf{Hash: h, Size: uint64(len(c))})
		l, ok := seen[h]
		if !ok {
			if len(xorbs) == 0 || len(xorbs[len(xorbs)-1]) == 16 {
				xorbs = append(xorbs, nil)
			}
			l = loc{len(xorbs) - 1, uint32(len(xorbs[len(xorbs)-1]))}
			xorbs[l.xorb] = append(xorbs[l.xorb], c)
			seen[h] = l
		}
		order = append(order, l)
	}
	infos := make([]xet.XorbInfo, len(xorbs))
	for i, cs := range xorbs {
		body, info := xet.BuildXorb(cs, true)
		if r := env.Do("POST", "/v1/xorbs/default/"+info.Hash.String(), token, body); r.Status != 200 {
			tb.Fatalf("xorb: %d %s", r.Status, r.Body)
		}
		infos[i] = info
	}
	var terms []xet.Term
	var verification []xet.Hash
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && order[j].xorb == order[i].xorb && order[j].index == order[j-1].index+1 {
			j++
		}
		info := infos[order[i].xorb]
		start, end := order[i].index, order[j-1].index+1
		var unpacked uint64
		var hashes []xet.Hash
		for k := start; k < end; k++ {
			unpacked += uint64(info.Chunks[k].Size)
			hashes = append(hashes, info.Chunks[k].Hash)
		}
		terms = append(terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(unpacked), ChunkStart: start, ChunkEnd: end})
		verification = append(verification, xet.RangeHash(hashes))
		i = j
	}
	sum := sha256.Sum256(content)
	sha, err := xet.ParseHash(hex.EncodeToString(sum[:]))
	if err != nil {
		tb.Fatal(err)
	}
	f := xet.FileInfo{Hash: xet.FileHash(leaves), Flags: 0x80000000 | xet.FileFlagMetadataExt, Terms: terms, Verification: verification, SHA256: &sha}
	sh := &xet.Shard{Files: []xet.FileInfo{f}}
	for _, info := range infos {
		sh.Xorbs = append(sh.Xorbs, xet.CASInfoFromXorb(info))
	}
	if r := env.Do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		tb.Fatalf("shard: %d %s", r.Status, r.Body)
	}
	if len(terms) < 3 {
		tb.Fatalf("the file has %d terms; the test wants several", len(terms))
	}
	return f.Hash.String()
}

func newClient(tb testing.TB, opts upstream.Options) *upstream.Client {
	tb.Helper()
	c, err := upstream.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestRealUpstream: Revision and Open against a real openxet upstream give
// its commit, its files with their sizes and hashes, and their bytes, from
// the start and from offsets inside terms, through several windows.
func TestRealUpstream(t *testing.T) {
	u := newRealUpstream(t, 4<<20+12345, 1)
	ctx := context.Background()
	for _, window := range []int64{0, 300_000} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			rec := &recorder{}
			c := newClient(t, upstream.Options{BaseURL: u.env.URL, Token: u.token, ReconstructionWindow: window, HTTPClient: &http.Client{Transport: rec}})
			rev, err := c.Revision(ctx, u.repo, "main")
			if err != nil {
				t.Fatal(err)
			}
			if rev.SHA != u.sha || len(rev.Files) != 3 { // .gitattributes, config.json, model.bin
				t.Fatalf("revision %s with %d files %+v, want %s with 3", rev.SHA, len(rev.Files), rev.Files, u.sha)
			}
			bin := rev.Files[2]
			sum := sha256.Sum256(u.xetFile)
			if bin.Path != "model.bin" || bin.Size != int64(len(u.xetFile)) || bin.XetHash != u.xetHash || bin.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("model.bin listed as %+v; want size %d, xet hash %s", bin, len(u.xetFile), u.xetHash)
			}
			if cfg := rev.Files[1]; cfg.Path != "config.json" || cfg.XetHash != "" || cfg.SHA256 != "" || cfg.Size != int64(len(u.config)) {
				t.Fatalf("config.json listed as %+v", cfg)
			}
			for _, off := range []int64{0, 1, 65_000, int64(len(u.xetFile)) / 2, int64(len(u.xetFile)) - 1, int64(len(u.xetFile))} {
				got := readAll(t, c, u.repo, rev.SHA, bin, off)
				if !bytes.Equal(got, u.xetFile[off:]) {
					t.Fatalf("offset %d: %d bytes, want %d (first difference at %d)", off, len(got), len(u.xetFile)-int(off), firstDiff(got, u.xetFile[off:]))
				}
				if off == 0 {
					if h := xetHashOf(got); h != u.xetHash {
						t.Fatalf("the bytes hash to %s, the upstream says %s", h, u.xetHash)
					}
				}
			}
			recons, fetches := rec.count("/v1/reconstructions/"), rec.count("/v1/fetch")
			if wantMore := window != 0; recons < 5 || wantMore && recons < 2*int(int64(len(u.xetFile))/window) || fetches < 5 {
				t.Errorf("%d reconstruction and %d fetch requests", recons, fetches)
			}
			for _, r := range rec.all() {
				if strings.Contains(r.URL, "/v1/") && r.Auth == "Bearer "+u.token {
					t.Errorf("%s sent the upstream token", r.URL)
				}
			}
			for _, off := range []int64{0, 5} {
				if got := readAll(t, c, u.repo, rev.SHA, rev.Files[1], off); !bytes.Equal(got, u.config[off:]) {
					t.Fatalf("config.json from %d: %q, want %q", off, got, u.config[off:])
				}
			}
		})
	}
}

func readAll(tb testing.TB, c *upstream.Client, repo mirror.RepoRef, sha string, f mirror.File, off int64) []byte {
	tb.Helper()
	rc, err := c.Open(context.Background(), repo, sha, f, off)
	if err != nil {
		tb.Fatalf("open %s at %d: %v", f.Path, off, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("read %s from %d: %v", f.Path, off, err)
	}
	return b
}

// recorder is a transport that notes each request's URL and
// Authorization header.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct{ URL, Auth, Range string }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{req.URL.String(), req.Header.Get("Authorization"), req.Header.Get("Range")})
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func (r *recorder) count(substr string) int {
	n := 0
	for _, q := range r.all() {
		if strings.Contains(q.URL, substr) {
			n++
		}
	}
	return n
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestRealUpstreamNotFound: a repo, revision or file the upstream does not
// have is ErrNotFound with the Hub's X-Error-Code.
func TestRealUpstreamNotFound(t *testing.T) {
	u := newRealUpstream(t, 1<<20, 2)
	ctx := context.Background()
	c := newClient(t, upstream.Options{BaseURL: u.env.URL, Token: u.token})
	rev, err := c.Revision(ctx, u.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	// The commit's text, from the upstream's commits route.
	if rev.Title != "test" || rev.Message != "upload of model.bin" {
		t.Errorf("commit text %q %q, want the upstream's", rev.Title, rev.Message)
	}
	// A tag is told from a branch by the upstream's refs route.
	cm, err := u.env.Store.Resolve(ctx, store.RepoID{Tenant: "alice", Type: "model", Name: "m"}, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := u.env.Store.CreateTag(ctx, store.RepoID{Tenant: "alice", Type: "model", Name: "m"}, "v1", cm); err != nil {
		t.Fatal(err)
	}
	if tag, err := c.Revision(ctx, u.repo, "v1"); err != nil || !tag.Tag || rev.Tag {
		t.Errorf("tag v1: %v, Tag %v; main Tag %v", err, tag.Tag, rev.Tag)
	}
	// A Xet file listed smaller than its reconstruction is refused at Open,
	// before a byte is read, as a plan of its last window.
	for i, f := range rev.Files {
		if f.XetHash == "" {
			continue
		}
		small := f
		small.Size -= 1000
		if rc, err := c.Open(ctx, u.repo, rev.SHA, small, 0); !errors.Is(err, mirror.ErrBadAnswer) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("file %d listed 1000 bytes short: Open %v, want ErrBadAnswer", i, err)
		}
		if _, _, err := c.Plan(ctx, u.repo, rev.SHA, small, 0, small.Size); !errors.Is(err, mirror.ErrBadAnswer) {
			t.Errorf("file %d listed 1000 bytes short: Plan %v, want ErrBadAnswer", i, err)
		}
	}
	missing := rev.Files[2]
	missing.Path = "nope.bin"
	missing.XetHash = strings.Repeat("ab", 32)
	gone := rev.Files[1]
	gone.Path = "nope.json"
	cases := []struct {
		name string
		call func() error
		code string
	}{
		{"repo", func() error {
			_, err := c.Revision(ctx, mirror.RepoRef{Type: "model", ID: "alice/nope"}, "main")
			return err
		}, "RepoNotFound"},
		{"revision", func() error { _, err := c.Revision(ctx, u.repo, "nope"); return err }, "RevisionNotFound"},
		{"xet file", func() error { _, err := c.Open(ctx, u.repo, rev.SHA, missing, 0); return err }, ""},
		{"regular file", func() error { _, err := c.Open(ctx, u.repo, rev.SHA, gone, 0); return err }, "EntryNotFound"},
	}
	for _, tc := range cases {
		err := tc.call()
		var e *upstream.Error
		if !errors.Is(err, mirror.ErrNotFound) || !errors.As(err, &e) || tc.code != "" && e.Code != tc.code {
			t.Errorf("%s: %v, want ErrNotFound with code %q", tc.name, err, tc.code)
		}
	}
}
