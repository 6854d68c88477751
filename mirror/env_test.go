package mirror_test

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
	"sync/atomic"
	"testing"
	"time"

	"openxet/mirror"
	"openxet/server"
	"openxet/server/servertest"
	"openxet/store"
	"openxet/store/ingest"
)

// The tests run two real openxet servers: the upstream, whose repos are
// made through its store, and the mirror, whose Hub and CAS routes the
// tests call over HTTP. The upstream is reached through an Upstream of the
// tests (testUpstream) that reads revisions from the upstream's store and
// file bytes from its resolve route, counting what it fetches.

// upstreamEnv is the upstream server with the repos of a test.
type upstreamEnv struct {
	*servertest.Env
	token      string // a read credential of the upstream
	adminToken string
	files      map[string][]byte
}

func newUpstream(t *testing.T) *upstreamEnv {
	t.Helper()
	env := servertest.New(t)
	return &upstreamEnv{Env: env, token: env.Credential("reader", "read"), files: map[string][]byte{}}
}

// randomBytes is n seeded random bytes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// repo makes (or commits to) repo ns/name of the upstream with the Xet
// files of xet and the regular files of regular, and returns the commit.
// Its Xet files are stored as an hf_xet upload stores them
// (ingest.File), so that their Xet hashes are the ones hf_xet gives.
func (u *upstreamEnv) repo(t *testing.T, ns, name string, xetFiles, regular map[string][]byte) store.Commit {
	t.Helper()
	ctx := context.Background()
	id := store.RepoID{Tenant: ns, Type: "model", Name: name}
	if _, err := u.Store.Repo(ctx, id); errors.Is(err, store.ErrNotFound) {
		if _, err := u.Store.CreateRepoWith(ctx, id, "public"); err != nil {
			t.Fatal(err)
		}
	}
	var changes []store.Change
	for p, data := range xetFiles {
		f, err := ingest.File(ctx, u.Store, ns, bytes.NewReader(data), ingest.Options{SizeBytes: int64(len(data)), DedupGlobal: true, DefaultQuotaBytes: store.Unlimited})
		if err != nil {
			t.Fatal(err)
		}
		sha := hex.EncodeToString(f.SHA256[:])
		pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha, len(data))
		changes = append(changes, store.Change{Op: store.PutFile, Path: p, Entry: store.TreeEntry{SizeBytes: int64(len(data)),
			XetHash: f.Hash.String(), SHA256: sha, GitOID: gitOID([]byte(pointer))}})
		u.files[ns+"/"+name+"/"+p] = data
	}
	for p, data := range regular {
		sum := sha256.Sum256(data)
		changes = append(changes, store.Change{Op: store.PutFile, Path: p, Content: data,
			Entry: store.TreeEntry{SizeBytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), GitOID: gitOID(data)}})
		u.files[ns+"/"+name+"/"+p] = data
	}
	c, err := u.Store.Commit(ctx, id, "main", store.NewCommit{Summary: "test files", Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func gitOID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// testUpstream is the mirror's Upstream in these tests.
type testUpstream struct {
	u *upstreamEnv
	// opens counts the file streams opened; openBytes what they sent.
	opens, openBytes, revisions atomic.Int64
	asked                       atomic.Int64 // Revision calls, answered or not
	down                        atomic.Bool  // every call is ErrUnreachable
	corrupt                     atomic.Bool  // file streams have one byte changed
	// gate, when set, holds every Open until it is closed.
	gate chan struct{}
	// revGate, when it holds a channel, holds every Revision until it is
	// closed.
	revGate atomic.Pointer[chan struct{}]
	// onOpen, when set, is called at each Open before it reads.
	onOpen func(f mirror.File, offset int64)
	// edit, when set, changes each file of a revision as it is listed (a
	// lying upstream); set before the first request.
	edit func(repo mirror.RepoRef, f *mirror.File)
}

func (tu *testUpstream) Revision(ctx context.Context, repo mirror.RepoRef, rev string) (mirror.Revision, error) {
	tu.asked.Add(1)
	if tu.down.Load() {
		return mirror.Revision{}, fmt.Errorf("revision %s: %w", rev, mirror.ErrUnreachable)
	}
	tu.revisions.Add(1)
	if g := tu.revGate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return mirror.Revision{}, ctx.Err()
		}
	}
	ns, name, _ := strings.Cut(repo.ID, "/")
	c, err := tu.u.Store.Resolve(ctx, store.RepoID{Tenant: ns, Type: repo.Type, Name: name}, rev)
	if errors.Is(err, store.ErrNotFound) {
		return mirror.Revision{}, fmt.Errorf("%s@%s: %w", repo.ID, rev, mirror.ErrNotFound)
	}
	if err != nil {
		return mirror.Revision{}, err
	}
	out := mirror.Revision{SHA: c.SHA, LastModified: c.Created, Title: c.Summary, Message: c.Description}
	if refs, err := tu.u.Store.Refs(ctx, store.RepoID{Tenant: ns, Type: repo.Type, Name: name}); err == nil {
		for _, r := range refs {
			out.Tag = out.Tag || (r.Tag && r.Name == rev)
		}
	}
	for _, e := range c.Tree {
		f := mirror.File{Path: e.Path, Size: e.SizeBytes, XetHash: e.XetHash, GitOID: e.GitOID}
		if e.XetHash != "" {
			f.SHA256 = e.SHA256
		}
		if tu.edit != nil {
			tu.edit(repo, &f)
		}
		out.Files = append(out.Files, f)
	}
	return out, nil
}

func (tu *testUpstream) Open(ctx context.Context, repo mirror.RepoRef, sha string, f mirror.File, offset int64) (io.ReadCloser, error) {
	if tu.down.Load() {
		return nil, fmt.Errorf("open %s: %w", f.Path, mirror.ErrUnreachable)
	}
	tu.opens.Add(1)
	if tu.onOpen != nil {
		tu.onOpen(f, offset)
	}
	if tu.gate != nil {
		select {
		case <-tu.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	req, err := http.NewRequestWithContext(ctx, "GET", tu.u.URL+"/"+repo.ID+"/resolve/"+sha+"/"+f.Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tu.u.token)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", mirror.ErrUnreachable, err)
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusPartialContent {
		res.Body.Close()
		kind := mirror.ErrUnreachable
		if res.StatusCode == http.StatusNotFound { // as mirror/upstream reads it
			kind = mirror.ErrNotFound
		}
		return nil, fmt.Errorf("%w: %s answered %d", kind, f.Path, res.StatusCode)
	}
	return &countingBody{rc: res.Body, tu: tu, corrupt: tu.corrupt.Load()}, nil
}

type countingBody struct {
	rc      io.ReadCloser
	tu      *testUpstream
	corrupt bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.tu.openBytes.Add(int64(n))
	if b.corrupt && n > 0 {
		p[0] ^= 0xff
		b.corrupt = false
	}
	return n, err
}

func (b *countingBody) Close() error { return b.rc.Close() }

// clock is a test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// mirrorEnv is the mirror server.
type mirrorEnv struct {
	*servertest.Env
	m     *mirror.Mirror
	up    *testUpstream
	clock *clock
	dir   string
}

// newMirror starts a mirror of u; change edits its mirror.Config.
func newMirror(t *testing.T, u *upstreamEnv, change ...func(*mirror.Config)) *mirrorEnv {
	t.Helper()
	return newMirrorServer(t, u, nil, change...)
}

// newMirrorServer is newMirror with the server's configuration edited by
// serverChange (when not nil).
func newMirrorServer(t *testing.T, u *upstreamEnv, serverChange func(*server.Config), change ...func(*mirror.Config)) *mirrorEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.DirConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	tu := &testUpstream{u: u}
	clk := &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	cfg := mirror.Config{Store: st, Upstream: tu, UpstreamName: u.URL, DedupGlobal: true, Now: clk.Now}
	for _, c := range change {
		c(&cfg)
	}
	m, err := mirror.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := servertest.Serve(t, st, func(c *server.Config) {
		c.Mirror = m
		if serverChange != nil {
			serverChange(c)
		}
	})
	return &mirrorEnv{Env: env, m: m, up: tu, clock: clk, dir: dir}
}

// checkIndex fails t when the mirror's index differs from one rebuilt
// from its bucket.
func (e *mirrorEnv) checkIndex(t *testing.T) {
	t.Helper()
	cfg := store.DirConfig(e.dir)
	diffs, err := store.CheckIndex(context.Background(), store.ReindexConfig{IndexPath: cfg.IndexPath, BucketURL: cfg.BucketURL})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reindex --check: %s", d)
	}
}
