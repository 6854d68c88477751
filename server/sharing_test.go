package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"openxet/limits"
	"openxet/xet"
)

// Sharing across tenants (docs/sharing.md), over HTTP through the whole
// server: tenant bob against alice's private, internal and public repos,
// on every Hub route and the Xet read path.

// sharingEnv is alice with three model repos, each holding one Xet file at
// weights.bin: priv (no visibility asked: private), intern (internal) and
// pub (private=false: public); and a file she registered that no repo names.
type sharingEnv struct {
	*testEnv
	alice, bob, bobRead string
	files               map[string]hubFile // by repo name
	unnamed             hubFile
	clock               *fakeClock // with withClock
}

func newSharingEnv(t *testing.T, withClock bool, mutate ...func(*Config)) *sharingEnv {
	e := &sharingEnv{testEnv: newTestEnv(t, mutate...), files: map[string]hubFile{}}
	if withClock {
		e.clock = e.setClock() // before any request: the limiters' clock never runs back
	}
	e.alice = e.credential("alice", "write")
	e.bob = e.credential("bob", "write")
	e.bobRead = e.credential("bob", "read")
	bodies := map[string]string{"priv": `{"name":"priv"}`, "intern": `{"name":"intern","visibility":"internal"}`, "pub": `{"name":"pub","private":false}`}
	for i, name := range []string{"priv", "intern", "pub"} {
		if r := e.do("POST", "/api/repos/create", e.alice, []byte(bodies[name])); r.Status != 200 {
			t.Fatalf("create %s: %d %s", name, r.Status, r.Body)
		}
		f := newHubFile(uint64(100 + i))
		e.uploadHub(e.alice, f)
		if r := e.hubCommit(e.alice, "alice/"+name, "main", lfsOp("weights.bin", f)); r.Status != 200 {
			t.Fatalf("commit to %s: %d %s", name, r.Status, r.Body)
		}
		e.files[name] = f
	}
	e.unnamed = newHubFile(200)
	e.uploadHub(e.alice, e.unnamed)
	return e
}

// readToken asks the xet-read-token route of alice/name for a CAS token
// with tok.
func (e *sharingEnv) readToken(tok, name string) response {
	return e.do("GET", "/api/models/alice/"+name+"/xet-read-token/main", tok, nil)
}

func (e *sharingEnv) casTokenOf(r response) string {
	e.t.Helper()
	if r.Status != 200 {
		e.t.Fatalf("xet-read-token: %d %s", r.Status, r.Body)
	}
	tok, _ := r.json(e.t)["accessToken"].(string)
	return tok
}

// hubRoute is one Hub route against alice/{name}.
type hubRoute struct {
	method, path, body string
}

func sharingReadRoutes(name string) []hubRoute {
	api := "/api/models/alice/" + name
	return []hubRoute{
		{"GET", api, ""},
		{"GET", api + "/revision/main", ""},
		{"GET", api + "/tree/main", ""},
		{"POST", api + "/paths-info/main", `{"paths":["weights.bin"],"expand":true}`},
		{"GET", api + "/commits/main", ""},
		{"GET", api + "/refs", ""},
		{"GET", api + "/xet-read-token/main", ""},
		{"GET", "/alice/" + name + "/resolve/main/weights.bin", ""},
		{"HEAD", "/alice/" + name + "/resolve/main/weights.bin", ""},
		{"GET", "/alice/" + name + "/resolve/main/.gitattributes", ""},
		{"GET", "/alice/" + name + "/raw/main/weights.bin", ""},
		{"HEAD", "/alice/" + name + "/raw/main/.gitattributes", ""},
		{"GET", "/alice/" + name, ""},
	}
}

func sharingWriteRoutes(name string) []hubRoute {
	api := "/api/models/alice/" + name
	commit := `{"key":"header","value":{"summary":"x"}}` + "\n" + regularFileLine("evil.txt", []byte("evil")) + "\n"
	return []hubRoute{
		{"POST", api + "/commit/main", commit},
		{"POST", api + "/preupload/main", `{"files":[{"path":"a.bin","size":10,"sample":""}]}`},
		{"GET", api + "/xet-write-token/main", ""},
		{"POST", api + "/branch/dev", `{}`},
		{"DELETE", api + "/branch/main", ""},
		{"POST", api + "/tag/main", `{"tag":"v1"}`},
		{"DELETE", api + "/tag/v0", ""},
		{"POST", api + "/super-squash/main", `{"message":"gone"}`},
		{"PUT", api + "/settings", `{"visibility":"private"}`},
		{"POST", api + "/duplicate", `{"repository":"alice/copy"}`}, // into alice's namespace: a write of hers
		{"POST", "/alice/" + name + ".git/info/lfs/objects/batch", `{"operation":"upload","objects":[{"oid":"` + strings.Repeat("a", 64) + `","size":1}]}`},
		{"DELETE", "/api/repos/delete", `{"name":"` + name + `","organization":"alice"}`},
		{"POST", "/api/repos/move", `{"fromRepo":"alice/` + name + `","toRepo":"alice/moved"}`},
	}
}

// TestSharingMatrixHubRoutes: for tenant bob, alice's private repo is not
// found on every route (404, never 403); her internal and public repos
// answer every read route as they answer alice, and refuse every write
// with 403, changing nothing.
func TestSharingMatrixHubRoutes(t *testing.T) {
	e := newSharingEnv(t, false)
	heads := map[string]string{}
	for _, name := range []string{"priv", "intern", "pub"} {
		heads[name] = e.info(t, e.alice, "/api/models/alice/"+name)["sha"].(string)
	}
	for _, name := range []string{"priv", "intern", "pub"} {
		for _, tok := range []string{e.bob, e.bobRead} {
			for _, rt := range sharingReadRoutes(name) {
				r := e.do(rt.method, rt.path, tok, []byte(rt.body))
				if name == "priv" {
					if r.Status != 404 {
						t.Errorf("bob %s %s: %d, want 404 (%s)", rt.method, rt.path, r.Status, r.Body)
					}
					continue
				}
				mine := e.do(rt.method, rt.path, e.alice, []byte(rt.body))
				if r.Status != 200 || mine.Status != 200 {
					t.Errorf("%s %s: bob %d alice %d, want 200 (%s)", rt.method, rt.path, r.Status, mine.Status, r.Body)
				}
				if rt.method == "HEAD" || strings.Contains(rt.path, "token") || rt.path == "/alice/"+name {
					continue
				}
				if !bytes.Equal(r.Body, mine.Body) {
					t.Errorf("%s %s: bob reads %q, alice %q", rt.method, rt.path, r.Body, mine.Body)
				}
			}
		}
		for _, rt := range sharingWriteRoutes(name) {
			r := e.do(rt.method, rt.path, e.bob, []byte(rt.body))
			want := 403
			if name == "priv" {
				want = 404
			}
			if r.Status != want {
				t.Errorf("bob %s %s on %s: %d, want %d (%s)", rt.method, rt.path, name, r.Status, want, r.Body)
			}
		}
		info := e.info(t, e.alice, "/api/models/alice/"+name)
		if info["sha"] != heads[name] {
			t.Errorf("%s: head %v after bob's writes, want %s", name, info["sha"], heads[name])
		}
		if want := name == "priv"; info["private"] != want {
			t.Errorf("%s: private %v, want %v", name, info["private"], want)
		}
	}
	if r := e.do("GET", "/api/models/alice/copy", e.alice, nil); r.Status != 404 {
		t.Errorf("alice/copy exists after bob's refused duplicate: %d", r.Status)
	}
	// The file bob reads through resolve is alice's.
	r := e.do("GET", "/alice/pub/resolve/main/weights.bin", e.bob, nil)
	want := e.do("GET", "/alice/pub/resolve/main/weights.bin", e.alice, nil)
	if r.Status != 200 || !bytes.Equal(r.Body, want.Body) || int64(len(r.Body)) != e.files["pub"].size {
		t.Fatalf("bob's download of alice/pub: %d, %d bytes", r.Status, len(r.Body))
	}
	// Made private, every route closes at once.
	if r := e.do("PUT", "/api/models/alice/pub/settings", e.alice, []byte(`{"private":true}`)); r.Status != 200 {
		t.Fatalf("settings: %d %s", r.Status, r.Body)
	}
	for _, rt := range append(sharingReadRoutes("pub"), sharingWriteRoutes("pub")...) {
		if r := e.do(rt.method, rt.path, e.bob, []byte(rt.body)); r.Status != 404 {
			t.Errorf("bob %s %s after private: %d, want 404", rt.method, rt.path, r.Status)
		}
	}
}

// reconstruct asks for a file's reconstruction with tok.
func (e *sharingEnv) reconstruct(tok string, f hubFile) response {
	return e.do("GET", "/v1/reconstructions/"+f.info.Hash.String(), tok, nil)
}

// TestSharingXetReadPath: a read token minted for a Shared repo of another
// tenant reconstructs the files that repo's revisions reference, and no
// other file of the owner; bob's own credentials reconstruct none of
// alice's files by hash; once the repo is private again, or the file no
// longer in any of its revisions, the same token and the fetch URLs it was
// given are refused.
func TestSharingXetReadPath(t *testing.T) {
	e := newSharingEnv(t, false)
	wantError(t, e.readToken(e.bob, "priv"), 404, "not_found")
	pubTok := e.casTokenOf(e.readToken(e.bobRead, "pub"))
	internTok := e.casTokenOf(e.readToken(e.bob, "intern"))

	r := e.reconstruct(pubTok, e.files["pub"])
	if r.Status != 200 {
		t.Fatalf("bob reconstructs alice/pub's file: %d %s", r.Status, r.Body)
	}
	if got := e.assemble(r.Body); int64(len(got)) != e.files["pub"].size {
		t.Fatalf("assembled %d bytes, want %d", len(got), e.files["pub"].size)
	}
	if r := e.reconstruct(internTok, e.files["intern"]); r.Status != 200 {
		t.Fatalf("bob reconstructs alice/intern's file: %d %s", r.Status, r.Body)
	}
	// A hash learned from alice/pub opens nothing else of alice's: not her
	// private repo's file, not a file no repo names, not through bob's own
	// credential, not the internal repo's file through the public repo's
	// token.
	for _, c := range []struct {
		tok  string
		file hubFile
	}{
		{pubTok, e.files["priv"]}, {pubTok, e.unnamed}, {pubTok, e.files["intern"]}, {internTok, e.files["pub"]},
		{e.bob, e.files["pub"]}, {e.bobRead, e.files["pub"]}, {e.bob, e.files["priv"]},
	} {
		for _, path := range []string{"/v1/reconstructions/", "/v2/reconstructions/", "/reconstructions/"} {
			wantError(t, e.do("GET", path+c.file.info.Hash.String(), c.tok, nil), 404, "not_found")
		}
	}
	// The token reads; it does not write, neither to alice nor to bob.
	x, _ := xet.BuildXorb(randomChunks(300, 2, 1000), false)
	if r := e.postXorb(pubTok, x, hashOf(x)); r.Status != 403 && r.Status != 401 {
		t.Errorf("xorb upload with a shared read token: %d %s", r.Status, r.Body)
	}

	// The fetch URLs of an answer name the repo; altering it breaks the
	// signature.
	var rec reconJSON
	json.Unmarshal(r.Body, &rec)
	var fetchURL string
	for _, fis := range rec.FetchInfo {
		fetchURL = fis[0].URL
	}
	if !strings.Contains(fetchURL, "&p=model%2Falice%2Fpub&") {
		t.Fatalf("fetch URL %s does not name the repo", fetchURL)
	}
	for _, alt := range []string{
		strings.Replace(fetchURL, "p=model%2Falice%2Fpub", "p=model%2Falice%2Fpriv", 1),
		strings.Replace(fetchURL, "&p=model%2Falice%2Fpub", "", 1),
	} {
		if r := e.fetch(alt, ""); r.Status != 403 {
			t.Errorf("altered fetch URL %s: %d, want 403", alt, r.Status)
		}
	}
	if r := e.fetch(fetchURL, ""); r.Status != 206 {
		t.Fatalf("fetch: %d %s", r.Status, r.Body)
	}

	// alice makes pub private: the token and the URLs it was given close
	// on their next use, long before they expire.
	if r := e.do("PUT", "/api/models/alice/pub/settings", e.alice, []byte(`{"visibility":"private"}`)); r.Status != 200 {
		t.Fatalf("settings: %d %s", r.Status, r.Body)
	}
	wantError(t, e.reconstruct(pubTok, e.files["pub"]), 404, "not_found")
	wantError(t, e.fetch(fetchURL, ""), 404, "not_found")
	wantError(t, e.readToken(e.bob, "pub"), 404, "not_found")
	// Public again, the same token and URL serve again (both still inside
	// their lifetime).
	if r := e.do("PUT", "/api/models/alice/pub/settings", e.alice, []byte(`{"visibility":"public"}`)); r.Status != 200 {
		t.Fatalf("settings: %d %s", r.Status, r.Body)
	}
	if r := e.reconstruct(pubTok, e.files["pub"]); r.Status != 200 {
		t.Fatalf("reconstruct after public again: %d %s", r.Status, r.Body)
	}
	// A file alice deletes from every revision is closed to the token.
	if r := e.hubCommit(e.alice, "alice/intern", "main", deleteOp("weights.bin")); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r := e.reconstruct(internTok, e.files["intern"]); r.Status != 200 {
		t.Fatalf("the file is still in an older revision: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/api/models/alice/intern/super-squash/main", e.alice, []byte(`{"message":"squash"}`)); r.Status != 200 {
		t.Fatalf("squash: %d %s", r.Status, r.Body)
	}
	wantError(t, e.reconstruct(internTok, e.files["intern"]), 404, "not_found")
}

// TestSharingReadsCountAgainstTheReader: bob's reads of alice's public
// repo spend bob's request rate, not alice's: with bob's tenant rate
// spent, bob is refused on alice's repo and alice is not.
func TestSharingReadsCountAgainstTheReader(t *testing.T) {
	e := newSharingEnv(t, true)
	e.putLimits("bob", map[string]any{"tenant_requests_per_second": 0.5, "tenant_burst": 2})
	var refused response
	for i := 0; i < 10 && refused.Status == 0; i++ {
		if r := e.do("GET", "/api/models/alice/pub", e.bobRead, nil); r.Status == 429 {
			refused = r
		}
	}
	if refused.Status != 429 || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("bob was never refused on alice's repo: %d %s", refused.Status, refused.Body)
	}
	for i := 0; i < 10; i++ {
		if r := e.do("GET", "/api/models/alice/pub", e.alice, nil); r.Status != 200 {
			t.Fatalf("alice refused on her own repo after bob's reads: %d %s", r.Status, r.Body)
		}
	}
	if used := e.usageOf("bob"); used != 0 {
		t.Errorf("bob's usage after reading alice's repo: %d bytes, want 0", used)
	}
}

// TestSharingSharedTokenClaims: the repo a CAS token names is signed; a
// token whose payload is edited to name another repo does not verify.
func TestSharingSharedTokenClaims(t *testing.T) {
	e := newSharingEnv(t, false)
	tok := e.casTokenOf(e.readToken(e.bobRead, "pub"))
	cl, err := e.srv.signer.parseCASToken(tok, e.srv.now())
	if err != nil || cl.Repo == nil || cl.Repo.String() != "alice/pub" || fmt.Sprint(cl.Scopes) != "[read]" || cl.Tenant != "bob" {
		t.Fatalf("claims %+v %v", cl, err)
	}
	cl.Repo.Name = "priv"
	payload, _ := json.Marshal(cl)
	_, sig, _ := strings.Cut(strings.TrimPrefix(tok, casTokenPrefix), ".")
	forged := casTokenPrefix + base64.RawURLEncoding.EncodeToString(payload) + "." + sig
	wantError(t, e.reconstruct(forged, e.files["priv"]), 401, "")
}

// info is the JSON of a Hub GET that must answer 200.
func (e *sharingEnv) info(t *testing.T, tok, path string) map[string]any {
	t.Helper()
	r := e.do("GET", path, tok, nil)
	if r.Status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	return r.json(t)
}

// TestAnonymousReadsOfPublicRepos: with hub.anonymous_reads off, a request
// without a token is refused on every route as before; on, it reads
// alice's public repo through the Hub read routes (a Xet file's bytes from
// resolve, without the Xet headers that would send it to the CAS), and
// for her internal and private repos, a repo that does not exist, every
// write, the token routes and the CAS it gets the same 401 RepoNotFound as
// without the setting. Listings show public repos only.
func TestAnonymousReadsOfPublicRepos(t *testing.T) {
	many := func(c *Config) {
		c.AuthFailuresPerMinute = 100_000 // requests without a token count as failures
		c.Anonymous = limits.Anonymous{AddressRate: limits.Rate{PerSecond: 1000, Burst: 2000}, PoolRate: limits.Rate{PerSecond: 1000, Burst: 2000}}
	}
	off := newSharingEnv(t, false, many)
	on := newSharingEnv(t, false, many, func(c *Config) { c.AnonymousReads = true })
	for _, e := range []*sharingEnv{off, on} {
		for _, name := range []string{"priv", "intern", "pub", "nothing"} {
			for _, rt := range append(sharingReadRoutes(name), sharingWriteRoutes(name)...) {
				if rt.path == "/alice/"+name {
					continue // the page: the same for every name (pages_test.go)
				}
				r := e.do(rt.method, rt.path, "", []byte(rt.body))
				readable := e == on && name == "pub" && !strings.Contains(rt.path, "token") && slicesContains(sharingReadRoutes(name), rt)
				if readable {
					if r.Status != 200 {
						t.Errorf("anonymous %s %s: %d, want 200 (%s)", rt.method, rt.path, r.Status, r.Body)
					}
					continue
				}
				if r.Status != 401 || (strings.Contains(rt.path, "/api/models/") || strings.Contains(rt.path, "/resolve/") || strings.Contains(rt.path, "/raw/")) && r.Header.Get("X-Error-Code") != "RepoNotFound" {
					t.Errorf("anonymous=%v %s %s: %d %q, want 401 RepoNotFound (%s)", e == on, rt.method, rt.path, r.Status, r.Header.Get("X-Error-Code"), r.Body)
				}
			}
		}
		for _, path := range []string{"/v1/reconstructions/" + e.files["pub"].info.Hash.String(), "/api/whoami-v2"} {
			if r := e.do("GET", path, "", nil); r.Status != 401 {
				t.Errorf("anonymous %s: %d, want 401", path, r.Status)
			}
		}
	}
	// The bytes of a Xet file, served by resolve; no Xet headers.
	got := on.do("GET", "/alice/pub/resolve/main/weights.bin", "", nil)
	want := on.do("GET", "/alice/pub/resolve/main/weights.bin", on.alice, nil)
	if got.Status != 200 || !bytes.Equal(got.Body, want.Body) || int64(len(got.Body)) != on.files["pub"].size {
		t.Fatalf("anonymous download: %d, %d bytes; alice %d, %d bytes; file %d", got.Status, len(got.Body), want.Status, len(want.Body), on.files["pub"].size)
	}
	head := on.do("HEAD", "/alice/pub/resolve/main/weights.bin", "", nil)
	if head.Header.Get("X-Xet-Hash") != "" || head.Header.Get("Link") != "" || head.Header.Get("X-Linked-Size") == "" {
		t.Errorf("anonymous HEAD headers: %v", head.Header)
	}
	for _, r := range []response{on.do("GET", "/api/models/alice/pub/tree/main", "", nil),
		on.do("POST", "/api/models/alice/pub/paths-info/main", "", []byte(`{"paths":["weights.bin"]}`))} {
		if r.Status != 200 || bytes.Contains(r.Body, []byte("xetHash")) || !bytes.Contains(r.Body, []byte("weights.bin")) {
			t.Errorf("anonymous tree or paths-info offers Xet: %d %s", r.Status, r.Body)
		}
	}
	if r := on.do("GET", "/api/models/alice/pub/tree/main", on.bob, nil); !bytes.Contains(r.Body, []byte("xetHash")) {
		t.Errorf("bob's tree lacks the Xet hash: %s", r.Body)
	}
	var listed []map[string]any
	json.Unmarshal(on.do("GET", "/api/models", "", nil).Body, &listed)
	if len(listed) != 1 || listed[0]["id"] != "alice/pub" {
		t.Errorf("anonymous listing: %v", listed)
	}
	// An Authorization header that does not verify is a failed
	// authentication, never an anonymous read.
	if r := on.do("GET", "/api/models/alice/pub", "hf_oxt_nope", nil); r.Status != 401 {
		t.Errorf("a bad token on a public repo: %d, want 401", r.Status)
	}
	// Made private, it closes to anonymous readers at once.
	if r := on.do("PUT", "/api/models/alice/pub/settings", on.alice, []byte(`{"visibility":"internal"}`)); r.Status != 200 {
		t.Fatal(r.Status)
	}
	if r := on.do("GET", "/alice/pub/resolve/main/weights.bin", "", nil); r.Status != 401 || r.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("anonymous download of an internal repo: %d", r.Status)
	}
}

// TestAnonymousReadersAreLimitedPerAddress: anonymous readers are admitted
// per client address, on limits.anonymous_requests_per_second and
// limits.anonymous_burst, and spend nothing of a tenant's; an IPv6 address
// counts by its /64.
func TestAnonymousReadersAreLimitedPerAddress(t *testing.T) {
	e := &sharingEnv{testEnv: newTestEnv(t, func(c *Config) {
		c.AnonymousReads = true
		c.Anonymous = limits.DefaultAnonymous()
		c.Anonymous.AddressRate = limits.Rate{PerSecond: 0.5, Burst: 2}
	}), files: map[string]hubFile{}}
	e.setClock()
	e.alice = e.credential("alice", "write")
	if r := e.do("POST", "/api/repos/create", e.alice, []byte(`{"name":"pub","visibility":"public"}`)); r.Status != 200 {
		t.Fatal(r.Status)
	}
	for i := 0; i < 2; i++ {
		if r := e.do("GET", "/api/models/alice/pub", "", nil); r.Status != 200 {
			t.Fatalf("anonymous read %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := e.do("GET", "/api/models/alice/pub", "", nil)
	if r.Status != 429 || r.Header.Get("Retry-After") != "2" {
		t.Fatalf("third anonymous read: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if r := e.do("GET", "/api/models/alice/pub", e.alice, nil); r.Status != 200 {
		t.Errorf("alice after the anonymous readers: %d", r.Status)
	}
	for _, c := range []struct{ ip, key string }{
		{"127.0.0.1", "127.0.0.1"}, {"::ffff:10.0.0.1", "10.0.0.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"}, {"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
	} {
		if got := anonymousKey(c.ip); got != c.key {
			t.Errorf("anonymousKey(%s) = %s, want %s", c.ip, got, c.key)
		}
	}
}

func slicesContains(rs []hubRoute, r hubRoute) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// TestDefaultVisibility: hub.default_visibility decides the visibility of
// a repo created without one; a request that names one wins.
func TestDefaultVisibility(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.DefaultVisibility = "internal" })
	alice, bob := e.credential("alice", "write"), e.credential("bob", "read")
	for _, body := range []string{`{"name":"plain"}`, `{"name":"closed","private":true}`, `{"name":"open","visibility":"public"}`} {
		if r := e.do("POST", "/api/repos/create", alice, []byte(body)); r.Status != 200 {
			t.Fatalf("%s: %d %s", body, r.Status, r.Body)
		}
	}
	for name, want := range map[string]int{"plain": 200, "closed": 404, "open": 200} {
		if r := e.do("GET", "/api/models/alice/"+name, bob, nil); r.Status != want {
			t.Errorf("bob reads alice/%s: %d, want %d", name, r.Status, want)
		}
	}
	var s map[string]any
	json.Unmarshal(e.do("PUT", "/api/models/alice/plain/settings", alice, []byte(`{"gated":false}`)).Body, &s)
	if s["visibility"] != "internal" {
		t.Errorf("alice/plain: %v", s)
	}
}
