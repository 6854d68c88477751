package upstream_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"openxet/mirror"
	"openxet/mirror/upstream"
	"openxet/mirror/upstreamtest"
)

// fixture is a test upstream with one model of many files: regular ones
// in folders, an LFS file and two Xet files.
type fixture struct {
	up      *upstreamtest.Server
	repo    mirror.RepoRef
	sha     string
	files   map[string]upstreamtest.File
	waits   *waits
	options upstream.Options
}

// waits records the client's waits between retries instead of taking them.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

const upstreamToken = "hf_upstream_secret"

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	up := upstreamtest.New(t)
	up.Token = upstreamToken
	up.PageSize = 7
	files := map[string]upstreamtest.File{}
	var list []upstreamtest.File
	add := func(f upstreamtest.File) {
		files[f.Path] = f
		list = append(list, f)
	}
	for i := range 12 {
		add(upstreamtest.File{Path: fmt.Sprintf("dir%d/sub/f%02d.txt", i%3, i), Content: []byte(fmt.Sprintf("file %d\n", i))})
	}
	add(upstreamtest.File{Path: "config.json", Content: []byte(`{"a": 1}`)})
	add(upstreamtest.File{Path: "empty.txt", Content: []byte{}})
	add(upstreamtest.File{Path: "weights.lfs", Content: randomBytes(300_000, 1), LFS: true})
	add(upstreamtest.File{Path: "model.safetensors", Content: randomBytes(1_500_000, 2), Xet: true})
	add(upstreamtest.File{Path: "tokenizer.json", Content: bytes.Repeat([]byte(`{"token": "abc", "id": 1} `), 20_000), Xet: true})
	sha := up.AddRepo(upstreamtest.Repo{Type: "model", ID: "org/model", Files: list})
	w := &waits{}
	return &fixture{up: up, repo: mirror.RepoRef{Type: "model", ID: "org/model"}, sha: sha, files: files, waits: w,
		options: upstream.Options{BaseURL: up.URL(), Token: upstreamToken, Wait: w.wait, Backoff: time.Second}}
}

func (f *fixture) client(t *testing.T, mutate ...func(*upstream.Options)) *upstream.Client {
	t.Helper()
	o := f.options
	for _, m := range mutate {
		m(&o)
	}
	return newClient(t, o)
}

func (f *fixture) file(t *testing.T, rev mirror.Revision, path string) mirror.File {
	t.Helper()
	for _, x := range rev.Files {
		if x.Path == path {
			return x
		}
	}
	t.Fatalf("%s not in the revision", path)
	return mirror.File{}
}

// TestRevisionShapes: Revision reads every page of the tree and gives each
// file's size, git oid, LFS sha256 and Xet hash, sorted by path.
func TestRevisionShapes(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	for _, rev := range []string{"main", f.sha} {
		got, err := c.Revision(context.Background(), f.repo, rev)
		if err != nil {
			t.Fatal(err)
		}
		if got.SHA != f.sha || got.Gated || got.LastModified.IsZero() {
			t.Errorf("%s: sha %s gated %v lastModified %v", rev, got.SHA, got.Gated, got.LastModified)
		}
		var want []mirror.File
		for _, p := range sortedKeys(f.files) {
			x := f.files[p]
			mf := mirror.File{Path: p, Size: int64(len(x.Content))}
			if x.LFS || x.Xet {
				sum := sha256.Sum256(x.Content)
				mf.SHA256 = hex.EncodeToString(sum[:])
				mf.GitOID = gitOID([]byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", mf.SHA256, len(x.Content))))
			} else {
				mf.GitOID = gitOID(x.Content)
			}
			if x.Xet {
				mf.XetHash = f.up.XetHash("model", "org/model", p)
				if mf.XetHash != xetHashOf(x.Content) {
					t.Fatalf("the test upstream's hash of %s is not the chunked hash", p)
				}
			}
			want = append(want, mf)
		}
		if d := cmp.Diff(want, got.Files); d != "" {
			t.Errorf("%s: files (-want +got):\n%s", rev, d)
		}
	}
	// 17 files in 6 folders, 7 entries a page: 4 pages per listing.
	if n := f.up.Count("/tree/"); n != 8 {
		t.Errorf("%d tree requests, want 8", n)
	}
	for _, r := range f.up.Requests() {
		if r.Auth != "Bearer "+upstreamToken {
			t.Errorf("%s %s without the token", r.Method, r.Path)
		}
	}
}

// TestOpenEveryKind: Open streams regular, LFS (through the CDN on
// another host) and Xet files (through the CAS) from any offset, and the
// upstream token never leaves the upstream's host.
func TestOpenEveryKind(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, func(o *upstream.Options) { o.ReconstructionWindow = 200_000 })
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"config.json", "empty.txt", "weights.lfs", "model.safetensors", "tokenizer.json"} {
		content := f.files[p].Content
		for _, off := range []int64{0, 1, int64(len(content)) / 3, int64(len(content)) - 1, int64(len(content))} {
			if off < 0 || off > int64(len(content)) {
				continue
			}
			got := readAll(t, c, f.repo, rev.SHA, f.file(t, rev, p), off)
			if !bytes.Equal(got, content[off:]) {
				t.Fatalf("%s from %d: %d bytes, want %d (first difference at %d)", p, off, len(got), len(content)-int(off), firstDiff(got, content[off:]))
			}
		}
	}
	if f.up.Count("/lfs/") == 0 || f.up.Count("/v1/reconstructions/") < 10 || f.up.Count("/xorbs/") == 0 {
		t.Fatalf("requests: %d lfs, %d reconstructions, %d xorbs", f.up.Count("/lfs/"), f.up.Count("/v1/reconstructions/"), f.up.Count("/xorbs/"))
	}
	for _, r := range f.up.Requests() {
		if r.Host == "cdn" && strings.Contains(r.Auth, upstreamToken) {
			t.Errorf("the upstream token went to the other host: %s %s", r.Method, r.Path)
		}
		if r.Host == "cdn" && strings.HasPrefix(r.Path, "/v1/") && !strings.HasPrefix(r.Auth, "Bearer xet_") {
			t.Errorf("%s without the CAS token: %q", r.Path, r.Auth)
		}
	}
	if n := f.up.Count("/xet-read-token/"); n != 1 {
		t.Errorf("%d token requests; one is cached for the commit", n)
	}
	if served := f.up.FileBytesServed(); served == 0 {
		t.Errorf("the upstream counts no file bytes served")
	}
}

// TestTokenRefresh: a CAS token within 30 s of its expiry is asked for
// again before the next reconstruction; one the CAS refuses (401) is asked
// for again once.
func TestTokenRefresh(t *testing.T) {
	f := newFixture(t)
	f.up.SetTokenTTL(10 * time.Second) // always within the margin: a new token per window
	c := f.client(t, func(o *upstream.Options) { o.ReconstructionWindow = 500_000 })
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	file := f.file(t, rev, "model.safetensors")
	if got := readAll(t, c, f.repo, rev.SHA, file, 0); !bytes.Equal(got, f.files[file.Path].Content) {
		t.Fatal("bytes differ")
	}
	if tokens, recons := f.up.Count("/xet-read-token/"), f.up.Count("/v1/reconstructions/"); tokens != recons || tokens != 3 {
		t.Errorf("%d tokens for %d reconstructions, want 3 each", tokens, recons)
	}

	// A token the CAS refuses although it is not near its expiry.
	f.up.SetTokenTTL(time.Hour)
	now := time.Now()
	c = f.client(t, func(o *upstream.Options) { o.Now = func() time.Time { return now } })
	if _, err := c.Open(context.Background(), f.repo, rev.SHA, file, 0); err != nil {
		t.Fatal(err)
	}
	f.up.SetNow(func() time.Time { return now.Add(2 * time.Hour) }) // every token handed out so far has expired
	before := f.up.Count("/xet-read-token/")
	if got := readAll(t, c, f.repo, rev.SHA, file, 10); !bytes.Equal(got, f.files[file.Path].Content[10:]) {
		t.Fatal("bytes differ after a refresh")
	}
	if n := f.up.Count("/xet-read-token/") - before; n != 1 {
		t.Errorf("%d token requests after a 401, want 1", n)
	}
}

// TestGated: a gated repo's revision says so and shows no Xet hash (the
// tree redacts it) without the token, and its files are ErrNotFound with
// code GatedRepo; with the token, all is there.
func TestGated(t *testing.T) {
	f := newFixture(t)
	content := randomBytes(100_000, 3)
	f.up.AddRepo(upstreamtest.Repo{Type: "model", ID: "org/gated", Gated: "manual",
		Files: []upstreamtest.File{{Path: "w.bin", Content: content, Xet: true}, {Path: "w.lfs", Content: content, LFS: true}}})
	repo := mirror.RepoRef{Type: "model", ID: "org/gated"}
	anon := f.client(t, func(o *upstream.Options) { o.Token = "" })
	rev, err := anon.Revision(context.Background(), repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	if !rev.Gated || rev.Files[0].XetHash != "" || rev.Files[0].SHA256 == "" {
		t.Fatalf("gated revision without the token: %+v", rev)
	}
	for _, fl := range rev.Files {
		_, err = anon.Open(context.Background(), repo, rev.SHA, fl, 0)
		var e *upstream.Error
		if !errors.Is(err, mirror.ErrNotFound) || !errors.As(err, &e) || e.Code != "GatedRepo" || e.Status != 401 {
			t.Errorf("open %s of a gated repo without the token: %v", fl.Path, err)
		}
	}
	// Through resolve with a token that has no access: 403 GatedRepo.
	other := f.client(t, func(o *upstream.Options) { o.Token = "hf_other" })
	withHash := rev.Files[0]
	withHash.XetHash = strings.Repeat("0", 64)
	for _, fl := range []mirror.File{rev.Files[1], withHash} {
		_, err = other.Open(context.Background(), repo, rev.SHA, fl, 0)
		var e *upstream.Error
		if !errors.Is(err, mirror.ErrNotFound) || !errors.As(err, &e) || e.Code != "GatedRepo" || e.Status != 403 {
			t.Errorf("open %s with another token: %v", fl.Path, err)
		}
	}
	c := f.client(t)
	rev, err = c.Revision(context.Background(), repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	if !rev.Gated || rev.Files[0].XetHash != xetHashOf(content) {
		t.Fatalf("gated revision with the token: %+v", rev)
	}
	for _, fl := range rev.Files {
		if got := readAll(t, c, repo, rev.SHA, fl, 0); !bytes.Equal(got, content) {
			t.Errorf("%s differs", fl.Path)
		}
	}
}

// TestNotFound: repos, revisions and files the upstream does not have or
// hide are ErrNotFound with the Hub's X-Error-Code, and nothing is retried.
func TestNotFound(t *testing.T) {
	f := newFixture(t)
	f.up.AddRepo(upstreamtest.Repo{Type: "dataset", ID: "org/private", Private: true, Files: []upstreamtest.File{{Path: "a", Content: []byte("a")}}})
	c := f.client(t)
	anon := f.client(t, func(o *upstream.Options) { o.Token = "" })
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	missing := f.file(t, rev, "config.json")
	missing.Path = "nope.json"
	cases := []struct {
		name   string
		call   func() error
		status int
		code   string
	}{
		{"repo", func() error {
			_, err := c.Revision(context.Background(), mirror.RepoRef{Type: "model", ID: "org/nope"}, "main")
			return err
		}, 404, "RepoNotFound"},
		{"repo of another type", func() error {
			_, err := c.Revision(context.Background(), mirror.RepoRef{Type: "dataset", ID: "org/model"}, "main")
			return err
		}, 404, "RepoNotFound"},
		{"private repo without the token", func() error {
			_, err := anon.Revision(context.Background(), mirror.RepoRef{Type: "dataset", ID: "org/private"}, "main")
			return err
		}, 401, "RepoNotFound"},
		{"branch", func() error { _, err := c.Revision(context.Background(), f.repo, "dev"); return err }, 404, "RevisionNotFound"},
		{"commit", func() error { _, err := c.Revision(context.Background(), f.repo, strings.Repeat("a", 40)); return err }, 404, "RevisionNotFound"},
		{"file", func() error { _, err := c.Open(context.Background(), f.repo, rev.SHA, missing, 0); return err }, 404, "EntryNotFound"},
	}
	for _, tc := range cases {
		err := tc.call()
		var e *upstream.Error
		if !errors.Is(err, mirror.ErrNotFound) || !errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status {
			t.Errorf("%s: %v, want ErrNotFound, %d %s", tc.name, err, tc.status, tc.code)
		}
	}
	if w := f.waits.all(); len(w) != 0 {
		t.Errorf("retried after not-found answers: %v", w)
	}
	// The private dataset with the token.
	if _, err := c.Revision(context.Background(), mirror.RepoRef{Type: "dataset", ID: "org/private"}, "main"); err != nil {
		t.Errorf("private dataset with the token: %v", err)
	}
}

// TestRetries: 5xx and 429 answers are tried again after a doubling
// backoff or the Retry-After asked for; when they persist, or Retry-After
// is over MaxBackoff, the call is ErrUnreachable.
func TestRetries(t *testing.T) {
	cases := []struct {
		name       string
		fault      upstreamtest.Fault
		wantErr    bool
		wantWaits  []time.Duration
		wantTries  int
		wantStatus int
	}{
		{"two 500s", upstreamtest.Fault{Status: 500, Times: 2}, false, []time.Duration{time.Second, 2 * time.Second}, 3, 0},
		{"502s persist", upstreamtest.Fault{Status: 502}, true, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, 4, 502},
		{"429 with Retry-After", upstreamtest.Fault{Status: 429, Times: 1, RetryAfter: "7"}, false, []time.Duration{7 * time.Second}, 2, 0},
		{"503 asks for an hour", upstreamtest.Fault{Status: 503, RetryAfter: "3600"}, true, nil, 1, 503},
		{"429 with a date", upstreamtest.Fault{Status: 429, Times: 1, RetryAfter: time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, true, nil, 1, 429},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.fault.Path = "/revision/"
			f.up.AddFault(tc.fault)
			_, err := f.client(t).Revision(context.Background(), f.repo, "main")
			var e *upstream.Error
			if tc.wantErr != (err != nil) || err != nil && (!errors.Is(err, mirror.ErrUnreachable) || !errors.As(err, &e) || e.Status != tc.wantStatus) {
				t.Fatalf("err %v, want error %v (ErrUnreachable, %d)", err, tc.wantErr, tc.wantStatus)
			}
			if d := cmp.Diff(tc.wantWaits, f.waits.all()); d != "" {
				t.Errorf("waits (-want +got):\n%s", d)
			}
			if n := f.up.Count("/revision/"); n != tc.wantTries {
				t.Errorf("%d tries, want %d", n, tc.wantTries)
			}
		})
	}
}

// TestStoppedUpstream: an upstream that is down is ErrUnreachable (after
// the retries) for Revision and Open, and is used again once it is back on
// its address.
func TestStoppedUpstream(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	file := f.file(t, rev, "model.safetensors")
	// A stream open before the outage fails mid-way as unreachable.
	rc, err := c.Open(context.Background(), f.repo, rev.SHA, file, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.up.Stop()
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, mirror.ErrUnreachable) {
		t.Errorf("read during the outage: %v", err)
	}
	if _, err := c.Revision(context.Background(), f.repo, "main"); !errors.Is(err, mirror.ErrUnreachable) {
		t.Errorf("revision during the outage: %v", err)
	}
	for _, p := range []string{"config.json", "model.safetensors"} {
		if _, err := c.Open(context.Background(), f.repo, rev.SHA, f.file(t, rev, p), 0); !errors.Is(err, mirror.ErrUnreachable) {
			t.Errorf("open %s during the outage: %v", p, err)
		}
	}
	f.up.Start()
	if got := readAll(t, c, f.repo, rev.SHA, file, 0); !bytes.Equal(got, f.files[file.Path].Content) {
		t.Error("bytes differ after the outage")
	}
}

// TestBadAnswers: bodies cut short or garbled are ErrBadAnswer; a
// connection dropped mid-body is ErrUnreachable.
func TestBadAnswers(t *testing.T) {
	cases := []struct {
		name   string
		path   string // file to read
		fault  upstreamtest.Fault
		kind   error
		atOpen bool
	}{
		{"xorb cut short", "model.safetensors", upstreamtest.Fault{Path: "/xorbs/", CutAfter: 1000}, mirror.ErrBadAnswer, false},
		{"xorb chunk header garbled", "model.safetensors", upstreamtest.Fault{Path: "/xorbs/", Garble: true}, mirror.ErrBadAnswer, false},
		{"compressed chunk's size garbled", "tokenizer.json", upstreamtest.Fault{Path: "/xorbs/", Garble: true, GarbleAt: 5}, mirror.ErrBadAnswer, false},
		{"compressed chunk's data garbled", "tokenizer.json", upstreamtest.Fault{Path: "/xorbs/", Garble: true, GarbleAt: 12}, mirror.ErrBadAnswer, false},
		{"xorb connection dropped", "model.safetensors", upstreamtest.Fault{Path: "/xorbs/", CutAfter: 1000, Abort: true}, mirror.ErrUnreachable, false},
		{"reconstruction cut short", "model.safetensors", upstreamtest.Fault{Path: "/v1/reconstructions/", CutAfter: 100}, mirror.ErrBadAnswer, true},
		{"reconstruction garbled", "model.safetensors", upstreamtest.Fault{Path: "/v1/reconstructions/", Garble: true}, mirror.ErrBadAnswer, true},
		{"token garbled", "model.safetensors", upstreamtest.Fault{Path: "/xet-read-token/", Garble: true}, mirror.ErrBadAnswer, true},
		{"lfs cut short", "weights.lfs", upstreamtest.Fault{Path: "/lfs/", CutAfter: 1000}, mirror.ErrBadAnswer, false},
		{"lfs dropped", "weights.lfs", upstreamtest.Fault{Path: "/lfs/", CutAfter: 1000, Abort: true}, mirror.ErrUnreachable, false},
		{"regular file cut short", "config.json", upstreamtest.Fault{Path: "/resolve/", CutAfter: 3}, mirror.ErrBadAnswer, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := f.client(t, func(o *upstream.Options) { o.Retries = -1 })
			rev, err := c.Revision(context.Background(), f.repo, "main")
			if err != nil {
				t.Fatal(err)
			}
			f.up.AddFault(tc.fault)
			rc, err := c.Open(context.Background(), f.repo, rev.SHA, f.file(t, rev, tc.path), 0)
			if tc.atOpen {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("open: %v, want %v", err, tc.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if _, err := io.ReadAll(rc); !errors.Is(err, tc.kind) {
				t.Fatalf("read: %v, want %v", err, tc.kind)
			}
		})
	}
	// A flipped data byte of an uncompressed chunk decodes: the stream
	// gives it out, and the caller's hash check is what catches it.
	t.Run("data byte garbled", func(t *testing.T) {
		f := newFixture(t)
		c := f.client(t)
		rev, err := c.Revision(context.Background(), f.repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		file := f.file(t, rev, "model.safetensors")
		f.up.AddFault(upstreamtest.Fault{Path: "/xorbs/", Garble: true, GarbleAt: 100, Times: 1})
		got := readAll(t, c, f.repo, rev.SHA, file, 0)
		if len(got) != int(file.Size) || xetHashOf(got) == file.XetHash {
			t.Fatalf("%d bytes hashing to the file's hash", len(got))
		}
	})
	t.Run("tree garbled", func(t *testing.T) {
		f := newFixture(t)
		f.up.AddFault(upstreamtest.Fault{Path: "/tree/", Garble: true, Times: 1})
		if _, err := f.client(t).Revision(context.Background(), f.repo, "main"); !errors.Is(err, mirror.ErrBadAnswer) {
			t.Fatalf("revision: %v", err)
		}
	})
}

// TestSlowUpstream: an upstream that stops answering fails the request
// after StallTimeout as unreachable.
func TestSlowUpstream(t *testing.T) {
	f := newFixture(t)
	block := make(chan struct{})
	defer close(block)
	f.up.AddFault(upstreamtest.Fault{Path: "/revision/", Block: block})
	c := f.client(t, func(o *upstream.Options) { o.StallTimeout = 50 * time.Millisecond; o.Retries = 1 })
	if _, err := c.Revision(context.Background(), f.repo, "main"); !errors.Is(err, mirror.ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("revision of a stalled upstream: %v", err)
	}
	if n := f.up.Count("/revision/"); n != 2 {
		t.Errorf("%d tries, want 2", n)
	}
}

// TestMaxConns: an open stream holds its connection slot: with MaxConns 1
// no other request reaches the upstream until the stream is closed.
func TestMaxConns(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, func(o *upstream.Options) { o.MaxConns = 1 })
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Open(context.Background(), f.repo, rev.SHA, f.file(t, rev, "weights.lfs"), 0)
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.up.Requests())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Revision(ctx, f.repo, "main"); !errors.Is(err, context.Canceled) {
		t.Fatalf("revision while the slot is held: %v", err)
	}
	if n := len(f.up.Requests()); n != before {
		t.Fatalf("%d requests reached the upstream while the slot was held", n-before)
	}
	rc.Close()
	if _, err := c.Revision(context.Background(), f.repo, "main"); err != nil {
		t.Fatalf("revision after the stream closed: %v", err)
	}
	// One slot is enough for a stream of many windows and fetches.
	c = f.client(t, func(o *upstream.Options) { o.MaxConns = 1; o.ReconstructionWindow = 100_000 })
	file := f.file(t, rev, "model.safetensors")
	if got := readAll(t, c, f.repo, rev.SHA, file, 0); !bytes.Equal(got, f.files[file.Path].Content) {
		t.Fatal("bytes differ")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func gitOID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// TestConcurrentOpens: one client serves many streams at once within
// MaxConns, each giving its file's bytes.
func TestConcurrentOpens(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, func(o *upstream.Options) { o.MaxConns = 2; o.ReconstructionWindow = 300_000 })
	rev, err := c.Revision(context.Background(), f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"model.safetensors", "tokenizer.json", "weights.lfs", "config.json"}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			p := paths[i%len(paths)]
			off := int64(i * 1000 % max(1, len(f.files[p].Content)))
			rc, err := c.Open(context.Background(), f.repo, rev.SHA, f.file(t, rev, p), off)
			if err != nil {
				errs <- err
				return
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil || !bytes.Equal(got, f.files[p].Content[off:]) {
				errs <- fmt.Errorf("%s from %d: %d bytes, %v", p, off, len(got), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
