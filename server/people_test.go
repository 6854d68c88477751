package server

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"openxet/xet"

	"openxet/store/accounts"
)

// Personal access tokens through the whole server (docs/people.md): a
// token's rights are its grant intersected with its owner's roles now, on
// every Hub route and the CAS behind it; what it may not see is not found.

// peopleEnv is organization acme (a tenant with a robot credential) with
// a private repo secret, an internal repo intern and a private repo one,
// each holding one Xet file; users pat (write member), rita (read
// member), ada (admin member) and out (no member); and their tokens.
type peopleEnv struct {
	*testEnv
	robot                          string
	patWrite, patRead, ritaWrite   string
	adaWrite, outWrite, patOneFine string
	files                          map[string]hubFile // by repo name
	clock                          *fakeClock         // with withClock
}

func newPeopleEnv(t *testing.T, withClock bool) *peopleEnv {
	e := &peopleEnv{testEnv: newTestEnv(t), files: map[string]hubFile{}}
	if withClock {
		e.clock = e.setClock() // before any request: the limiters' clock never runs back
	}
	ctx := context.Background()
	e.robot = e.credential("acme", "write")
	bodies := map[string]string{"secret": `{"name":"secret"}`, "intern": `{"name":"intern","visibility":"internal"}`, "one": `{"name":"one"}`}
	for i, name := range []string{"secret", "intern", "one"} {
		if r := e.do("POST", "/api/repos/create", e.robot, []byte(bodies[name])); r.Status != 200 {
			t.Fatalf("create %s: %d %s", name, r.Status, r.Body)
		}
		f := newHubFile(uint64(400 + i))
		e.uploadHub(e.robot, f)
		if r := e.hubCommit(e.robot, "acme/"+name, "main", lfsOp("weights.bin", f)); r.Status != 200 {
			t.Fatalf("commit to %s: %d %s", name, r.Status, r.Body)
		}
		e.files[name] = f
	}
	for user, role := range map[string]string{"pat": "write", "rita": "read", "ada": "admin", "out": ""} {
		if _, err := e.st.CreateUser(ctx, user, user+"@example.com", false); err != nil {
			t.Fatal(err)
		}
		if role != "" {
			if _, err := e.st.SetMember(ctx, "acme", user, role); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.patWrite = e.token("pat", accounts.TokenSpec{Name: "laptop", Role: accounts.RoleWrite})
	e.patRead = e.token("pat", accounts.TokenSpec{Role: accounts.RoleRead})
	e.ritaWrite = e.token("rita", accounts.TokenSpec{Role: accounts.RoleWrite})
	e.adaWrite = e.token("ada", accounts.TokenSpec{Role: accounts.RoleWrite})
	e.outWrite = e.token("out", accounts.TokenSpec{Role: accounts.RoleWrite})
	e.patOneFine = e.token("pat", accounts.TokenSpec{Name: "ci", Grants: []accounts.Grant{{Namespace: "acme", Type: "model", Name: "one", Role: accounts.RoleWrite}}})
	return e
}

func (e *peopleEnv) token(user string, spec accounts.TokenSpec) string {
	e.t.Helper()
	_, tok, err := e.st.CreateToken(context.Background(), user, spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// casToken asks repo acme/name's xet token route (read or write) with tok.
func (e *peopleEnv) casToken(tok, name, kind string) string {
	e.t.Helper()
	r := e.do("GET", "/api/models/acme/"+name+"/xet-"+kind+"-token/main", tok, nil)
	if r.Status != 200 {
		e.t.Fatalf("xet-%s-token of acme/%s: %d %s", kind, name, r.Status, r.Body)
	}
	cas, _ := r.json(e.t)["accessToken"].(string)
	return cas
}

// TestPersonalTokensOnHubRoutes: each token reads and changes what its
// grant and its owner's role allow, and the rest answers as the API
// always has: not found for what it may not see, 403 for a change to
// what it may only read; nothing changes on a refusal.
func TestPersonalTokensOnHubRoutes(t *testing.T) {
	e := newPeopleEnv(t, false)
	api := "/api/models/acme/"
	commit := func(tok, repo string) response {
		return e.commitLines(tok, repo, regularFileLine("notes.txt", []byte("by "+tok[:12])))
	}
	for _, c := range []struct {
		name, tok, repo string
		read, write     int
	}{
		{"write member", e.patWrite, "secret", 200, 200},
		{"read token of a write member", e.patRead, "secret", 200, 403},
		{"write token of a read member", e.ritaWrite, "secret", 200, 403},
		{"admin member", e.adaWrite, "secret", 200, 200},
		{"no member, private repo", e.outWrite, "secret", 404, 404},
		{"no member, internal repo", e.outWrite, "intern", 200, 403},
		{"fine-grained, its repo", e.patOneFine, "one", 200, 200},
		{"fine-grained, another private repo", e.patOneFine, "secret", 404, 404},
		{"fine-grained, an internal repo outside its list", e.patOneFine, "intern", 404, 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			if r := e.do("GET", api+c.repo, c.tok, nil); r.Status != c.read {
				t.Fatalf("read: %d %s, want %d", r.Status, r.Body, c.read)
			}
			before := e.snapshot()
			r := commit(c.tok, "acme/"+c.repo)
			if r.Status != c.write {
				t.Fatalf("commit: %d %s, want %d", r.Status, r.Body, c.write)
			}
			if c.write == 404 && !strings.Contains(string(r.Body), "RepoNotFound") && r.Header.Get("X-Error-Code") != "RepoNotFound" {
				t.Errorf("404 without RepoNotFound: %v %s", r.Header, r.Body)
			}
			if c.write != 200 {
				if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
					t.Fatal("a refused commit changed the bucket")
				}
			}
		})
	}
	// The commits name who made them: the user of a personal token, the
	// namespace for a robot credential.
	var commits []struct{ Authors []map[string]any }
	if r := e.do("GET", api+"secret/commits/main", e.patRead, nil); r.Status != 200 || json.Unmarshal(r.Body, &commits) != nil || len(commits) < 3 {
		t.Fatalf("commits: %d %s", r.Status, r.Body)
	}
	if a, b := commits[0].Authors[0]["user"], commits[len(commits)-1].Authors[0]["user"]; a != "ada" || b != "acme" {
		t.Errorf("authors of the newest and the first commit: %v, %v; want ada (the last to commit), acme", a, b)
	}
	// Settings are the admin role's (a robot credential's write scope).
	settings := []byte(`{"visibility":"internal"}`)
	wantError(t, e.do("PUT", api+"secret/settings", e.patWrite, settings), 403, "forbidden")
	if r := e.do("PUT", api+"secret/settings", e.adaWrite, settings); r.Status != 200 {
		t.Fatalf("admin changes settings: %d %s", r.Status, r.Body)
	}
	if r := e.do("PUT", api+"secret/settings", e.robot, []byte(`{"visibility":"private"}`)); r.Status != 200 {
		t.Fatalf("robot changes settings: %d %s", r.Status, r.Body)
	}
	// Deletion too: a write member may not delete, an outsider learns
	// nothing.
	del := []byte(`{"name":"one","organization":"acme","type":"model"}`)
	wantError(t, e.do("DELETE", "/api/repos/delete", e.patWrite, del), 403, "forbidden")
	wantError(t, e.do("DELETE", "/api/repos/delete", e.outWrite, []byte(`{"name":"secret","organization":"acme"}`)), 404, "not_found")
}

// TestPersonalTokensCreateAndList: create_repo(organization=…) takes a
// writing member and no one else; without an organization the repo is the
// user's own. Listings show what each may read; whoami-v2 names the user,
// their organizations with their roles and the token's role.
func TestPersonalTokensCreateAndList(t *testing.T) {
	e := newPeopleEnv(t, false)
	create := func(tok, body string) response { return e.do("POST", "/api/repos/create", tok, []byte(body)) }
	if r := create(e.patWrite, `{"name":"new","organization":"acme"}`); r.Status != 200 {
		t.Fatalf("member creates in acme: %d %s", r.Status, r.Body)
	}
	if r := create(e.patWrite, `{"name":"mine"}`); r.Status != 200 || r.json(t)["id"] != "pat/mine" {
		t.Fatalf("create in own namespace: %d %s", r.Status, r.Body)
	}
	for _, tok := range []string{e.ritaWrite, e.outWrite, e.patRead, e.patOneFine} {
		before := e.snapshot()
		wantError(t, create(tok, `{"name":"nope","organization":"acme"}`), 403, "forbidden")
		if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
			t.Fatal("a refused create changed the bucket")
		}
	}
	// The fine-grained token reaches nothing of its owner's own either.
	if r := e.do("GET", "/api/models/pat/mine", e.patOneFine, nil); r.Status != 404 {
		t.Fatalf("fine-grained token on its owner's repo: %d", r.Status)
	}
	ids := func(tok, query string) []string {
		r := e.do("GET", "/api/models"+query, tok, nil)
		var got []map[string]any
		if err := json.Unmarshal(r.Body, &got); r.Status != 200 || err != nil {
			t.Fatalf("list%s: %d %s", query, r.Status, r.Body)
		}
		var out []string
		for _, m := range got {
			out = append(out, m["id"].(string))
		}
		slices.Sort(out)
		return out
	}
	if got, want := ids(e.patWrite, "?author=acme"), []string{"acme/intern", "acme/new", "acme/one", "acme/secret"}; !slices.Equal(got, want) {
		t.Errorf("pat lists acme: %v, want %v", got, want)
	}
	if got, want := ids(e.outWrite, "?author=acme"), []string{"acme/intern"}; !slices.Equal(got, want) {
		t.Errorf("out lists acme: %v, want %v", got, want)
	}
	if got := ids(e.patWrite, ""); !slices.Contains(got, "pat/mine") || !slices.Contains(got, "acme/secret") {
		t.Errorf("pat lists %v", got)
	}
	if got := ids(e.patOneFine, ""); len(got) != 0 {
		t.Errorf("the fine-grained token lists %v (no public repo, no namespace grant)", got)
	}

	members := func(tok, org string) response { return e.do("GET", "/api/organizations/"+org+"/members", tok, nil) }
	for _, tok := range []string{e.ritaWrite, e.robot} {
		var ms []map[string]any
		if r := members(tok, "acme"); r.Status != 200 || json.Unmarshal(r.Body, &ms) != nil || len(ms) != 3 {
			t.Fatalf("members of acme: %d %s", r.Status, r.Body)
		}
		for _, m := range ms {
			if want := map[string]string{"pat": "write", "rita": "read", "ada": "admin"}[m["user"].(string)]; m["role"] != want {
				t.Errorf("member %v, want role %q", m, want)
			}
		}
	}
	// To one who is not a member, a real organization and no organization
	// answer alike.
	a, b := members(e.outWrite, "acme"), members(e.outWrite, "nosuchorg")
	wantError(t, a, 404, "not_found")
	wantError(t, b, 404, "not_found")
	if strings.ReplaceAll(string(a.Body), "acme", "X")[:60] != strings.ReplaceAll(string(b.Body), "nosuchorg", "X")[:60] {
		t.Errorf("the answers differ: %s / %s", a.Body, b.Body)
	}
	who := e.do("GET", "/api/whoami-v2", e.patWrite, nil).json(t)
	orgs, _ := who["orgs"].([]any)
	if who["type"] != "user" || who["name"] != "pat" || who["email"] != "pat@example.com" || len(orgs) != 1 {
		t.Fatalf("whoami: %v", who)
	}
	if o := orgs[0].(map[string]any); o["name"] != "acme" || o["roleInOrg"] != "write" {
		t.Errorf("whoami orgs: %v", orgs)
	}
	tok := who["auth"].(map[string]any)["accessToken"].(map[string]any)
	if tok["role"] != "write" || tok["displayName"] != "laptop" {
		t.Errorf("whoami token: %v", tok)
	}
	fine := e.do("GET", "/api/whoami-v2", e.patOneFine, nil).json(t)["auth"].(map[string]any)["accessToken"].(map[string]any)
	scoped, _ := fine["fineGrained"].(map[string]any)["scoped"].([]any)
	if fine["role"] != "fineGrained" || len(scoped) != 1 ||
		scoped[0].(map[string]any)["entity"].(map[string]any)["name"] != "acme/one" {
		t.Errorf("whoami of a fine-grained token: %v", fine)
	}
}

// TestPersonalTokensThroughTheCAS: a member's write token uploads into
// the organization's CAS and its bytes are charged to the organization; a
// token bound to one repo reconstructs only what that repo references and
// registers only files that prove their chunks; a member's token reads
// nothing of another organization by hash.
func TestPersonalTokensThroughTheCAS(t *testing.T) {
	e := newPeopleEnv(t, false)
	cas := e.casToken(e.patWrite, "secret", "write")
	f := newHubFile(500)
	acmeBefore, patBefore := e.usageOf("acme"), e.usageOf("pat")
	e.uploadHub(cas, f)
	if r := e.hubCommit(e.patWrite, "acme/secret", "main", lfsOp("pat.bin", f)); r.Status != 200 {
		t.Fatalf("commit of pat's upload: %d %s", r.Status, r.Body)
	}
	if got := e.usageOf("acme") - acmeBefore; got <= 0 {
		t.Errorf("acme charged %d bytes for pat's upload", got)
	}
	if got := e.usageOf("pat") - patBefore; got != 0 {
		t.Errorf("pat's own namespace charged %d bytes for an upload into acme", got)
	}
	read := e.casToken(e.patRead, "secret", "read")
	if r := e.do("GET", "/v1/reconstructions/"+f.info.Hash.String(), read, nil); r.Status != 200 {
		t.Fatalf("reconstruct with a member's read token: %d %s", r.Status, r.Body)
	}

	oneRead := e.casToken(e.patOneFine, "one", "read")
	if r := e.do("GET", "/v1/reconstructions/"+e.files["one"].info.Hash.String(), oneRead, nil); r.Status != 200 {
		t.Fatalf("the bound token reconstructs its repo's file: %d %s", r.Status, r.Body)
	}
	for _, h := range []xet.Hash{e.files["secret"].info.Hash, e.files["intern"].info.Hash, f.info.Hash} {
		wantError(t, e.do("GET", "/v1/reconstructions/"+h.String(), oneRead, nil), 404, "not_found")
	}
	oneWrite := e.casToken(e.patOneFine, "one", "write")
	g := newHubFile(501)
	if r := e.postXorb(oneWrite, g.body, g.xorb.Hash); r.Status != 200 {
		t.Fatalf("xorb with the bound token: %d %s", r.Status, r.Body)
	}
	bare := g.info
	bare.Verification, bare.Flags = nil, bare.Flags&^xet.FileFlagVerification
	before := e.snapshot()
	sh := &xet.Shard{Files: []xet.FileInfo{bare}, Xorbs: []xet.CASInfo{xet.CASInfoFromXorb(g.xorb)}}
	wantError(t, e.do("POST", "/v1/shards", oneWrite, sh.MarshalUpload()), 400, "invalid_shard")
	if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
		t.Fatal("a refused shard changed the bucket")
	}
	sh.Files[0] = g.info
	if r := e.do("POST", "/v1/shards", oneWrite, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("shard with verification entries: %d %s", r.Status, r.Body)
	}
	// Sent to the CAS itself, a token acts in its owner's namespace, and
	// only if its grant reaches it there.
	own := newHubFile(503)
	e.uploadHub(e.patWrite, own)
	if r := e.do("GET", "/v1/reconstructions/"+own.info.Hash.String(), e.patRead, nil); r.Status != 200 {
		t.Fatalf("pat's read token on pat's own file: %d %s", r.Status, r.Body)
	}
	before = e.snapshot()
	wantError(t, e.do("GET", "/v1/reconstructions/"+own.info.Hash.String(), e.patOneFine, nil), 403, "forbidden")
	wantError(t, e.postXorb(e.patOneFine, g.body, g.xorb.Hash), 403, "forbidden")
	wantError(t, e.postXorb(e.patRead, g.body, g.xorb.Hash), 403, "forbidden")
	wantError(t, e.do("DELETE", "/api/openxet/v1/files/"+own.info.Hash.String(), e.patOneFine, nil), 403, "forbidden")
	if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
		t.Fatal("a refused CAS request changed the bucket")
	}
	// A CAS token may not be taken to the Hub routes for more than it was
	// handed out for.
	wantError(t, e.do("GET", "/api/models/acme/secret", oneRead, nil), 404, "not_found")

	// Another organization's private file, by hash, to pat's tokens.
	other := e.credential("zeta", "write")
	z := newHubFile(502)
	e.uploadHub(other, z)
	for _, tok := range []string{e.patWrite, cas, read} {
		wantError(t, e.do("GET", "/v1/reconstructions/"+z.info.Hash.String(), tok, nil), 404, "not_found")
	}
}

// TestPersonalTokensFollowTheirOwner: removing a member, suspending,
// deleting a user or revoking a token closes every token and CAS token of
// theirs within the cache bound (LimitsCacheTTL), on this node and any.
func TestPersonalTokensFollowTheirOwner(t *testing.T) {
	e := newPeopleEnv(t, true)
	clk := e.clock
	ctx := context.Background()
	secret := "/api/models/acme/secret"
	cas := e.casToken(e.patWrite, "secret", "read")
	recon := "/v1/reconstructions/" + e.files["secret"].info.Hash.String()
	for _, p := range []string{secret} {
		if r := e.do("GET", p, e.patWrite, nil); r.Status != 200 {
			t.Fatalf("before: %d", r.Status)
		}
	}
	if r := e.do("GET", recon, cas, nil); r.Status != 200 {
		t.Fatalf("before: %d %s", r.Status, r.Body)
	}
	if err := e.st.RemoveMember(ctx, "acme", "pat"); err != nil {
		t.Fatal(err)
	}
	clk.Add(DefaultLimitsCacheTTL + time.Second)
	wantError(t, e.do("GET", secret, e.patWrite, nil), 404, "not_found")
	wantError(t, e.do("GET", recon, cas, nil), 401, "unauthorized")

	// rita: suspended, then resumed; out's token, its owner deleted.
	if r := e.do("GET", secret, e.ritaWrite, nil); r.Status != 200 {
		t.Fatalf("rita before: %d", r.Status)
	}
	if _, err := e.st.SuspendUser(ctx, "rita"); err != nil {
		t.Fatal(err)
	}
	clk.Add(DefaultLimitsCacheTTL + time.Second)
	wantError(t, e.do("GET", secret, e.ritaWrite, nil), 401, "unauthorized")
	wantError(t, e.do("GET", "/api/whoami-v2", e.ritaWrite, nil), 401, "unauthorized")
	if _, err := e.st.ResumeUser(ctx, "rita"); err != nil {
		t.Fatal(err)
	}
	clk.Add(DefaultLimitsCacheTTL + time.Second)
	if r := e.do("GET", secret, e.ritaWrite, nil); r.Status != 200 {
		t.Fatalf("rita resumed: %d %s", r.Status, r.Body)
	}
	if _, err := e.st.DeleteUser(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	clk.Add(DefaultLimitsCacheTTL + time.Second)
	wantError(t, e.do("GET", "/api/models/acme/intern", e.outWrite, nil), 401, "unauthorized")
}

// TestPersonalTokensSpendTheirOwnersShare: the requests of a member's
// token, its CAS token's included, spend the user's rate, not the
// organization's: with pat's rate spent, pat is refused in acme and the
// organization's robot credential is not.
func TestPersonalTokensSpendTheirOwnersShare(t *testing.T) {
	e := newPeopleEnv(t, true)
	cas := e.casToken(e.patWrite, "secret", "read")
	e.putLimits("pat", map[string]any{"tenant_requests_per_second": 0.5, "tenant_burst": 2})
	var refused response
	for range 4 {
		if r := e.probe(cas); r.Status == 429 {
			refused = r
			break
		}
	}
	if refused.Status != 429 {
		t.Fatal("pat's CAS token was never refused over pat's rate")
	}
	wantError(t, e.do("GET", "/api/models/acme/secret", e.patWrite, nil), 429, "rate_limited")
	if r := e.probe(e.robot); r.Status != 404 {
		t.Fatalf("acme's robot credential beside pat: %d %s", r.Status, r.Body)
	}
}
