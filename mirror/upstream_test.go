package mirror_test

// The tests here hold the mirror to an upstream that lies, breaks or goes
// away: what it answers is checked before a client or the store sees it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openxet/mirror"
	"openxet/store"
	"openxet/xet"
)

// TestOffline: with the upstream down, what is mirrored is served (stale
// when a branch was due to be resolved again); what is not answers 503
// with a sentence.
func TestOffline(t *testing.T) {
	u := newUpstream(t)
	a := randomBytes(6, 100_000)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": a, "b.bin": randomBytes(7, 100_000)}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	if r := e.Do("GET", "/org/m/resolve/main/a.bin", tok, nil); r.Status != 200 {
		t.Fatalf("a.bin: %d", r.Status)
	}
	e.up.down.Store(true)
	e.clock.Advance(mirror.DefaultRefresh + time.Second)
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 {
		t.Errorf("info offline: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/org/m/resolve/main/a.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, a) {
		t.Errorf("mirrored file offline: %d", r.Status)
	}
	if s := e.m.Stats(); s.Stale == 0 {
		t.Errorf("stats %+v: no stale serve counted", s)
	}
	for _, p := range []string{"/org/m/resolve/main/b.bin", "/api/models/org/never"} {
		r := e.Do("GET", p, tok, nil)
		if r.Status != 503 || r.Header.Get("Retry-After") != "30" || !strings.Contains(string(r.Body), "unreachable") || !strings.Contains(string(r.Body), "upstream_unreachable") {
			t.Errorf("GET %s offline: %d %s, want 503 upstream_unreachable", p, r.Status, r.Body)
		}
	}
	if _, err := e.Store.Repo(context.Background(), store.RepoID{Tenant: mirror.DefaultTenant, Type: "model", Name: "org__never"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a repo asked for while the upstream was unreachable was recorded: %v", err)
	}
	e.up.down.Store(false)
	if r := e.Do("GET", "/org/m/resolve/main/b.bin", tok, nil); r.Status != 200 {
		t.Errorf("b.bin once the upstream is back: %d", r.Status)
	}
}

// TestOfflineBackoff: once the upstream did not answer, it is not asked
// again for mirror.DownFor: a branch mirrored before is served at once as
// it was (stale), a repo not mirrored is refused at once (503); past the
// back-off it is asked again, and an answer ends the back-off.
func TestOfflineBackoff(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(16, 50_000)}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	if r := e.Do("GET", "/org/m/resolve/main/a.bin", tok, nil); r.Status != 200 {
		t.Fatalf("a.bin: %d", r.Status)
	}
	e.up.down.Store(true)
	e.clock.Advance(mirror.DefaultRefresh + time.Second)
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 {
		t.Fatalf("info, the upstream down: %d %s", r.Status, r.Body)
	}
	asked := e.up.asked.Load()
	for i, p := range []string{"/api/models/org/m", "/org/m/resolve/main/a.bin", "/api/models/org/m/revision/main"} {
		if r := e.Do("GET", p, tok, nil); r.Status != 200 {
			t.Errorf("%s within the back-off: %d %s", p, r.Status, r.Body)
		}
		if got := e.up.asked.Load(); got != asked {
			t.Errorf("read %d within the back-off asked the upstream %d times", i, got-asked)
		}
	}
	r := e.Do("GET", "/api/models/org/never", tok, nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "upstream_unreachable") || e.up.asked.Load() != asked {
		t.Errorf("a repo not mirrored, within the back-off: %d %s, asked %d more", r.Status, r.Body, e.up.asked.Load()-asked)
	}
	e.clock.Advance(mirror.DefaultDownFor + time.Second)
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 || e.up.asked.Load() != asked+1 {
		t.Errorf("past the back-off: %d, asked %d more, want 1", r.Status, e.up.asked.Load()-asked)
	}
	e.up.down.Store(false)
	e.clock.Advance(mirror.DefaultDownFor + time.Second)
	if r := e.Do("GET", "/api/models/org/never", tok, nil); r.Status != 404 {
		t.Errorf("a repo the upstream lacks, once it answers: %d %s", r.Status, r.Body)
	}
	asked = e.up.asked.Load()
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 || e.up.asked.Load() != asked+1 {
		t.Errorf("the upstream back: %d, asked %d more, want 1", r.Status, e.up.asked.Load()-asked)
	}
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 || e.up.asked.Load() != asked+1 {
		t.Errorf("fresh again: %d, asked %d more, want 0", r.Status, e.up.asked.Load()-asked-1)
	}
}

// TestFirstWaitBounded: a repo not mirrored yet waits for a hanging
// upstream at most mirror.FirstWait, then is refused 503 while the
// resolution goes on; the answer, once it comes, serves the next request.
func TestFirstWaitBounded(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(17, 50_000)}, nil)
	var timers atomic.Int64
	fired := make(chan time.Time)
	close(fired)
	e := newMirror(t, u, func(c *mirror.Config) {
		c.After = func(d time.Duration) <-chan time.Time {
			if timers.Add(1) == 1 {
				if d != mirror.DefaultFirstWait {
					t.Errorf("first wait %s, want %s", d, mirror.DefaultFirstWait)
				}
				return fired
			}
			return nil // never
		}
	})
	gate := make(chan struct{})
	e.up.revGate.Store(&gate)
	tok := e.Credential("bob", "read")
	r := e.Do("GET", "/api/models/org/m", tok, nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "upstream_unreachable") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a hanging upstream, nothing mirrored: %d %s, want 503 upstream_unreachable with Retry-After", r.Status, r.Body)
	}
	close(gate)
	e.clock.Advance(mirror.DefaultDownFor + time.Second)
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 {
		t.Errorf("once the upstream answered: %d %s", r.Status, r.Body)
	}
}

// TestHashMismatch: a stream that does not hash to the file's Xet hash is
// refused and nothing is registered; the next read pulls it again.
func TestHashMismatch(t *testing.T) {
	u := newUpstream(t)
	data := randomBytes(8, 300_000)
	up := u.repo(t, "org", "m", map[string][]byte{"w.bin": data}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	if r := e.Do("GET", "/api/models/org/m", tok, nil); r.Status != 200 {
		t.Fatalf("info: %d", r.Status)
	}
	e.up.corrupt.Store(true)
	req, _ := http.NewRequest("GET", e.URL+"/org/m/resolve/main/w.bin", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err == nil {
		var body bytes.Buffer
		_, err = body.ReadFrom(res.Body)
		res.Body.Close()
		if err == nil && bytes.Equal(body.Bytes(), data) {
			t.Fatal("a corrupted stream was served whole")
		}
		if err == nil && len(body.Bytes()) >= len(data) {
			t.Errorf("a corrupted stream answered %d bytes of %d", len(body.Bytes()), len(data))
		}
	}
	entry, _ := up.Entry("w.bin")
	h, _ := xet.ParseHash(entry.XetHash)
	if _, err := e.Store.File(context.Background(), mirror.DefaultTenant, h); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a refused stream the file is registered: %v", err)
	}
	if s := e.m.Stats(); s.Refused != 1 {
		t.Errorf("refused %d, want 1", s.Refused)
	}
	// A Range waits for the pull: refused while the upstream corrupts,
	// served once it does not.
	r := e.Do("GET", "/org/m/resolve/main/w.bin", tok, nil, "Range: bytes=0-9")
	if r.Status != 502 || !strings.Contains(string(r.Body), "upstream_bad_answer") {
		t.Errorf("Range of a corrupted stream: %d %s, want 502 upstream_bad_answer", r.Status, r.Body)
	}
	e.checkIndex(t)
	e.up.corrupt.Store(false)
	if r := e.Do("GET", "/org/m/resolve/main/w.bin", tok, nil, "Range: bytes=0-9"); r.Status != 206 || !bytes.Equal(r.Body, data[:10]) {
		t.Errorf("Range once the upstream is good: %d %s", r.Status, r.Body)
	}
}

// TestGitPathsRefused: an upstream tree whose paths a commit could not
// have (a ".git" or ".." component, a leading "/") is refused as a bad
// answer on every route that resolves the revision; nothing of it is
// recorded, so snapshot_download(local_dir=…) can never write into a git
// work tree's .git.
func TestGitPathsRefused(t *testing.T) {
	for _, bad := range []string{".git/config", ".git/hooks/post-checkout", "a/.git/config", "a/../../x", "/etc/x", "a//b"} {
		t.Run(bad, func(t *testing.T) {
			u := newUpstream(t)
			u.repo(t, "org", "m", map[string][]byte{"w.bin": randomBytes(9, 1000)}, map[string][]byte{"config": []byte("[core]\n")})
			e := newMirror(t, u)
			e.up.edit = func(_ mirror.RepoRef, f *mirror.File) {
				if f.Path == "config" {
					f.Path = bad
				}
			}
			tok := e.Credential("bob", "read")
			for _, path := range []string{"/api/models/org/m", "/api/models/org/m/tree/main", "/org/m/resolve/main/w.bin"} {
				r := e.Do("GET", path, tok, nil)
				if r.Status != 502 || !strings.Contains(string(r.Body), "upstream_bad_answer") {
					t.Errorf("%s: %d %s, want 502 upstream_bad_answer", path, r.Status, r.Body)
				}
			}
			local, err := e.m.LocalRepo("model", "org", "m")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Store.Resolve(context.Background(), local, "main"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the refused revision was recorded: %v", err)
			}
			if s := e.m.Stats(); s.Refused == 0 {
				t.Error("no refusal counted")
			}
			e.checkIndex(t)
		})
	}
}

// TestStoredFileClaims: a repo whose tree lists a Xet hash the mirror
// holds already (pulled for another repo) under another size or SHA-256
// is refused as a bad answer, at the revision and, for a revision recorded
// before the file was held, when the file is read; never served under the
// upstream's claims.
func TestStoredFileClaims(t *testing.T) {
	u := newUpstream(t)
	data := randomBytes(10, 200_000)
	u.repo(t, "org", "a", map[string][]byte{"w.bin": data}, nil)
	u.repo(t, "org", "b", map[string][]byte{"w.bin": data}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	// org/b is recorded first, while the file is not held yet.
	if r := e.Do("GET", "/api/models/org/b", tok, nil); r.Status != 200 {
		t.Fatalf("org/b: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/org/a/resolve/main/w.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, data) {
		t.Fatalf("org/a: %d", r.Status)
	}
	for _, lie := range []struct {
		name string
		edit func(f *mirror.File)
	}{
		{"size", func(f *mirror.File) { f.Size++ }},
		{"sha256", func(f *mirror.File) { f.SHA256 = strings.Repeat("ab", 32) }},
	} {
		t.Run(lie.name, func(t *testing.T) {
			e.up.edit = func(repo mirror.RepoRef, f *mirror.File) {
				if repo.ID == "org/c-"+lie.name {
					lie.edit(f)
				}
			}
			defer func() { e.up.edit = nil }()
			u.repo(t, "org", "c-"+lie.name, map[string][]byte{"w.bin": data}, nil)
			refused := e.m.Stats().Refused
			for _, path := range []string{"/api/models/org/c-" + lie.name, "/org/c-" + lie.name + "/resolve/main/w.bin"} {
				r := e.Do("GET", path, tok, nil)
				if r.Status != 502 || !strings.Contains(string(r.Body), "upstream_bad_answer") {
					t.Errorf("%s: %d %s, want 502 upstream_bad_answer", path, r.Status, r.Body)
				}
			}
			if e.m.Stats().Refused == refused {
				t.Error("no refusal counted")
			}
		})
	}
	// A revision recorded before the file was held, lying about it, and
	// read once another repo's honest pull stored the file: refused then.
	other := randomBytes(11, 150_000)
	u.repo(t, "org", "e", map[string][]byte{"w.bin": other}, nil)
	u.repo(t, "org", "f", map[string][]byte{"w.bin": other}, nil)
	e.up.edit = func(repo mirror.RepoRef, f *mirror.File) {
		if repo.ID == "org/e" {
			f.SHA256 = strings.Repeat("cd", 32)
		}
	}
	if r := e.Do("GET", "/api/models/org/e", tok, nil); r.Status != 200 {
		t.Fatalf("org/e recorded while its file is not held: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/org/f/resolve/main/w.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, other) {
		t.Fatalf("org/f: %d", r.Status)
	}
	hits := e.m.Stats().Hits
	if r := e.Do("GET", "/org/e/resolve/main/w.bin", tok, nil); r.Status != 502 || !strings.Contains(string(r.Body), "upstream_bad_answer") {
		t.Errorf("org/e, a sha256 claim the held file does not have: %d %s, want 502", r.Status, r.Body)
	}
	if e.m.Stats().Hits != hits {
		t.Error("a refused file was counted as served from the mirror")
	}
	e.checkIndex(t)
}

// TestCommitText: a mirrored commit keeps the upstream's title and message,
// and no answer names the upstream's address.
func TestCommitText(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(20, 1000)}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	r := e.Do("GET", "/api/models/org/m/commits/main", tok, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"title":"test files"`) {
		t.Fatalf("commits: %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/api/models/org/m/commits/main", "/api/models/org/m", "/api/models/org/m/tree/main"} {
		if r := e.Do("GET", p, tok, nil); strings.Contains(string(r.Body), u.URL) || strings.Contains(string(r.Body), strings.TrimPrefix(u.URL, "http://")) {
			t.Errorf("%s names the upstream's address: %s", p, r.Body)
		}
	}
}

// TestListedFileNotServed: a regular file the upstream lists but does not
// serve makes its revision a bad answer (502), not a repo that does not
// exist (404).
func TestListedFileNotServed(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(21, 1000)}, map[string][]byte{"config.json": []byte("{}")})
	e := newMirror(t, u)
	e.up.edit = func(_ mirror.RepoRef, f *mirror.File) {
		if f.Path == "config.json" {
			f.Path = "missing.json"
		}
	}
	tok := e.Credential("bob", "read")
	for _, p := range []string{"/api/models/org/m", "/org/m/resolve/main/a.bin"} {
		if r := e.Do("GET", p, tok, nil); r.Status != 502 || !strings.Contains(string(r.Body), "upstream_bad_answer") {
			t.Errorf("%s: %d %s, want 502 upstream_bad_answer", p, r.Status, r.Body)
		}
	}
}

// TestTagsStayTags: a tag of the upstream that clients resolve through the
// mirror is listed among the repo's tags (refs/tags/…), its branches among
// the branches, as the upstream lists them; eviction drops both.
func TestTagsStayTags(t *testing.T) {
	u := newUpstream(t)
	c := u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(22, 1000)}, nil)
	if err := u.Store.CreateTag(context.Background(), store.RepoID{Tenant: "org", Type: "model", Name: "m"}, "v1", c); err != nil {
		t.Fatal(err)
	}
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	for _, rev := range []string{"main", "v1"} {
		if r := e.Do("GET", "/api/models/org/m/revision/"+rev, tok, nil); r.Status != 200 {
			t.Fatalf("revision %s: %d %s", rev, r.Status, r.Body)
		}
	}
	r := e.Do("GET", "/api/models/org/m/refs", tok, nil)
	var refs struct {
		Branches, Tags []struct{ Name, Ref string }
	}
	if err := json.Unmarshal(r.Body, &refs); err != nil || r.Status != 200 {
		t.Fatalf("refs: %d %s", r.Status, r.Body)
	}
	if len(refs.Tags) != 1 || refs.Tags[0].Name != "v1" || refs.Tags[0].Ref != "refs/tags/v1" || len(refs.Branches) != 1 || refs.Branches[0].Name != "main" {
		t.Errorf("refs %+v, want branch main and tag v1", refs)
	}
}
