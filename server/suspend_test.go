package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"openxet/store"
	"openxet/xet"
)

// wantSuspended checks the refusal of a suspended tenant's request: 403
// tenant_suspended naming the tenant, a hint naming `openxet limits set
// --resume`, no Retry-After (it is not temporary), and on Hub paths the
// sentence in X-Error-Message.
func wantSuspended(t *testing.T, r response, tenant string, hub bool) {
	t.Helper()
	if r.Status != 403 {
		t.Fatalf("status %d, want 403 (body %s)", r.Status, r.Body)
	}
	if r.Header.Get("Retry-After") != "" {
		t.Errorf("a suspension carries Retry-After %q; it is not temporary", r.Header.Get("Retry-After"))
	}
	if hub {
		if msg := r.Header.Get("X-Error-Message"); !strings.Contains(msg, "suspended") || !strings.Contains(msg, "--resume") {
			t.Errorf("X-Error-Message %q lacks the sentence and hint", msg)
		}
	}
	if len(r.Body) == 0 { // HEAD
		return
	}
	m := r.json(t)
	code := m["error"] // CAS routes: the code; Hub routes: the sentence, code in "code"
	if hub {
		code = m["code"]
	}
	if code != "tenant_suspended" {
		t.Fatalf("code %v, want tenant_suspended (body %s)", code, r.Body)
	}
	if msg, _ := m["message"].(string); !strings.Contains(msg, "tenant "+tenant+" is suspended") {
		t.Errorf("message %q does not name the tenant", msg)
	}
	if hint, _ := m["hint"].(string); !strings.Contains(hint, "openxet limits set") || !strings.Contains(hint, "--resume") {
		t.Errorf("hint %q does not say how to resume", hint)
	}
}

// TestSuspendedTenantIsRefused: a suspended tenant's every request is
// refused before its rate limits are consulted (so none of their allowance
// is spent) and changes nothing; other tenants go on; the admin API stays
// open to the tenant's admin credentials, so that an operator can resume
// it; resuming admits the tenant at once on the server that took the
// change.
func TestSuspendedTenantIsRefused(t *testing.T) {
	e := newTestEnv(t)
	e.setClock() // the rate limiters do not refill: spent allowance stays spent
	alice := e.credential("alice", "write")
	carolAdmin := e.credential("carol", "admin", "read")
	bob := e.credential("bob", "write")
	x1, _ := xet.BuildXorb(randomChunks(30, 2, 10_000), false)
	f := e.upload(alice, x1)
	var rec reconJSON
	json.Unmarshal(e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil).Body, &rec)
	var fetchURL string
	for _, fi := range rec.FetchInfo {
		fetchURL = fi[0].URL
	}
	if fetchURL == "" {
		t.Fatal("no fetch URL")
	}
	if r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"m","organization":"alice","type":"model"}`)); r.Status != 200 {
		t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}

	e.putLimits("alice", map[string]any{"suspended": true})
	e.putLimits("carol", map[string]any{"suspended": true})
	v := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil).json(t)
	if v["suspended"] != true || v["overrides"].(map[string]any)["suspended"] != true || v["source"].(map[string]any)["suspended"] != "override" || v["source"].(map[string]any)["quota_bytes"] != "default" {
		t.Fatalf("the limits view does not show the suspension: %v", v)
	}
	before := e.snapshot()
	big, bigInfo := xet.BuildXorb(randomChunks(31, 2, 10_000), false)
	for _, c := range []struct {
		name string
		r    response
		hub  bool
	}{
		{"reconstruction", e.probe(alice), false},
		{"xorb upload", e.postXorb(alice, big, bigInfo.Hash), false},
		{"xorb head", e.do("HEAD", "/v1/xorbs/default/"+bigInfo.Hash.String(), alice, nil), false},
		{"shard upload", e.do("POST", "/v1/shards", alice, []byte("not a shard")), false},
		{"fetch URL signed before", e.fetch(fetchURL, ""), false},
		{"repo info", e.do("GET", "/api/models/alice/m", alice, nil), true},
		{"read token", e.do("GET", "/api/models/alice/m/xet-read-token/main", alice, nil), true},
		{"resolve HEAD", e.do("HEAD", "/alice/m/resolve/main/a.txt", alice, nil), true},
	} {
		t.Run(c.name, func(t *testing.T) { wantSuspended(t, c.r, "alice", c.hub) })
	}
	wantSuspended(t, e.probe(carolAdmin), "carol", false)
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Fatalf("refused requests changed state:\n%s", diff)
	}
	if r := e.probe(bob); r.Status != 404 {
		t.Fatalf("another tenant: %d %s, want 404 (admitted)", r.Status, r.Body)
	}
	// A suspended tenant's admin credential still reaches the admin API,
	// and resumes its own tenant.
	if r := e.do("GET", "/api/openxet/v1/admin/tenants", carolAdmin, nil); r.Status != 200 {
		t.Fatalf("the suspended tenant's admin credential on the admin API: %d %s", r.Status, r.Body)
	}
	if r := e.do("PUT", "/api/openxet/v1/admin/tenants/carol/limits", carolAdmin, []byte(`{}`)); r.Status != 200 || r.json(t)["suspended"] != false {
		t.Fatalf("carol resumes carol: %d %s", r.Status, r.Body)
	}
	if r := e.probe(carolAdmin); r.Status != 404 {
		t.Fatalf("carol after resume: %d %s", r.Status, r.Body)
	}

	e.putLimits("alice", map[string]any{})
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("alice after resume: %d %s", r.Status, r.Body)
	}

	// One request a long while, burst 1, and a clock that stands still: a
	// refused request that spent it would leave none for the first
	// request after the resume.
	dave := e.credential("dave", "read")
	slow := map[string]any{"tenant_requests_per_second": 0.001, "tenant_burst": 1, "credential_requests_per_second": 0.001, "credential_burst": 1}
	suspended := map[string]any{"suspended": true}
	for k, v := range slow {
		suspended[k] = v
	}
	e.putLimits("dave", suspended)
	for range 3 {
		wantSuspended(t, e.probe(dave), "dave", false)
	}
	e.putLimits("dave", slow)
	if r := e.probe(dave); r.Status != 404 {
		t.Fatalf("dave after resume: %d %s, want 404 (admitted with the burst the refusals did not spend)", r.Status, r.Body)
	}
	wantError(t, e.probe(dave), 429, "rate_limited")
}

// TestSuspendAndResumeReachOtherServers: a server that did not take the
// change applies a suspension and a resume once its cached limits are a
// cache lifetime old, driven by its clock.
func TestSuspendAndResumeReachOtherServers(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "read")
	other, err := New(testConfig(), e.st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: e.srv.now()}
	other.effective.Now = clk.Now
	hs := httptest.NewServer(other.Handler())
	t.Cleanup(hs.Close)
	onOther := &testEnv{t: t, st: e.st, srv: other, http: hs}

	if r := onOther.probe(alice); r.Status != 404 {
		t.Fatalf("before: %d %s", r.Status, r.Body)
	}
	e.putLimits("alice", map[string]any{"suspended": true})
	wantSuspended(t, e.probe(alice), "alice", false) // at once where it was taken
	if r := onOther.probe(alice); r.Status != 404 {
		t.Fatalf("the other server within its cache lifetime: %d, want 404 (the cached limits)", r.Status)
	}
	clk.Add(DefaultLimitsCacheTTL)
	wantSuspended(t, onOther.probe(alice), "alice", false)

	e.putLimits("alice", map[string]any{})
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("resumed where it was taken: %d %s", r.Status, r.Body)
	}
	wantSuspended(t, onOther.probe(alice), "alice", false)
	clk.Add(DefaultLimitsCacheTTL)
	if r := onOther.probe(alice); r.Status != 404 {
		t.Fatalf("the other server a cache lifetime after the resume: %d %s", r.Status, r.Body)
	}
}

// TestSuspensionSurvivesReindex: the suspension is part of the tenant's
// limits record in the bucket, so an index rebuilt from the bucket alone
// still suspends the tenant and shows it.
func TestSuspensionSurvivesReindex(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	serve := func() (*testEnv, func()) {
		st, err := store.Open(ctx, store.DirConfig(dir))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(testConfig(), st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		return &testEnv{t: t, st: st, srv: srv, http: hs}, func() { hs.Close(); st.Close() }
	}
	e, stop := serve()
	e.admin = e.credential("admin", "admin")
	alice := e.credential("alice", "read")
	e.putLimits("alice", map[string]any{"suspended": true, "quota_bytes": 1 << 20})
	wantSuspended(t, e.probe(alice), "alice", false)
	stop()

	cfg := store.DirConfig(dir)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(cfg.IndexPath + suffix)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.db")); !os.IsNotExist(err) {
		t.Fatalf("the index is still there: %v", err)
	}
	if err := store.Reindex(ctx, store.ReindexConfig{IndexPath: cfg.IndexPath, BucketURL: cfg.BucketURL}); err != nil {
		t.Fatal(err)
	}

	e, stop = serve()
	defer stop()
	wantSuspended(t, e.probe(alice), "alice", false)
	v := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.credential("admin", "admin"), nil).json(t)
	if v["suspended"] != true || v["quota_bytes"] != float64(1<<20) {
		t.Fatalf("after reindex the limits view is %v", v)
	}
}
