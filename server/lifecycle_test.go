package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"openxet/store"
	"openxet/xet"
)

// hubFile is a file uploaded through the CAS with its SHA-256 in the
// shard, so that a Hub commit can name it.
type hubFile struct {
	info xet.FileInfo
	sha  string
	size int64
	xorb xet.XorbInfo
	body []byte
}

func newHubFile(seed uint64) hubFile {
	chunks := randomChunks(seed, 3, 20_000)
	body, info := xet.BuildXorb(chunks, false)
	f, _ := fileOf(info)
	var data []byte
	for _, c := range chunks {
		data = append(data, c...)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	h, _ := xet.ParseHash(sha)
	f.SHA256 = &h
	f.Flags |= xet.FileFlagMetadataExt
	return hubFile{info: f, sha: sha, size: int64(len(data)), xorb: info, body: body}
}

// uploadHub sends the file's xorb and a shard registering it.
func (e *testEnv) uploadHub(token string, f hubFile) {
	e.t.Helper()
	if r := e.postXorb(token, f.body, f.xorb.Hash); r.Status != 200 {
		e.t.Fatalf("xorb: %d %s", r.Status, r.Body)
	}
	sh := &xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(f.xorb)}}
	if r := e.do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		e.t.Fatalf("shard: %d %s", r.Status, r.Body)
	}
}

// hubCommit commits lines (after the header) to a branch of a repo.
func (e *testEnv) hubCommit(token, repo, branch string, ops ...string) response {
	e.t.Helper()
	body := `{"key":"header","value":{"summary":"test"}}` + "\n" + strings.Join(ops, "\n") + "\n"
	return e.do("POST", "/api/models/"+repo+"/commit/"+branch, token, []byte(body), "Content-Type: application/x-ndjson")
}

func lfsOp(path string, f hubFile) string {
	return fmt.Sprintf(`{"key":"lfsFile","value":{"path":%q,"algo":"sha256","oid":%q,"size":%d}}`, path, f.sha, f.size)
}

func deleteOp(path string) string {
	return fmt.Sprintf(`{"key":"deletedFile","value":{"path":%q}}`, path)
}

func (e *testEnv) usageOf(tenant string) int64 {
	e.t.Helper()
	u, err := e.st.Usage(context.Background(), tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// lcEnv is a test server whose store reads a settable clock (starting at
// the real time: file modification times are real), so that a pass can
// come a second after the uploads it must see as settled.
type lcEnv struct {
	*testEnv
	clk *fakeClock
}

func newLCEnv(t *testing.T, mutate ...func(*Config)) *lcEnv {
	t.Helper()
	clk := &fakeClock{t: time.Now()}
	cfg := store.DirConfig(t.TempDir())
	cfg.Now = clk.Now
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.GCGrace = 0
	for _, m := range mutate {
		m(&c)
	}
	srv, err := New(c, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	e := &testEnv{t: t, st: st, srv: srv, http: hs}
	e.admin = e.credential("admin", "admin")
	return &lcEnv{testEnv: e, clk: clk}
}

// gcPass runs a pass through the admin route, a second after what came
// before.
func (e *lcEnv) gcPass() store.GCReport {
	e.t.Helper()
	e.clk.Add(time.Second)
	r := e.do("POST", "/api/openxet/v1/admin/gc", e.admin, nil)
	if r.Status != 200 {
		e.t.Fatalf("gc: %d %s", r.Status, r.Body)
	}
	var rep store.GCReport
	if err := json.Unmarshal(r.Body, &rep); err != nil {
		e.t.Fatal(err)
	}
	return rep
}

// TestDeleteRepoThenCollectGivesQuotaBack: upload until the quota refuses,
// delete the repo, one pass, and the upload fits.
func TestDeleteRepoThenCollectGivesQuotaBack(t *testing.T) {
	e := newLCEnv(t)
	alice := e.credential("alice", "write")
	a, b := newHubFile(1), newHubFile(2)
	e.uploadHub(alice, a)
	e.putLimits("alice", map[string]any{"quota_bytes": a.xorb.StreamLen + 100})
	if r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"w"}`)); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	if r := e.hubCommit(alice, "alice/w", "main", lfsOp("a.bin", a)); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	wantError(t, e.postXorb(alice, b.body, b.xorb.Hash), 403, "quota_exceeded")
	if r := e.do("DELETE", "/api/repos/delete", alice, []byte(`{"name":"w"}`)); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	rep := e.gcPass()
	if rep.ReleasedBytes != a.xorb.StreamLen || e.usageOf("alice") != 0 {
		t.Fatalf("pass %+v, usage %d", rep, e.usageOf("alice"))
	}
	e.uploadHub(alice, b)
	if e.usageOf("alice") != b.xorb.StreamLen {
		t.Fatalf("usage %d", e.usageOf("alice"))
	}
	// The collector's metrics saw the pass.
	r := e.do("GET", "/metrics", e.admin, nil)
	for _, want := range []string{`openxet_gc_passes_total{result="ok"} 1`, fmt.Sprintf("openxet_gc_released_bytes_total %d", a.xorb.StreamLen),
		`openxet_gc_deleted_objects_total{kind="xorb"} 1`, "openxet_gc_last_success_timestamp_seconds", "openxet_gc_pass_duration_seconds_count 1"} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestSuperSquashThenCollect: a file deleted in a commit stays retained by
// the old revision until the history is squashed.
func TestSuperSquashThenCollect(t *testing.T) {
	e := newLCEnv(t)
	alice := e.credential("alice", "write")
	a, b := newHubFile(3), newHubFile(4)
	e.uploadHub(alice, a)
	e.uploadHub(alice, b)
	e.do("POST", "/api/repos/create", alice, []byte(`{"name":"w"}`))
	e.hubCommit(alice, "alice/w", "main", lfsOp("a.bin", a))
	if r := e.hubCommit(alice, "alice/w", "main", deleteOp("a.bin"), lfsOp("b.bin", b)); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	if rep := e.gcPass(); rep.ReleasedBytes != 0 {
		t.Fatalf("released while an old revision holds the file: %+v", rep)
	}
	r := e.do("POST", "/api/models/alice/w/super-squash/main", alice, []byte(`{"message":"squash"}`))
	if r.Status != 200 {
		t.Fatalf("squash: %d %s", r.Status, r.Body)
	}
	if rep := e.gcPass(); rep.ReleasedBytes != a.xorb.StreamLen || e.usageOf("alice") != b.xorb.StreamLen {
		t.Fatalf("after the squash: %+v, usage %d", rep, e.usageOf("alice"))
	}
	info := e.do("GET", "/api/models/alice/w", alice, nil).json(t)
	// .gitattributes (the repo's first commit) and b.bin.
	if sib := info["siblings"].([]any); len(sib) != 2 || sib[1].(map[string]any)["rfilename"] != "b.bin" {
		t.Fatalf("siblings %v", sib)
	}
	// The squashed revision still serves b.
	if r := e.do("GET", "/alice/w/resolve/main/b.bin", alice, nil); r.Status != 200 || int64(len(r.Body)) != b.size {
		t.Fatalf("resolve: %d, %d bytes", r.Status, len(r.Body))
	}
}

func TestBranchAndTagRoutes(t *testing.T) {
	e := newLCEnv(t)
	alice := e.credential("alice", "write")
	reader := e.credential("alice", "read")
	bob := e.credential("bob", "write")
	a := newHubFile(5)
	e.uploadHub(alice, a)
	e.do("POST", "/api/repos/create", alice, []byte(`{"name":"w"}`))
	if r := e.do("POST", "/api/models/alice/w/branch/dev", alice, []byte(`{}`)); r.Status != 200 {
		t.Fatalf("branch: %d %s", r.Status, r.Body)
	}
	e.hubCommit(alice, "alice/w", "dev", lfsOp("a.bin", a))
	if r := e.do("POST", "/api/models/alice/w/tag/dev", alice, []byte(`{"tag":"v1"}`)); r.Status != 200 {
		t.Fatalf("tag: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/api/models/alice/w/tag/dev", alice, []byte(`{"tag":"v1"}`)); r.Status != 409 {
		t.Fatalf("tag again: %d %s", r.Status, r.Body)
	}
	refs := e.do("GET", "/api/models/alice/w/refs", reader, nil).json(t)
	if len(refs["branches"].([]any)) != 2 || len(refs["tags"].([]any)) != 1 {
		t.Fatalf("refs %v", refs)
	}
	if r := e.do("GET", "/alice/w/resolve/v1/a.bin", reader, nil); r.Status != 200 {
		t.Fatalf("resolve by tag: %d", r.Status)
	}
	before := e.snapshot()
	for _, c := range []struct {
		method, path, token string
		body                string
		status              int
		code                string
	}{
		{"DELETE", "/api/models/alice/w/branch/main", alice, "", 400, "bad_request"},
		{"DELETE", "/api/models/alice/w/branch/nope", alice, "", 404, "not_found"},
		{"DELETE", "/api/models/alice/w/branch/a..b", alice, "", 400, "bad_request"},
		{"DELETE", "/api/models/alice/w/tag/nope", alice, "", 404, "not_found"},
		{"DELETE", "/api/models/alice/w/tag/v1", reader, "", 403, "forbidden"},
		{"DELETE", "/api/models/alice/w/branch/dev", reader, "", 403, "forbidden"},
		{"DELETE", "/api/models/alice/w/branch/dev", bob, "", 404, "not_found"},
		{"DELETE", "/api/models/alice/w/tag/v1", bob, "", 404, "not_found"},
		{"POST", "/api/models/alice/w/super-squash/main", bob, "{}", 404, "not_found"},
		{"POST", "/api/models/alice/w/super-squash/main", reader, "{}", 403, "forbidden"},
		{"POST", "/api/models/alice/w/super-squash/v1", alice, "{}", 404, "not_found"},
		{"POST", "/api/models/alice/w/super-squash/refs%2Ftags%2Fv1", alice, "{}", 400, "bad_request"},
		{"POST", "/api/models/alice/w/super-squash/main", alice, "{not json", 400, "bad_request"},
		{"POST", "/api/models/alice/w/tag/main", alice, `{"tag":"refs/heads/x"}`, 400, "bad_request"},
		{"POST", "/api/models/alice/w/tag/main", alice, `{"tag":""}`, 400, "bad_request"},
		{"POST", "/api/models/alice/w/tag/nope", alice, `{"tag":"v2"}`, 404, "not_found"},
		{"POST", "/api/models/alice/w/tag/main", bob, `{"tag":"v2"}`, 404, "not_found"},
		{"GET", "/api/models/alice/w/refs", bob, "", 404, "not_found"},
		{"DELETE", "/api/models/alice/w/branch/dev", "", "", 401, "unauthorized"},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := e.do(c.method, c.path, c.token, body)
		if r.Status != c.status {
			t.Errorf("%s %s: %d, want %d (%s)", c.method, c.path, r.Status, c.status, r.Body)
			continue
		}
		wantError(t, r, c.status, c.code)
		if r.Header.Get("X-Error-Message") == "" {
			t.Errorf("%s %s: no X-Error-Message", c.method, c.path)
		}
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("refused requests changed state:\n%s", diff)
	}
	// Deleting dev keeps a (the tag has it); deleting the tag releases it.
	if r := e.do("DELETE", "/api/models/alice/w/branch/dev", alice, nil); r.Status != 200 {
		t.Fatalf("delete branch: %d %s", r.Status, r.Body)
	}
	if rep := e.gcPass(); rep.ReleasedBytes != 0 {
		t.Fatalf("released a tagged file: %+v", rep)
	}
	if r := e.do("DELETE", "/api/models/alice/w/tag/v1", alice, nil); r.Status != 200 {
		t.Fatalf("delete tag: %d %s", r.Status, r.Body)
	}
	if rep := e.gcPass(); rep.ReleasedBytes != a.xorb.StreamLen {
		t.Fatalf("after the tag: %+v", rep)
	}
}

// TestLifecycleAdminAndTenantRoutes covers usage, file deletion, tenant
// deletion and the pass route, with the refusals of the bad-input matrix:
// each leaves the state as it was.
func TestLifecycleAdminAndTenantRoutes(t *testing.T) {
	e := newLCEnv(t)
	alice := e.credential("alice", "write")
	aliceRead := e.credential("alice", "read")
	bob := e.credential("bob", "write")
	a, shared := newHubFile(6), newHubFile(7)
	e.uploadHub(alice, a)
	e.uploadHub(alice, shared)
	// bob registers the shared file by dedup.
	sh := &xet.Shard{Files: []xet.FileInfo{shared.info}}
	if r := e.do("POST", "/v1/shards", bob, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("bob's shard: %d %s", r.Status, r.Body)
	}
	hash := a.info.Hash.String()
	before := e.snapshot()
	for _, c := range []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/api/openxet/v1/admin/usage", alice, 403, "forbidden"},
		{"GET", "/api/openxet/v1/admin/usage?tenant=Bad!", e.admin, 400, "bad_request"},
		{"GET", "/api/openxet/v1/admin/usage?tenant=nobody", e.admin, 404, "not_found"},
		{"GET", "/api/openxet/v1/admin/tenants/nobody/usage", e.admin, 404, "not_found"},
		{"GET", "/api/openxet/v1/admin/tenants/alice/usage", bob, 403, "forbidden"},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice", alice, 403, "forbidden"},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice", "", 401, "unauthorized"},
		{"DELETE", "/api/openxet/v1/admin/tenants/nobody", e.admin, 404, "not_found"},
		{"DELETE", "/api/openxet/v1/admin/tenants/..bad", e.admin, 400, "bad_request"},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice/files/" + hash, bob, 403, "forbidden"},
		{"DELETE", "/api/openxet/v1/admin/tenants/alice/files/nothex", e.admin, 400, "bad_request"},
		{"DELETE", "/api/openxet/v1/admin/tenants/nobody/files/" + hash, e.admin, 404, "not_found"},
		{"DELETE", "/api/openxet/v1/admin/tenants/bob/files/" + hash, e.admin, 404, "not_found"},
		{"DELETE", "/api/openxet/v1/files/" + hash, bob, 404, "not_found"},
		{"DELETE", "/api/openxet/v1/files/" + hash, aliceRead, 403, "forbidden"},
		{"DELETE", "/api/openxet/v1/files/zz", alice, 400, "bad_request"},
		{"POST", "/api/openxet/v1/admin/gc", alice, 403, "forbidden"},
		{"POST", "/api/openxet/v1/admin/gc?dry_run=maybe", e.admin, 400, "bad_request"},
		{"GET", "/api/openxet/v1/usage", "", 401, "unauthorized"},
	} {
		r := e.do(c.method, c.path, c.token, nil)
		wantError(t, r, c.status, c.code)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("refused requests changed state:\n%s", diff)
	}
	// A dry run changes nothing either.
	if r := e.do("POST", "/api/openxet/v1/admin/gc?dry_run=true", e.admin, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"dry_run":true`) {
		t.Fatalf("dry run: %d %s", r.Status, r.Body)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("a dry run changed state:\n%s", diff)
	}

	var own TenantUsageView
	json.Unmarshal(e.do("GET", "/api/openxet/v1/usage", aliceRead, nil).Body, &own)
	if own.Tenant != "alice" || own.UsageBytes != a.xorb.StreamLen+shared.xorb.StreamLen || own.CASOnlyFiles != 2 || own.QuotaBytes != -1 {
		t.Fatalf("own usage %+v", own)
	}
	// Alice deletes her own file; bob's dedup'd file stays whole.
	if r := e.do("DELETE", "/api/openxet/v1/files/"+hash, alice, nil); r.Status != 200 {
		t.Fatalf("delete own file: %d %s", r.Status, r.Body)
	}
	wantError(t, e.do("GET", "/v1/reconstructions/"+hash, alice, nil), 404, "not_found")
	wantError(t, e.do("DELETE", "/api/openxet/v1/files/"+hash, alice, nil), 404, "not_found")
	if rep := e.gcPass(); rep.ReleasedBytes != a.xorb.StreamLen {
		t.Fatalf("pass %+v", rep)
	}
	// The operator deletes alice: bob's file keeps its bytes, unowned.
	r := e.do("DELETE", "/api/openxet/v1/admin/tenants/alice", e.admin, nil)
	var del DeletedTenantView
	if r.Status != 200 || json.Unmarshal(r.Body, &del) != nil || del.Collection == nil || del.Collection.ReleasedBytes != shared.xorb.StreamLen {
		t.Fatalf("delete tenant: %d %s", r.Status, r.Body)
	}
	wantError(t, e.do("GET", "/api/openxet/v1/usage", alice, nil), 401, "unauthorized")
	if e.usageOf("alice") != 0 || e.usageOf("bob") != 0 {
		t.Fatalf("usage alice %d bob %d", e.usageOf("alice"), e.usageOf("bob"))
	}
	rec := e.do("GET", "/v1/reconstructions/"+shared.info.Hash.String(), bob, nil)
	if rec.Status != 200 || len(e.assemble(rec.Body)) != int(shared.size) {
		t.Fatalf("bob's file after alice's deletion: %d", rec.Status)
	}
	var all UsageView
	json.Unmarshal(e.do("GET", "/api/openxet/v1/admin/usage", e.admin, nil).Body, &all)
	if all.UnownedReferencedBytes != shared.xorb.StreamLen {
		t.Fatalf("usage report %+v", all)
	}
	var bobU TenantUsageView
	json.Unmarshal(e.do("GET", "/api/openxet/v1/admin/tenants/bob/usage", e.admin, nil).Body, &bobU)
	if bobU.ReferencedUnownedBytes != shared.xorb.StreamLen || bobU.Files != 1 {
		t.Fatalf("bob's usage %+v", bobU)
	}
	wantError(t, e.do("DELETE", "/api/openxet/v1/admin/tenants/alice", e.admin, nil), 404, "not_found")
}

// TestCollectingMakesUploadsRetry: an upload of a xorb the collector is
// deleting gets 503 with Retry-After, not a failure.
func TestCollectingMakesUploadsRetry(t *testing.T) {
	e := newLCEnv(t)
	alice := e.credential("alice", "write")
	a := newHubFile(8)
	ctx := context.Background()
	if _, err := e.st.PutXorb(ctx, "bob", a.xorb, a.body[:a.xorb.StreamLen], store.Unlimited); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Second)
	checked := false
	_, err := e.st.Collect(ctx, store.GCConfig{Grace: 0, Hook: func(step string) error {
		if step != "doomed" {
			return nil
		}
		checked = true
		r := e.postXorb(alice, a.body, a.xorb.Hash)
		wantError(t, r, 503, "unavailable")
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("the pass condemned nothing")
	}
	e.uploadHub(alice, a)
}

// TestCollectorLoop: serve's loop runs a pass every interval, and within a
// minute of a deletion made by any process.
func TestCollectorLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := store.Open(context.Background(), store.DirConfig(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		cfg := testConfig()
		cfg.GCInterval, cfg.GCGrace = time.Hour, 0
		srv, err := New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.gc.loop(ctx, cfg.GCInterval); close(done) }()
		passes := func() float64 {
			var m dto.Metric
			srv.gc.passes.WithLabelValues("ok").Write(&m)
			return m.GetCounter().GetValue()
		}

		time.Sleep(59 * time.Minute)
		synctest.Wait()
		if passes() != 0 {
			t.Fatalf("%v passes before the interval", passes())
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if passes() != 1 {
			t.Fatalf("%v passes after one interval", passes())
		}
		// A file released (by any process) brings a pass within a minute.
		f := newHubFile(9)
		if _, err := st.PutXorb(ctx, "alice", f.xorb, f.body[:f.xorb.StreamLen], store.Unlimited); err != nil {
			t.Fatal(err)
		}
		sh := &xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(f.xorb)}}
		if _, err := st.PutShard(ctx, "alice", sh.MarshalUpload(), sh); err != nil {
			t.Fatal(err)
		}
		if err := st.ReleaseFile(ctx, "alice", f.info.Hash); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if passes() != 2 {
			t.Fatalf("%v passes a minute after a release", passes())
		}
		if u, _ := st.Usage(ctx, "alice"); u != 0 {
			t.Fatalf("usage %d", u)
		}
		cancel()
		<-done
	})
}
