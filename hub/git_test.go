package hub_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"openxet/gitobj"
	"openxet/server"
	"openxet/testgit"
)

// runGit runs the git binary in dir (testgit).
func runGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	return testgit.Run(t, dir, nil, args...)
}

func mustGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return testgit.Must(t, dir, nil, args...)
}

func basic(token string) string {
	return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:"+token))
}

// TestGitCloneIsTheAPIsRepo: stock git clones a repo over smart HTTP (the
// Hub's URL, with and without .git, a dataset's under /datasets/), and
// what it gets is what the API shows: HEAD is model_info's sha, a folder's
// tree is the tree route's oid, a regular file its bytes, a Xet file its
// LFS pointer; a private repo clones with a token as the Basic password.
func TestGitCloneIsTheAPIsRepo(t *testing.T) {
	testgit.Need(t, false)
	e := newEnv(t, func(c *server.Config) { c.AnonymousReads = true })
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"pub","visibility":"public"}`)
	e.createRepoJSON(alice, `{"name":"priv","private":true}`)
	e.createRepoJSON(alice, `{"name":"data","type":"dataset","private":true}`)
	xetLine, content := e.xetFileLine(alice, "weights/model.safetensors", 7)
	for _, repo := range []string{"alice/pub", "alice/priv"} {
		if r := e.commitLines(alice, repo, regularFileLine("weights/config.json", []byte(`{"a": 1}`)), xetLine); r.Status != 200 {
			t.Fatalf("commit to %s: %d %s", repo, r.Status, r.Body)
		}
	}
	u, _ := url.Parse(e.URL)
	withToken := "http://git:" + alice + "@" + u.Host
	for _, tc := range []struct{ name, url, apiRepo string }{
		{"public, anonymous", e.URL + "/alice/pub", "models/alice/pub"},
		{"public, .git", e.URL + "/alice/pub.git", "models/alice/pub"},
		{"private, token", withToken + "/alice/priv", "models/alice/priv"},
		{"dataset", withToken + "/datasets/alice/data.git", "datasets/alice/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mustGit(t, dir, "clone", "-q", tc.url, "c")
			work := filepath.Join(dir, "c")
			var info struct{ SHA string }
			json.Unmarshal(e.Do("GET", "/api/"+tc.apiRepo, alice, nil).Body, &info)
			if head := mustGit(t, work, "rev-parse", "HEAD"); head != info.SHA || head == "" {
				t.Fatalf("HEAD %s, the API's sha %s", head, info.SHA)
			}
			mustGit(t, work, "fsck", "--strict")
			if tc.apiRepo == "datasets/alice/data" {
				return
			}
			if b, _ := os.ReadFile(filepath.Join(work, "weights", "config.json")); string(b) != `{"a": 1}` {
				t.Errorf("config.json: %q", b)
			}
			sum := sha256.Sum256(content)
			if b, _ := os.ReadFile(filepath.Join(work, "weights", "model.safetensors")); string(b) != string(gitobj.LFSPointer(hex.EncodeToString(sum[:]), int64(len(content)))) {
				t.Errorf("model.safetensors is not its LFS pointer: %q", b)
			}
			var items []map[string]any
			json.Unmarshal(e.Do("GET", "/api/"+tc.apiRepo+"/tree/main", alice, nil).Body, &items)
			for _, it := range items {
				if want := mustGit(t, work, "rev-parse", "HEAD:"+it["path"].(string)); it["oid"] != want {
					t.Errorf("tree route's oid of %s: %v, git's %s", it["path"], it["oid"], want)
				}
			}
		})
	}
	// Without a token a private repo asks for one (and git, with no
	// helper and no terminal, gives up).
	if out, err := runGit(t, t.TempDir(), "clone", "-q", e.URL+"/alice/priv", "c"); err == nil || !strings.Contains(out, "could not read Username") {
		t.Errorf("anonymous clone of a private repo: %v, %s", err, out)
	}
}

// TestGitAccess: the access matrix of the git routes. A caller without a
// token who may not read gets 401 with the Basic challenge, for a missing
// repo too; another tenant and a wrong repo 404 with a token; a wrong token
// 401 with the challenge; the service is the route's (info/refs takes
// exactly two); a push needs a write token of the owner (403 for a read
// token); a pack request of another content type is refused. Nothing
// changes.
func TestGitAccess(t *testing.T) {
	e := newEnv(t, func(c *server.Config) { c.AnonymousReads = true })
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	aliceRead := e.Credential("alice", "read")
	e.createRepoJSON(alice, `{"name":"priv","private":true}`)
	e.createRepoJSON(alice, `{"name":"pub","visibility":"public"}`)
	e.createRepoJSON(alice, `{"name":"team","visibility":"internal"}`)
	refs := "/info/refs?service=git-upload-pack"
	before := mustHead(t, e, alice, "alice/priv")
	for _, c := range []struct {
		name, path string
		headers    []string
		status     int
		challenge  bool
	}{
		{"owner, Basic", "/alice/priv" + refs, []string{basic(alice)}, 200, false},
		{"owner, Bearer", "/alice/priv.git" + refs, []string{"Authorization: Bearer " + alice}, 200, false},
		{"anonymous, private", "/alice/priv" + refs, nil, 401, true},
		{"anonymous, missing", "/alice/nothing" + refs, nil, 401, true},
		{"anonymous, public", "/alice/pub" + refs, nil, 200, false},
		{"other tenant", "/alice/priv" + refs, []string{basic(bob)}, 404, false},
		{"other tenant, public", "/alice/pub" + refs, []string{basic(bob)}, 200, false},
		{"other tenant, internal", "/alice/team" + refs, []string{basic(bob)}, 200, false},
		{"anonymous, internal", "/alice/team" + refs, nil, 401, true},
		{"push, other tenant, internal", "/alice/team/info/refs?service=git-receive-pack", []string{basic(bob)}, 403, false},
		{"owner, missing", "/alice/nothing" + refs, []string{basic(alice)}, 404, false},
		{"wrong token", "/alice/priv" + refs, []string{basic("hf_oxt_notatoken")}, 401, true},
		{"empty password", "/alice/priv" + refs, []string{basic("")}, 401, true},
		{"no service", "/alice/priv/info/refs", []string{basic(alice)}, 404, false},
		{"other service", "/alice/priv/info/refs?service=git-upload-archive", []string{basic(alice)}, 404, false},
		{"push, owner", "/alice/priv/info/refs?service=git-receive-pack", []string{basic(alice)}, 200, false},
		{"push, read token", "/alice/priv/info/refs?service=git-receive-pack", []string{basic(aliceRead)}, 403, false},
		{"push, anonymous", "/alice/pub/info/refs?service=git-receive-pack", nil, 401, true},
		{"push, other tenant", "/alice/pub/info/refs?service=git-receive-pack", []string{basic(bob)}, 403, false},
	} {
		r := e.Do("GET", c.path, "", nil, c.headers...)
		if r.Status != c.status || (r.Header.Get("WWW-Authenticate") == `Basic realm="openxet"`) != c.challenge {
			t.Errorf("%s: %d, WWW-Authenticate %q; want %d, challenge %v (%s)", c.name, r.Status, r.Header.Get("WWW-Authenticate"), c.status, c.challenge, r.Body)
		}
		svc := "git-upload-pack"
		if strings.Contains(c.path, "receive-pack") {
			svc = "git-receive-pack"
		}
		if c.status == 200 && r.Header.Get("Content-Type") != "application/x-"+svc+"-advertisement" {
			t.Errorf("%s: Content-Type %q", c.name, r.Header.Get("Content-Type"))
		}
	}
	for _, c := range []struct {
		name    string
		headers []string
		status  int
	}{
		{"anonymous", []string{"Content-Type: application/x-git-upload-pack-request"}, 401},
		{"other tenant", []string{basic(bob), "Content-Type: application/x-git-upload-pack-request"}, 404},
		{"wrong content type", []string{basic(alice), "Content-Type: application/json"}, 400},
		{"bad gzip", []string{basic(alice), "Content-Type: application/x-git-upload-pack-request", "Content-Encoding: gzip"}, 400},
	} {
		if r := e.Do("POST", "/alice/priv/git-upload-pack", "", []byte("0000"), c.headers...); r.Status != c.status {
			t.Errorf("upload-pack, %s: %d, want %d (%s)", c.name, r.Status, c.status, r.Body)
		}
	}
	for name, tok := range map[string]string{"read token": aliceRead, "other tenant": bob} {
		want := map[string]int{"read token": 403, "other tenant": 404}[name]
		if r := e.Do("POST", "/alice/priv/git-receive-pack", "", []byte("0000"), basic(tok), "Content-Type: application/x-git-receive-pack-request"); r.Status != want {
			t.Errorf("receive-pack, %s: %d %s, want %d", name, r.Status, r.Body, want)
		}
	}
	if after := mustHead(t, e, alice, "alice/priv"); after != before {
		t.Errorf("head moved from %s to %s", before, after)
	}
	e.IndexAgrees()
}

// TestGitLFSDownloads: with git-lfs installed, a clone gets the large
// files' bytes (its smudge filter downloads them through the LFS batch
// route), anonymously from a public repo and with the token from a private
// one; GIT_LFS_SKIP_SMUDGE then git lfs pull --include gets one of them;
// the object URL answers a Range with 206; a batch for an object the repo
// does not have (another repo's, by oid) answers the LFS 404 error, and a
// reader who may not read the repo gets what every route gives.
func TestGitLFSDownloads(t *testing.T) {
	testgit.Need(t, true)
	e := newEnv(t, func(c *server.Config) { c.AnonymousReads = true })
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"pub","visibility":"public"}`)
	e.createRepoJSON(alice, `{"name":"priv","private":true}`)
	weights, content := e.xetFileLine(alice, "model.safetensors", 11)
	other, otherContent := e.xetFileLine(alice, "other.bin", 12)
	if r := e.commitLines(alice, "alice/pub", weights); r.Status != 200 {
		t.Fatal(r.Status, string(r.Body))
	}
	if r := e.commitLines(alice, "alice/priv", weights, other); r.Status != 200 {
		t.Fatal(r.Status, string(r.Body))
	}
	u, _ := url.Parse(e.URL)
	for _, tc := range []struct{ name, url string }{
		{"public, anonymous", e.URL + "/alice/pub"},
		{"private, token", "http://git:" + alice + "@" + u.Host + "/alice/priv.git"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mustGit(t, dir, "lfs", "install", "--skip-repo")
			mustGit(t, dir, "clone", "-q", tc.url, "c")
			if b, _ := os.ReadFile(filepath.Join(dir, "c", "model.safetensors")); string(b) != string(content) {
				t.Errorf("model.safetensors after the clone: %d bytes, want the file's %d", len(b), len(content))
			}
		})
	}
	dir := t.TempDir()
	mustGit(t, dir, "lfs", "install", "--skip-repo")
	env := testgit.Env(dir, "GIT_LFS_SKIP_SMUDGE=1")
	testgit.Must(t, dir, env, "clone", "-q", "http://git:"+alice+"@"+u.Host+"/alice/priv", "c")
	work := filepath.Join(dir, "c")
	testgit.Must(t, work, testgit.Env(dir), "lfs", "pull", "--include", "other.bin")
	if b, _ := os.ReadFile(filepath.Join(work, "other.bin")); string(b) != string(otherContent) {
		t.Errorf("other.bin after git lfs pull: %d bytes, want %d", len(b), len(otherContent))
	}
	if b, _ := os.ReadFile(filepath.Join(work, "model.safetensors")); !strings.HasPrefix(string(b), "version https://git-lfs") {
		t.Errorf("model.safetensors was not to be pulled: %q", b[:min(len(b), 40)])
	}

	sum := sha256.Sum256(content)
	oid := hex.EncodeToString(sum[:])
	osum := sha256.Sum256(otherContent)
	otherOID := hex.EncodeToString(osum[:])
	r := e.Do("GET", "/alice/priv.git/info/lfs/objects/"+oid, alice, nil, "Range: bytes=10-19")
	if r.Status != 206 || string(r.Body) != string(content[10:20]) {
		t.Errorf("ranged object read: %d, %d bytes", r.Status, len(r.Body))
	}
	batch := func(repo, token, oid string, size int) response {
		return e.Do("POST", "/"+repo+".git/info/lfs/objects/batch", token,
			[]byte(`{"operation":"download","transfers":["basic"],"objects":[{"oid":"`+oid+`","size":`+strconv.Itoa(size)+`}]}`),
			"Content-Type: application/vnd.git-lfs+json")
	}
	// other.bin is alice's, in priv only: pub does not find it by oid.
	var ans struct {
		Objects []struct {
			Error   *struct{ Code int }
			Actions map[string]any
		}
	}
	json.Unmarshal(batch("alice/pub", alice, otherOID, len(otherContent)).Body, &ans)
	if len(ans.Objects) != 1 || ans.Objects[0].Error == nil || ans.Objects[0].Error.Code != 404 || ans.Objects[0].Actions != nil {
		t.Errorf("batch for another repo's object: %+v", ans)
	}
	if r := e.Do("GET", "/alice/pub.git/info/lfs/objects/"+otherOID, "", nil); r.Status != 404 {
		t.Errorf("another repo's object by oid: %d", r.Status)
	}
	json.Unmarshal(batch("alice/pub", "", oid, len(content)+1).Body, &ans)
	if len(ans.Objects) != 1 || ans.Objects[0].Error == nil || ans.Objects[0].Error.Code != 422 {
		t.Errorf("batch with the wrong size: %+v", ans)
	}
	for _, c := range []struct {
		name, token string
		status      int
	}{{"anonymous", "", 401}, {"other tenant", bob, 404}} {
		if r := batch("alice/priv", c.token, oid, len(content)); r.Status != c.status {
			t.Errorf("batch of a private repo, %s: %d, want %d", c.name, r.Status, c.status)
		}
		if r := e.Do("GET", "/alice/priv.git/info/lfs/objects/"+oid, c.token, nil); r.Status != c.status {
			t.Errorf("object of a private repo, %s: %d, want %d", c.name, r.Status, c.status)
		}
	}
}
