package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/admin"
	"openxet/budget"
	"openxet/limits"
	"openxet/xet"
)

// The anonymous pool's own limits (limits.anonymous_*, docs/sharing.md),
// each exceeded through the whole server: readers are told apart by
// X-Forwarded-For from a trusted proxy (the test client's 127.0.0.1), the
// rates run on an injected clock, and the in-flight caps are filled by
// requests waiting for memory the test holds.

// anonymousLimitsEnv is newSharingEnv with anonymous reads on, the given
// anonymous limits and memory, and 127.0.0.1 trusted as a proxy.
func anonymousLimitsEnv(t *testing.T, a limits.Anonymous, memoryWait time.Duration) *sharingEnv {
	return newSharingEnv(t, true, func(c *Config) {
		c.AnonymousReads = true
		c.Anonymous = a
		c.AnonymousMemoryShare = 0.25
		c.Budget.Wait = memoryWait
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.AuthFailuresPerMinute = 100_000
	})
}

// anonFrom is an anonymous request from client address ip.
func (e *sharingEnv) anonFrom(ip, method, path string) response {
	return e.do(method, path, "", nil, "X-Forwarded-For: "+ip)
}

// wantRateRefusal checks a 429 of the named limit: Retry-After, the
// RateLimit headers and the body's limit field.
func wantRateRefusal(t *testing.T, step string, r response, limit, retryAfter, policy, rateLimit string) {
	t.Helper()
	if r.Status != 429 {
		t.Fatalf("%s: status %d, want 429 (%s)", step, r.Status, r.Body)
	}
	m := r.json(t)
	if m["limit"] != limit || m["code"] != "rate_limited" || m["hint"] == "" || r.Header.Get("X-Error-Code") != "rate_limited" {
		t.Errorf("%s: body %s, X-Error-Code %q; want limit %s", step, r.Body, r.Header.Get("X-Error-Code"), limit)
	}
	if got := r.Header.Get("Retry-After"); got != retryAfter {
		t.Errorf("%s: Retry-After %q, want %q", step, got, retryAfter)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != policy {
		t.Errorf("%s: RateLimit-Policy %q, want %q", step, got, policy)
	}
	if rateLimit != "" && r.Header.Get("RateLimit") != rateLimit {
		t.Errorf("%s: RateLimit %q, want %q", step, r.Header.Get("RateLimit"), rateLimit)
	}
}

// TestAnonymousRates: one address is held to its own rate, all addresses
// together to the pool's, each refusal a 429 naming its limit with the
// exact Retry-After; a refusal by one spends nothing of the other (the
// pool's burst serves exactly its size across addresses, an address
// refused by the pool still has its own allowance after the pool
// refills); and tenant alice reads at every step.
func TestAnonymousRates(t *testing.T) {
	e := anonymousLimitsEnv(t, limits.Anonymous{
		AddressRate: limits.Rate{PerSecond: 0.5, Burst: 2}, AddressMaxInFlight: 10,
		PoolRate: limits.Rate{PerSecond: 1, Burst: 5}, PoolMaxInFlight: 10,
	}, time.Second)
	info := "/api/models/alice/pub"
	honest := func(step string) {
		t.Helper()
		if r := e.do("GET", info, e.alice, nil); r.Status != 200 {
			t.Fatalf("%s: alice refused: %d %s", step, r.Status, r.Body)
		}
		if r := e.do("GET", "/alice/pub/resolve/main/weights.bin", e.bobRead, nil); r.Status != 200 {
			t.Fatalf("%s: bob refused on alice's public repo: %d %s", step, r.Status, r.Body)
		}
	}
	ok := func(step, ip string) {
		t.Helper()
		if r := e.anonFrom(ip, "GET", info); r.Status != 200 {
			t.Fatalf("%s: %s: %d %s", step, ip, r.Status, r.Body)
		}
	}
	ok("address burst 1", "10.0.0.1")
	ok("address burst 2", "10.0.0.1")
	for i := 0; i < 3; i++ {
		wantRateRefusal(t, "over the address rate", e.anonFrom("10.0.0.1", "GET", info),
			limitAnonymousAddress, "2", `"anonymous_address";q=2;w=4`, `"anonymous_address";r=0;t=2`)
	}
	honest("address refused")
	// The pool spent 2 of its 5: the three refusals took none of it.
	ok("pool 3", "10.0.0.2")
	ok("pool 4", "10.0.0.2")
	ok("pool 5", "10.0.0.3")
	r := e.anonFrom("10.0.0.4", "GET", info)
	wantRateRefusal(t, "over the pool rate", r, limitAnonymousPool, "1", `"anonymous_pool";q=5;w=5`, `"anonymous_pool";r=0;t=1`)
	if r.json(t)["message"] != "anonymous pool rate limit reached" {
		t.Errorf("pool refusal text: %s", r.Body)
	}
	honest("pool refused")
	// A moment before the Retry-After the pool still refuses; at it, the
	// address the pool refused has its whole burst.
	e.clock.Add(time.Second - time.Millisecond)
	wantRateRefusal(t, "pool before its Retry-After", e.anonFrom("10.0.0.4", "GET", info), limitAnonymousPool, "1", `"anonymous_pool";q=5;w=5`, "")
	e.clock.Add(time.Millisecond)
	ok("pool at its Retry-After", "10.0.0.4")
	e.clock.Add(time.Second)
	ok("address after the pool's refusals", "10.0.0.4")
	if n := e.srv.gate.Refusals.Load(limits.LimitTenant); n != 2 {
		t.Errorf("pool refusals counted: %d, want 2", n)
	}
	if used := e.usageOf("alice"); used == 0 {
		t.Errorf("alice's usage lost")
	}
}

// holdPoolMemory reserves the anonymous pool's whole memory share, so that
// every anonymous request that needs memory waits; the returned function
// gives it back.
func (e *sharingEnv) holdPoolMemory() func() {
	e.t.Helper()
	pool := e.srv.budget.Stats().TotalBytes / 4 // AnonymousMemoryShare 0.25
	res, err := e.srv.budget.Reserve(context.Background(), budget.Key{Credential: "anonymous holder", Tenant: anonymousTenant}, pool)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Release
}

// TestAnonymousInFlight: with the pool's memory held, anonymous downloads
// wait for memory, in flight; one more from a waiting address is refused by
// the address's in-flight cap, one from a new address by the pool's, both
// at once with Retry-After 1, while alice and bob download the same file.
// Once the memory is back the waiting downloads finish whole and nothing
// stays counted.
func TestAnonymousInFlight(t *testing.T) {
	e := anonymousLimitsEnv(t, limits.Anonymous{
		AddressRate: limits.Rate{PerSecond: 1000, Burst: 1000}, AddressMaxInFlight: 1,
		PoolRate: limits.Rate{PerSecond: 1000, Burst: 1000}, PoolMaxInFlight: 2,
	}, time.Minute)
	file := "/alice/pub/resolve/main/weights.bin"
	want := e.do("GET", file, e.alice, nil)
	release := e.holdPoolMemory()
	var wg sync.WaitGroup
	got := make([]response, 2)
	for i, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		wg.Go(func() { got[i] = e.anonFrom(ip, "GET", file) })
	}
	waitFor(t, "two anonymous downloads waiting for memory", func() bool { return e.srv.budget.Stats().Waiting == 2 })
	wantRateRefusal(t, "a second download of one address", e.anonFrom("10.0.0.1", "GET", file),
		limitAnonymousAddressInFlight, "1", `"anonymous_address_in_flight";q=1;qu="concurrent-requests"`, "")
	wantRateRefusal(t, "a third download of the pool", e.anonFrom("10.0.0.3", "GET", file),
		limitAnonymousPoolInFlight, "1", `"anonymous_pool_in_flight";q=2;qu="concurrent-requests"`, "")
	for _, tok := range []string{e.alice, e.bobRead} {
		if r := e.do("GET", file, tok, nil); r.Status != 200 || !bytes.Equal(r.Body, want.Body) {
			t.Errorf("a tenant's download beside the full pool: %d, %d bytes", r.Status, len(r.Body))
		}
	}
	release()
	wg.Wait()
	for i, r := range got {
		if r.Status != 200 || !bytes.Equal(r.Body, want.Body) {
			t.Errorf("waiting download %d: %d, %d bytes, want %d", i, r.Status, len(r.Body), len(want.Body))
		}
	}
	e.handlers.waitIdle()
	if n := e.srv.gate.TenantInFlight.Count(anonymousTenant); n != 0 {
		t.Errorf("%d anonymous requests counted in flight after all ended", n)
	}
	if r := e.anonFrom("10.0.0.3", "GET", file); r.Status != 200 {
		t.Errorf("after the downloads ended: %d %s", r.Status, r.Body)
	}
}

// TestClientGoneIsNotAnInternalError: an anonymous download the client
// cancels while it waits for the pool's memory ends the handler with the
// request's context error, which the log shows at debug level as the
// client's doing, never as an internal error (a load run's cancelled
// downloads filled the log with "internal error … context canceled").
func TestClientGoneIsNotAnInternalError(t *testing.T) {
	logs := &lockedBuffer{}
	e := anonymousLimitsEnv(t, limits.Anonymous{
		AddressRate: limits.Rate{PerSecond: 1000, Burst: 1000}, AddressMaxInFlight: 4,
		PoolRate: limits.Rate{PerSecond: 1000, Burst: 1000}, PoolMaxInFlight: 8,
	}, time.Minute)
	e.srv.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer e.holdPoolMemory()()
	file := "/alice/pub/resolve/main/weights.bin"
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.http.URL+file, nil)
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the download waiting for memory", func() bool { return e.srv.budget.Stats().Waiting == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled download: %v", err)
	}
	e.handlers.waitIdle()
	out := logs.String()
	if strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, "request ended by the client") {
		t.Errorf("log of a download its client cancelled:\n%s", out)
	}
}

// TestAnonymousMemoryShare: with the pool's share of the memory budget
// held, an anonymous download waits server.memory_wait and is refused 503
// memory_busy naming the tenant share, Retry-After 1, and leaves the
// budget as it was; alice and bob, whose shares are their own, download
// the file meanwhile.
func TestAnonymousMemoryShare(t *testing.T) {
	e := anonymousLimitsEnv(t, limits.DefaultAnonymous(), 50*time.Millisecond)
	file := "/alice/pub/resolve/main/weights.bin"
	want := e.do("GET", file, e.alice, nil)
	if got := e.srv.budget.Stats(); got.TotalBytes != 1<<30 {
		t.Fatalf("budget %d", got.TotalBytes)
	}
	release := e.holdPoolMemory()
	defer release()
	e.handlers.waitIdle()
	before := e.srv.budget.Stats().ReservedBytes
	r := e.anonFrom("10.0.0.1", "GET", file)
	if r.Status != 503 || r.Header.Get("Retry-After") != "1" || r.Header.Get("X-Error-Code") != "memory_busy" {
		t.Fatalf("anonymous download with the pool's memory held: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if m := r.json(t); m["share"] != budget.ShareTenant || m["code"] != "memory_busy" {
		t.Errorf("body %s, want share %s", r.Body, budget.ShareTenant)
	}
	for _, tok := range []string{e.alice, e.bobRead} {
		if r := e.do("GET", file, tok, nil); r.Status != 200 || !bytes.Equal(r.Body, want.Body) {
			t.Errorf("a tenant's download beside the pool's held memory: %d, %d bytes", r.Status, len(r.Body))
		}
	}
	e.handlers.waitIdle()
	if after := e.srv.budget.Stats().ReservedBytes; after != before {
		t.Errorf("reserved %d bytes after the refusal, %d before", after, before)
	}
	// A reservation larger than the pool's share could ever hold is
	// refused at once, never waited for.
	if _, err := e.srv.budget.Reserve(context.Background(), budget.Key{Credential: "x", Tenant: anonymousTenant}, e.srv.budget.Stats().TotalBytes/4+1); err == nil {
		t.Errorf("a reservation over the pool's share was granted")
	}
}

// TestSharingXetReadsAndMemoryCountAgainstTheReader: bob's reconstruction
// of alice's public file with the CAS token of her repo spends bob's rate
// and its refusal names bob's tenant limit; with bob's tenant memory share
// held, bob's download of alice's file is refused 503 memory_busy for the
// tenant share while alice downloads it at the same moment.
func TestSharingXetReadsAndMemoryCountAgainstTheReader(t *testing.T) {
	e := newSharingEnv(t, true, func(c *Config) { c.Budget.Wait = 50 * time.Millisecond })
	e.putLimits("bob", map[string]any{"tenant_requests_per_second": 0.5, "tenant_burst": 2})
	e.clock.Add(time.Minute) // what bob spent before the override has refilled
	pubTok := e.casTokenOf(e.readToken(e.bobRead, "pub"))
	if r := e.reconstruct(pubTok, e.files["pub"]); r.Status != 200 {
		t.Fatalf("bob's first reconstruction: %d %s", r.Status, r.Body)
	}
	r := e.reconstruct(pubTok, e.files["pub"])
	wantError(t, r, 429, "rate_limited")
	if r.json(t)["limit"] != "tenant" || r.Header.Get("Retry-After") != "2" {
		t.Errorf("bob's second reconstruction: %v %s", r.Header, r.Body)
	}
	if r := e.reconstruct(e.alice, e.files["pub"]); r.Status != 200 {
		t.Errorf("alice refused on her own file after bob's reads: %d %s", r.Status, r.Body)
	}
	e.putLimits("bob", map[string]any{"tenant_requests_per_second": 2000, "tenant_burst": 4000})
	e.clock.Add(time.Minute)

	share := e.srv.budget.Stats().TenantBytes
	var held []budget.Reservation
	for i := int64(0); i < 2; i++ { // a credential holds at most half a tenant's share
		res, err := e.srv.budget.Reserve(context.Background(), budget.Key{Credential: "bob holder " + string(rune('a'+i)), Tenant: "bob"}, share/2)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, res)
	}
	defer func() {
		for i := range held {
			held[i].Release()
		}
	}()
	file := "/alice/pub/resolve/main/weights.bin"
	r = e.do("GET", file, e.bobRead, nil)
	if r.Status != 503 || r.Header.Get("X-Error-Code") != "memory_busy" || r.Header.Get("Retry-After") != "1" || r.json(t)["share"] != budget.ShareTenant {
		t.Fatalf("bob's download with bob's memory share held: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r := e.do("GET", file, e.alice, nil); r.Status != 200 || int64(len(r.Body)) != e.files["pub"].size {
		t.Errorf("alice's download beside bob's held share: %d, %d bytes", r.Status, len(r.Body))
	}
	if used := e.usageOf("bob"); used != 0 {
		t.Errorf("bob's usage after reading alice's repo: %d bytes, want 0", used)
	}
}

// TestSharingDedupCharges is the example of docs/sharing.md ("Quota and
// dedup"): bob uploads into a repo of his own the same bytes alice's
// public model holds. With server.dedup_scope global his dedup query finds
// her chunk and his shard references her xorb without uploading it: he is
// charged nothing, and nothing new is stored. With tenant, the query and
// the xorb HEAD find nothing, his shard cannot reference her xorb, and he
// uploads it and is charged its stored size, while the bucket keeps one
// copy. Alice's usage never changes.
func TestSharingDedupCharges(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run(scope, func(t *testing.T) {
			e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = scope })
			f := e.files["pub"]
			aliceBefore, xorbsBefore := e.usageOf("alice"), countPrefix(e.snapshot().Objects, "xorbs/")
			dedup := e.do("GET", "/v1/chunks/default/"+f.xorb.Chunks[0].Hash.String(), e.bob, nil)
			head := e.do("HEAD", "/v1/xorbs/default/"+f.xorb.Hash.String(), e.bob, nil)
			sh := (&xet.Shard{Files: []xet.FileInfo{f.info}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(f.xorb)}}).MarshalUpload()
			switch scope {
			case "global":
				if dedup.Status != 200 || head.Status != 200 {
					t.Fatalf("dedup query %d, xorb HEAD %d; want both 200", dedup.Status, head.Status)
				}
				if r := e.do("POST", "/v1/shards", e.bob, sh); r.Status != 200 {
					t.Fatalf("bob's shard referencing alice's xorb: %d %s", r.Status, r.Body)
				}
				if got := e.usageOf("bob"); got != 0 {
					t.Errorf("bob charged %d bytes for a file whose xorb alice stored, want 0", got)
				}
			case "tenant":
				if dedup.Status != 404 || head.Status != 404 {
					t.Fatalf("dedup query %d, xorb HEAD %d; want both 404", dedup.Status, head.Status)
				}
				if r := e.do("POST", "/v1/shards", e.bob, sh); r.Status == 200 {
					t.Fatalf("bob's shard referencing a xorb he does not own was accepted")
				}
				if got := e.usageOf("bob"); got != 0 {
					t.Fatalf("a refused shard charged bob %d bytes", got)
				}
				e.uploadHub(e.bob, f)
				if got := e.usageOf("bob"); got != f.xorb.StreamLen {
					t.Errorf("bob charged %d bytes after uploading the xorb, want its stored size %d", got, f.xorb.StreamLen)
				}
			}
			if got := e.usageOf("alice"); got != aliceBefore {
				t.Errorf("alice's usage went from %d to %d", aliceBefore, got)
			}
			// The bucket keeps one copy of the xorb: what bob adds are owner
			// records and his shard.
			if n := countPrefix(e.snapshot().Objects, "xorbs/"); n != xorbsBefore {
				t.Errorf("%d xorb objects after bob's upload, %d before", n, xorbsBefore)
			}
			// The file is bob's now: he reconstructs it with his own
			// credential.
			if r := e.reconstruct(e.bob, f); r.Status != 200 {
				t.Errorf("bob reconstructs the file he registered: %d %s", r.Status, r.Body)
			}
		})
	}
}

// countPrefix counts the keys that start with prefix.
func countPrefix(keys []string, prefix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// TestLandingListsPublicRepos: with anonymous reads on, the landing page
// lists the newest public repos of every tenant, at most 20 however many
// there are, linked to their pages and to the paged listings; never an
// internal or private one. With the setting off it lists none.
func TestLandingListsPublicRepos(t *testing.T) {
	on := newSharingEnv(t, false, func(c *Config) { c.AnonymousReads = true })
	off := newSharingEnv(t, false)
	page := func(e *sharingEnv) string {
		r := e.do("GET", "/", "", nil)
		if r.Status != 200 {
			t.Fatalf("landing: %d %s", r.Status, r.Body)
		}
		return string(r.Body)
	}
	if p := page(off); strings.Contains(p, "alice/pub") || strings.Contains(p, `id="public"`) {
		t.Errorf("the landing page lists public repos with anonymous reads off")
	}
	p := page(on)
	if !strings.Contains(p, `<a href="/alice/pub">alice/pub</a>`) || strings.Contains(p, "alice/intern") || strings.Contains(p, "alice/priv") {
		t.Fatalf("landing page's public list:\n%s", p)
	}
	if !strings.Contains(p, `href="/api/models?sort=lastModified&amp;direction=-1"`) {
		t.Errorf("no link to the paged listing")
	}
	carol := on.credential("carol", "write")
	for i := 0; i < 25; i++ {
		if r := on.do("POST", "/api/repos/create", carol, []byte(fmt.Sprintf(`{"name":"m%02d","type":"dataset","visibility":"public"}`, i))); r.Status != 200 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
	}
	p = page(on)
	if n := strings.Count(p, `<tr><td><a href=`); n != 20 {
		t.Errorf("%d public repos listed, want 20", n)
	}
	if !strings.Contains(p, `<a href="/datasets/carol/m`) || !strings.Contains(p, "(of more)") {
		t.Errorf("carol's datasets are not listed, or the page does not say there are more")
	}
	// The listing the page links to serves the rest, without a token.
	var listed []map[string]any
	json.Unmarshal(on.do("GET", "/api/datasets?sort=lastModified&direction=-1&limit=100", "", nil).Body, &listed)
	if len(listed) != 25 {
		t.Errorf("anonymous dataset listing: %d repos, want 25", len(listed))
	}
}

// TestAdminRepoVisibility: an operator reads and sets a repo's visibility
// through the admin API (package admin's client); the change applies to
// the next request of another tenant; a bad value, type or name changes
// nothing; a tenant's own credential may not use the route.
func TestAdminRepoVisibility(t *testing.T) {
	e := newSharingEnv(t, false)
	ac := admin.Client{Base: e.http.URL, Token: e.admin}
	ctx := context.Background()
	v, err := ac.RepoVisibility(ctx, "model", "alice", "priv")
	if err != nil || v != (admin.RepoVisibility{Repo: "alice/priv", Type: "model", Visibility: "private"}) {
		t.Fatalf("read: %+v %v", v, err)
	}
	wantError(t, e.do("GET", "/api/models/alice/priv", e.bob, nil), 404, "")
	if v, err = ac.SetRepoVisibility(ctx, "model", "alice", "priv", "internal"); err != nil || v.Visibility != "internal" {
		t.Fatalf("set: %+v %v", v, err)
	}
	if r := e.do("GET", "/api/models/alice/priv", e.bob, nil); r.Status != 200 {
		t.Errorf("bob after the operator made it internal: %d", r.Status)
	}
	var ae *admin.Error
	for _, c := range []struct {
		typ, name, vis string
		status         int
	}{{"model", "priv", "everyone", 400}, {"models", "priv", "public", 400}, {"model", "nothing", "public", 404}, {"dataset", "priv", "public", 404}} {
		_, err := ac.SetRepoVisibility(ctx, c.typ, "alice", c.name, c.vis)
		if !errors.As(err, &ae) || ae.Status != c.status {
			t.Errorf("%+v: %v, want %d", c, err, c.status)
		}
	}
	if v, _ := ac.RepoVisibility(ctx, "model", "alice", "priv"); v.Visibility != "internal" {
		t.Errorf("after the refused changes: %+v", v)
	}
	if r := e.do("PUT", "/api/openxet/v1/admin/repos/model/alice/priv/visibility", e.alice, []byte(`{"visibility":"public"}`)); r.Status != 403 {
		t.Errorf("alice's own credential on the admin route: %d", r.Status)
	}
	if r := e.do("PUT", "/api/openxet/v1/admin/repos/model/alice/priv/visibility", e.admin, []byte(`{"visibility":"public","x":1}`)); r.Status != 400 {
		t.Errorf("an unknown field: %d", r.Status)
	}
}

// TestSharingDedupQueryScope is the dedup row of the isolation matrix: a
// reader of alice's public repo, with the CAS token of that repo or with
// its own credential, learns of alice's chunks and xorbs (those of her
// public repo and of her private one alike) exactly what
// server.dedup_scope lets any tenant learn: everything with global,
// nothing with tenant; a reader without a token learns nothing (401) even
// with anonymous reads on. Alice always finds her own.
func TestSharingDedupQueryScope(t *testing.T) {
	for _, scope := range []string{"global", "tenant"} {
		t.Run(scope, func(t *testing.T) {
			e := newSharingEnv(t, false, func(c *Config) { c.DedupScope = scope; c.AnonymousReads = true })
			pubTok := e.casTokenOf(e.readToken(e.bobRead, "pub"))
			want := 404
			if scope == "global" {
				want = 200
			}
			for _, name := range []string{"pub", "priv"} {
				f := e.files[name]
				chunk := "/v1/chunks/default/" + f.xorb.Chunks[0].Hash.String()
				xorb := "/v1/xorbs/default/" + f.xorb.Hash.String()
				for _, tok := range []string{pubTok, e.bobRead} {
					if r := e.do("GET", chunk, tok, nil); r.Status != want {
						t.Errorf("bob's dedup query for alice/%s's chunk: %d, want %d", name, r.Status, want)
					}
					if r := e.do("HEAD", xorb, tok, nil); r.Status != want {
						t.Errorf("bob's HEAD of alice/%s's xorb: %d, want %d", name, r.Status, want)
					}
				}
				for _, rt := range []struct{ method, path string }{{"GET", chunk}, {"HEAD", xorb}} {
					if r := e.do(rt.method, rt.path, "", nil); r.Status != 401 {
						t.Errorf("anonymous %s %s: %d, want 401", rt.method, rt.path, r.Status)
					}
				}
				if r := e.do("GET", chunk, e.alice, nil); r.Status != 200 {
					t.Errorf("alice's dedup query for her own chunk: %d", r.Status)
				}
			}
		})
	}
}
