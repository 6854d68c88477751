package mirror_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/mirror"
	"openxet/server"
	"openxet/store"
	"openxet/xet"
)

const weightsBytes = 3<<20 + 12345

// TestReadRoutes reads an upstream repo through the mirror on every read
// route the stock clients use, and checks the answers name the mirror, the
// bytes and hashes are the upstream's, a file is fetched from the upstream
// once, and reindex --check is clean.
func TestReadRoutes(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(1, weightsBytes)
	other := randomBytes(2, 200_000)
	config := []byte(`{"model_type": "bert"}`)
	up := u.repo(t, "google-bert", "bert-tiny", map[string][]byte{"model.safetensors": weights, "other.bin": other}, map[string][]byte{"config.json": config})
	e := newMirror(t, u)
	rr := &readRoutes{u: u, e: e, tok: e.Credential("bob", "read", "write"), up: up, weights: weights, config: config}
	rr.weightsEntry, _ = up.Entry("model.safetensors")

	rr.checkInfo(t)
	rr.checkTree(t)
	rr.checkHead(t)
	rr.checkDownloads(t)
	rr.checkXet(t)
	rr.checkListing(t)
	rr.checkReadOnly(t)
	e.checkIndex(t)
}

// readRoutes is the repo TestReadRoutes reads: google-bert/bert-tiny of u,
// through the mirror e, with tok.
type readRoutes struct {
	u               *upstreamEnv
	e               *mirrorEnv
	tok             string
	up              store.Commit // the upstream's commit of main
	weights, config []byte       // model.safetensors (Xet) and config.json (regular)
	weightsEntry    store.TreeEntry
	regularOpens    int64 // upstream streams opened to record the revision
}

// checkInfo checks the repo's info answers, at main and at its sha, and
// that recording the revision read the regular file only.
func (rr *readRoutes) checkInfo(t *testing.T) {
	t.Helper()
	e, tok, up := rr.e, rr.tok, rr.up
	info := e.Do("GET", "/api/models/google-bert/bert-tiny?expand=xetEnabled", tok, nil)
	if info.Status != 200 {
		t.Fatalf("info: %d %s", info.Status, info.Body)
	}
	m := info.JSON(t)
	if m["id"] != "google-bert/bert-tiny" || m["author"] != "google-bert" || m["sha"] != up.SHA || m["xetEnabled"] != true {
		t.Errorf("info: id %v author %v sha %v (want %s) xetEnabled %v", m["id"], m["author"], m["sha"], up.SHA, m["xetEnabled"])
	}
	if sib, _ := m["siblings"].([]any); len(sib) != 3 {
		t.Errorf("info: %d siblings, want 3", len(sib))
	}
	// The regular file was read when the revision was recorded.
	rr.regularOpens = e.up.opens.Load()
	if rr.regularOpens != 1 {
		t.Errorf("recording the revision opened %d streams, want 1 (config.json)", rr.regularOpens)
	}
	if r := e.Do("GET", "/api/models/google-bert/bert-tiny/revision/"+up.SHA, tok, nil); r.Status != 200 {
		t.Errorf("info at the sha: %d %s", r.Status, r.Body)
	}
}

// checkTree checks that the tree gives the upstream's Xet hash and that
// paths-info answers.
func (rr *readRoutes) checkTree(t *testing.T) {
	t.Helper()
	e, tok := rr.e, rr.tok
	tree := e.Do("GET", "/api/models/google-bert/bert-tiny/tree/main", tok, nil)
	var items []map[string]any
	if err := json.Unmarshal(tree.Body, &items); err != nil || tree.Status != 200 {
		t.Fatalf("tree: %d %s", tree.Status, tree.Body)
	}
	found := false
	for _, it := range items {
		if it["path"] == "model.safetensors" {
			found = it["xetHash"] == rr.weightsEntry.XetHash
		}
	}
	if !found {
		t.Errorf("tree: no model.safetensors with the upstream's xetHash %s: %s", rr.weightsEntry.XetHash, tree.Body)
	}
	if r := e.Do("POST", "/api/models/google-bert/bert-tiny/paths-info/main", tok, []byte(`{"paths":["config.json"]}`), "Content-Type: application/json"); r.Status != 200 || !strings.Contains(string(r.Body), "config.json") {
		t.Errorf("paths-info: %d %s", r.Status, r.Body)
	}
}

// checkHead checks a HEAD of the Xet file: the upstream's commit and hash,
// a Link naming the mirror only, the size, and no upstream stream opened.
func (rr *readRoutes) checkHead(t *testing.T) {
	t.Helper()
	e, u, up, upEntry := rr.e, rr.u, rr.up, rr.weightsEntry
	head := e.Do("HEAD", "/google-bert/bert-tiny/resolve/main/model.safetensors", rr.tok, nil)
	if head.Status != 200 || head.Header.Get("X-Repo-Commit") != up.SHA || head.Header.Get("X-Xet-Hash") != upEntry.XetHash {
		t.Errorf("HEAD: %d commit %q xet %q", head.Status, head.Header.Get("X-Repo-Commit"), head.Header.Get("X-Xet-Hash"))
	}
	if l := head.Header.Get("Link"); !strings.Contains(l, e.URL+"/api/models/google-bert/bert-tiny/xet-read-token/") || strings.Contains(l, u.URL) {
		t.Errorf("HEAD Link %q does not name the mirror (%s) only", l, e.URL)
	}
	if head.Header.Get("Content-Length") != strconv.Itoa(weightsBytes) {
		t.Errorf("HEAD Content-Length %q", head.Header.Get("Content-Length"))
	}
	if n := e.up.opens.Load() - rr.regularOpens; n != 0 {
		t.Errorf("a HEAD opened %d upstream streams, want 0", n)
	}
}

// checkDownloads downloads the regular file, the Xet file twice (pulled
// from the upstream once, registered under the upstream's hash) and a
// Range of it.
func (rr *readRoutes) checkDownloads(t *testing.T) {
	t.Helper()
	e, tok, weights, config := rr.e, rr.tok, rr.weights, rr.config
	if r := e.Do("GET", "/google-bert/bert-tiny/resolve/main/config.json", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, config) {
		t.Errorf("config.json: %d %q", r.Status, r.Body)
	}
	for i := range 2 {
		r := e.Do("GET", "/google-bert/bert-tiny/resolve/main/model.safetensors", tok, nil)
		if r.Status != 200 || !bytes.Equal(r.Body, weights) {
			t.Fatalf("download %d: %d, %d bytes, equal %v", i, r.Status, len(r.Body), bytes.Equal(r.Body, weights))
		}
	}
	if n := e.up.opens.Load() - rr.regularOpens; n != 1 {
		t.Errorf("two downloads opened %d upstream file streams, want 1", n)
	}
	h, _ := xet.ParseHash(rr.weightsEntry.XetHash)
	if f, err := e.Store.File(context.Background(), mirror.DefaultTenant, h); err != nil || f.SizeBytes != weightsBytes {
		t.Errorf("the mirror's file %s: %v %+v (its hash must be the upstream's)", h, err, f)
	}
	if r := e.Do("GET", "/google-bert/bert-tiny/resolve/main/model.safetensors", tok, nil, "Range: bytes=100-199"); r.Status != 206 || !bytes.Equal(r.Body, weights[100:200]) {
		t.Errorf("Range: %d %d bytes", r.Status, len(r.Body))
	}
}

// checkXet checks the Xet path: the token names the mirror, and a file not
// pulled yet is pulled for its reconstruction.
func (rr *readRoutes) checkXet(t *testing.T) {
	t.Helper()
	e, u := rr.e, rr.u
	xt := e.Do("GET", "/api/models/google-bert/bert-tiny/xet-read-token/main", rr.tok, nil)
	xm := xt.JSON(t)
	if xt.Status != 200 || xm["casUrl"] != e.URL {
		t.Fatalf("xet-read-token: %d casUrl %v", xt.Status, xm["casUrl"])
	}
	cas, _ := xm["accessToken"].(string)
	otherEntry, _ := rr.up.Entry("other.bin")
	rec := e.Do("GET", "/v1/reconstructions/"+otherEntry.XetHash, cas, nil)
	if rec.Status != 200 || strings.Contains(string(rec.Body), u.URL) || !strings.Contains(string(rec.Body), e.URL) {
		t.Errorf("reconstruction: %d %s", rec.Status, rec.Body)
	}
	if n := e.up.opens.Load() - rr.regularOpens; n != 2 {
		t.Errorf("after the reconstruction %d upstream streams, want 2", n)
	}
}

// checkListing checks that the listing and the refs show the upstream's id
// and revision names.
func (rr *readRoutes) checkListing(t *testing.T) {
	t.Helper()
	list := rr.e.Do("GET", "/api/models?search=bert-tiny", rr.tok, nil)
	var listed []map[string]any
	if err := json.Unmarshal(list.Body, &listed); err != nil || len(listed) != 1 || listed[0]["id"] != "google-bert/bert-tiny" || listed[0]["sha"] != rr.up.SHA {
		t.Errorf("listing: %d %s", list.Status, list.Body)
	}
	refs := rr.e.Do("GET", "/api/models/google-bert/bert-tiny/refs", rr.tok, nil)
	if !strings.Contains(string(refs.Body), `"name":"main"`) || strings.Contains(string(refs.Body), "refs/mirror") {
		t.Errorf("refs: %d %s", refs.Status, refs.Body)
	}
}

// checkReadOnly checks that a commit to the mirrored repo is refused and
// that a repo the upstream lacks is not found.
func (rr *readRoutes) checkReadOnly(t *testing.T) {
	t.Helper()
	e, tok := rr.e, rr.tok
	commit := e.Do("POST", "/api/models/google-bert/bert-tiny/commit/main", tok, []byte(`{"key":"header","value":{"summary":"x"}}`+"\n"), "Content-Type: application/x-ndjson")
	if commit.Status != 403 {
		t.Errorf("commit to a mirrored repo: %d %s, want 403", commit.Status, commit.Body)
	}
	// A repo the upstream does not have.
	if r := e.Do("GET", "/api/models/google-bert/nothing", tok, nil); r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("a repo the upstream lacks: %d %s %q", r.Status, r.Body, r.Header.Get("X-Error-Code"))
	}
}

// TestIsolation: with mirror.visibility private, every read route of a
// mirrored repo is not found for another tenant; and a CAS token for one
// mirrored repo does not open a file of another.
func TestIsolation(t *testing.T) {
	u := newUpstream(t)
	up := u.repo(t, "org", "a", map[string][]byte{"a.bin": randomBytes(3, 100_000)}, nil)
	upB := u.repo(t, "org", "b", map[string][]byte{"b.bin": randomBytes(4, 100_000)}, nil)

	t.Run("private", func(t *testing.T) {
		e := newMirror(t, u, func(c *mirror.Config) { c.Visibility = "private" })
		tok := e.Credential("bob", "read")
		for _, p := range []string{"/api/models/org/a", "/api/models/org/a/revision/main", "/api/models/org/a/tree/main",
			"/api/models/org/a/xet-read-token/main", "/org/a/resolve/main/a.bin"} {
			r := e.Do("GET", p, tok, nil)
			if r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
				t.Errorf("GET %s: %d %q, want 404 RepoNotFound", p, r.Status, r.Header.Get("X-Error-Code"))
			}
		}
		if r := e.Do("POST", "/api/models/org/a/paths-info/main", tok, []byte(`{"paths":["a.bin"]}`), "Content-Type: application/json"); r.Status != 404 {
			t.Errorf("paths-info: %d", r.Status)
		}
		if n := e.up.revisions.Load() + e.up.opens.Load(); n != 0 {
			t.Errorf("a reader who may not read made %d upstream requests", n)
		}
	})

	t.Run("token bound to the repo", func(t *testing.T) {
		e := newMirror(t, u)
		tok := e.Credential("bob", "read")
		xt := e.Do("GET", "/api/models/org/a/xet-read-token/main", tok, nil).JSON(t)
		cas, _ := xt["accessToken"].(string)
		bEntry, _ := upB.Entry("b.bin")
		aEntry, _ := up.Entry("a.bin")
		// b.bin pulled through its own repo: still not readable with a's token.
		if r := e.Do("GET", "/org/b/resolve/main/b.bin", tok, nil); r.Status != 200 {
			t.Fatalf("b.bin: %d", r.Status)
		}
		if r := e.Do("GET", "/v1/reconstructions/"+bEntry.XetHash, cas, nil); r.Status != 404 {
			t.Errorf("a's token reconstructs b.bin: %d %s", r.Status, r.Body)
		}
		if r := e.Do("GET", "/v1/reconstructions/"+aEntry.XetHash, cas, nil); r.Status != 200 {
			t.Errorf("a's token on a.bin: %d %s", r.Status, r.Body)
		}
	})
}

// TestCoalescing: 20 concurrent first downloads of one file fetch it from
// the upstream once.
func TestCoalescing(t *testing.T) {
	u := newUpstream(t)
	data := randomBytes(5, 2<<20)
	u.repo(t, "org", "big", map[string][]byte{"w.bin": data}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	if r := e.Do("GET", "/api/models/org/big", tok, nil); r.Status != 200 {
		t.Fatalf("info: %d", r.Status)
	}
	e.up.gate = make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	started := make(chan struct{}, 20)
	for range 20 {
		wg.Go(func() {
			started <- struct{}{}
			r := e.Do("GET", "/org/big/resolve/main/w.bin", tok, nil)
			if r.Status != 200 || !bytes.Equal(r.Body, data) {
				mu.Lock()
				bad++
				mu.Unlock()
			}
		})
	}
	for range 20 {
		<-started
	}
	close(e.up.gate)
	wg.Wait()
	if bad != 0 {
		t.Errorf("%d of 20 downloads failed", bad)
	}
	if n := e.up.opens.Load(); n != 1 {
		t.Errorf("20 concurrent first downloads opened %d upstream streams, want 1", n)
	}
	if n := e.up.openBytes.Load(); n != int64(len(data)) {
		t.Errorf("upstream bytes %d, want %d", n, len(data))
	}
}

// TestQuotaEviction: over mirror.quota, the least recently read revision
// is evicted and everything else still downloads; the evicted one is pulled
// again when read.
func TestQuotaEviction(t *testing.T) {
	u := newUpstream(t)
	a, b := randomBytes(9, 400_000), randomBytes(10, 400_000)
	u.repo(t, "org", "a", map[string][]byte{"a.bin": a}, nil)
	u.repo(t, "org", "b", map[string][]byte{"b.bin": b}, nil)
	e := newMirror(t, u, func(c *mirror.Config) { c.QuotaBytes = 600_000 })
	tok := e.Credential("bob", "read")
	if r := e.Do("GET", "/org/a/resolve/main/a.bin", tok, nil); r.Status != 200 {
		t.Fatalf("a: %d", r.Status)
	}
	e.clock.Advance(time.Second)
	if r := e.Do("GET", "/org/b/resolve/main/b.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, b) {
		t.Fatalf("b: %d", r.Status)
	}
	list, err := e.m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Repo.String() != "org/b" {
		t.Errorf("after b, mirrored %+v, want org/b only", list)
	}
	if s := e.m.Stats(); s.Evicted != 1 {
		t.Errorf("evicted %d, want 1", s.Evicted)
	}
	e.checkIndex(t)
	e.clock.Advance(time.Second)
	opens := e.up.opens.Load()
	if r := e.Do("GET", "/org/a/resolve/main/a.bin", tok, nil); r.Status != 200 || !bytes.Equal(r.Body, a) {
		t.Errorf("a after its eviction: %d", r.Status)
	}
	if e.up.opens.Load() == opens {
		t.Errorf("a after its eviction was not pulled again")
	}
}

// TestFairSegments: with one upstream connection, a tenant's long pull
// gives the connection up at the end of each segment, so another tenant's
// one-segment pull, queued behind it, runs next instead of after it.
func TestFairSegments(t *testing.T) {
	u := newUpstream(t)
	big, small := randomBytes(13, 1<<20), randomBytes(14, 40_000)
	u.repo(t, "org", "big", map[string][]byte{"big.bin": big}, nil)
	u.repo(t, "org", "small", map[string][]byte{"small.bin": small}, nil)
	e := newMirror(t, u, func(c *mirror.Config) { c.MaxUpstreamConnections, c.SegmentBytes = 1, 64<<10 })
	ctx := context.Background()
	entry := func(name, path string) (store.RepoID, string, store.TreeEntry) {
		local, err := e.m.Repo(ctx, "model", "org", name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.m.Resolve(ctx, local, "main")
		if err != nil {
			t.Fatal(err)
		}
		en, _ := c.Entry(path)
		return local, c.SHA, en
	}
	bigRepo, bigSHA, bigEntry := entry("big", "big.bin")
	smallRepo, smallSHA, smallEntry := entry("small", "small.bin")

	var mu sync.Mutex
	var log []string
	firstOpen, release := make(chan struct{}), make(chan struct{})
	e.up.onOpen = func(f mirror.File, off int64) {
		mu.Lock()
		log = append(log, f.Path)
		n := len(log)
		mu.Unlock()
		if n == 1 {
			close(firstOpen)
			<-release
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := e.m.Fetch(ctx, "alice", bigRepo, bigSHA, bigEntry, nil, nil); err != nil {
			t.Error(err)
		}
	})
	<-firstOpen
	wg.Go(func() {
		if _, err := e.m.Fetch(ctx, "bob", smallRepo, smallSHA, smallEntry, nil, nil); err != nil {
			t.Error(err)
		}
	})
	for e.m.UpstreamWaiting() == 0 {
		runtime.Gosched() // bob's pull queues behind alice's first segment
	}
	close(release)
	wg.Wait()
	if len(log) != 17 || log[1] != "small.bin" {
		t.Errorf("upstream streams in order %v: want big.bin, small.bin, then the 15 other segments of big.bin", log)
	}
}

// TestSlowUpstream: a branch due to be resolved again while the upstream
// is slow is served as stored once Config.StaleAfter passes (the test's
// timer fires at once), and the resolution goes on behind it.
func TestSlowUpstream(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": randomBytes(15, 50_000)}, nil)
	fire := make(chan time.Time)
	e := newMirror(t, u, func(c *mirror.Config) { c.After = func(time.Duration) <-chan time.Time { return fire } })
	tok := e.Credential("bob", "read")
	first := e.Do("GET", "/api/models/org/m", tok, nil)
	if first.Status != 200 {
		t.Fatalf("info: %d", first.Status)
	}
	gate := make(chan struct{})
	e.up.revGate.Store(&gate)
	e.clock.Advance(mirror.DefaultRefresh + time.Second)
	close(fire)
	r := e.Do("GET", "/api/models/org/m", tok, nil)
	if r.Status != 200 || r.JSON(t)["sha"] != first.JSON(t)["sha"] {
		t.Errorf("info with the upstream slow: %d %s", r.Status, r.Body)
	}
	if s := e.m.Stats(); s.Stale != 1 {
		t.Errorf("stale %d, want 1", s.Stale)
	}
	close(gate)
}

// TestNames: a local repo name maps back to the upstream id it was made
// from, whatever underscores the namespace and name hold.
func TestNames(t *testing.T) {
	u := newUpstream(t)
	e := newMirror(t, u)
	for _, c := range []struct{ ns, name string }{
		{"google-bert", "bert-base-uncased"}, {"Qwen", "Qwen2.5-0.5B"}, {"a_x", "b"}, {"a__b", "c_"}, {"a_", "d__e"}, {"x", "y__z"},
	} {
		local, err := e.m.LocalRepo("model", c.ns, c.name)
		if err != nil {
			t.Errorf("%s/%s: %v", c.ns, c.name, err)
			continue
		}
		pub, ok := e.m.PublicRepo(local)
		if !ok || pub.Tenant != c.ns || pub.Name != c.name {
			t.Errorf("%s/%s → %s → %v %s/%s", c.ns, c.name, local.Name, ok, pub.Tenant, pub.Name)
		}
	}
	if _, err := e.m.LocalRepo("model", strings.Repeat("n", 40), strings.Repeat("m", 60)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a 100-character id: %v, want ErrNotFound", err)
	}
}

// TestAnonymousReaders: with hub.anonymous_reads on, a reader without a
// token downloads a mirrored repo when mirror.visibility is public, and
// gets the answer for a repo it may not see when it is internal.
func TestAnonymousReaders(t *testing.T) {
	u := newUpstream(t)
	data := randomBytes(16, 80_000)
	u.repo(t, "org", "m", map[string][]byte{"a.bin": data}, nil)
	anon := func(c *server.Config) { c.AnonymousReads = true }
	pub := newMirrorServer(t, u, anon, func(c *mirror.Config) { c.Visibility = "public" })
	if r := pub.Do("GET", "/org/m/resolve/main/a.bin", "", nil); r.Status != 200 || !bytes.Equal(r.Body, data) {
		t.Errorf("public mirror, no token: %d", r.Status)
	}
	internal := newMirrorServer(t, u, anon)
	r := internal.Do("GET", "/org/m/resolve/main/a.bin", "", nil)
	if r.Status != 401 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("internal mirror, no token: %d %q, want 401 RepoNotFound", r.Status, r.Header.Get("X-Error-Code"))
	}
	if n := internal.up.revisions.Load(); n != 0 {
		t.Errorf("a reader who may not read made %d upstream requests", n)
	}
}

// TestHitsCountXetDownloads: openxet_mirror_hits_total counts a Xet
// download of a file the mirror stored (its reconstruction from byte 0)
// as it counts a resolve download; a later window of the same download
// and a download that pulls the file are not hits.
func TestHitsCountXetDownloads(t *testing.T) {
	u := newUpstream(t)
	up := u.repo(t, "org", "m", map[string][]byte{"w.bin": randomBytes(19, 300_000)}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read")
	xt := e.Do("GET", "/api/models/org/m/xet-read-token/main", tok, nil)
	if xt.Status != 200 {
		t.Fatalf("xet-read-token: %d %s", xt.Status, xt.Body)
	}
	cas, _ := xt.JSON(t)["accessToken"].(string)
	entry, _ := up.Entry("w.bin")
	path := "/v1/reconstructions/" + entry.XetHash
	// The first reconstruction pulls the file (or relays it): no hit.
	if r := e.Do("GET", path, cas, nil); r.Status != 200 {
		t.Fatalf("first reconstruction: %d %s", r.Status, r.Body)
	}
	if r := e.Do("GET", "/org/m/resolve/main/w.bin", tok, nil); r.Status != 200 {
		t.Fatalf("resolve: %d", r.Status)
	}
	hits := e.m.Stats().Hits
	for _, tc := range []struct {
		rng  string
		want int64
	}{{"", 1}, {"Range: bytes=0-99", 1}, {"Range: bytes=100000-199999", 0}} {
		var headers []string
		if tc.rng != "" {
			headers = append(headers, tc.rng)
		}
		if r := e.Do("GET", path, cas, nil, headers...); r.Status != 200 {
			t.Fatalf("reconstruction %q: %d %s", tc.rng, r.Status, r.Body)
		}
		if got := e.m.Stats().Hits - hits; got != tc.want {
			t.Errorf("reconstruction %q of a stored file: %d hits, want %d", tc.rng, got, tc.want)
		}
		hits = e.m.Stats().Hits
	}
}
