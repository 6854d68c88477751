package hub_test

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openxet/gitobj"
	"openxet/testgit"
)

// pushClone is a clone of a repo of e, made with token, to push from.
type pushClone struct {
	t    *testing.T
	e    env
	dir  string // HOME and the clone's parent
	work string
}

func newPushClone(t *testing.T, e env, token, repo string, lfs bool) *pushClone {
	t.Helper()
	dir := t.TempDir()
	if lfs {
		testgit.Must(t, dir, nil, "lfs", "install", "--skip-repo")
	}
	u, _ := url.Parse(e.URL)
	testgit.Must(t, dir, nil, "clone", "-q", "http://git:"+token+"@"+u.Host+"/"+repo, "c")
	return &pushClone{t: t, e: e, dir: dir, work: filepath.Join(dir, "c")}
}

func (p *pushClone) git(args ...string) (string, error) {
	p.t.Helper()
	return testgit.Run(p.t, p.work, testgit.Env(p.dir), args...)
}

func (p *pushClone) must(args ...string) string {
	p.t.Helper()
	return testgit.Must(p.t, p.work, testgit.Env(p.dir), args...)
}

func (p *pushClone) write(path string, content []byte) {
	p.t.Helper()
	full := filepath.Join(p.work, filepath.FromSlash(path))
	os.MkdirAll(filepath.Dir(full), 0o755)
	if err := os.WriteFile(full, content, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// commit adds everything and commits it with msg.
func (p *pushClone) commit(msg string) string {
	p.t.Helper()
	p.must("add", "-A")
	p.must("commit", "-q", "-m", msg)
	return p.must("rev-parse", "HEAD")
}

// refused pushes args and wants git to fail with want in its output.
func (p *pushClone) refused(want string, args ...string) {
	p.t.Helper()
	out, err := p.git(append([]string{"push"}, args...)...)
	if err == nil || !strings.Contains(out, want) {
		p.t.Errorf("push %v: %v, want a refusal saying %q:\n%s", args, err, want, out)
	}
}

// TestGitPush: stock git pushes commits (text files, and large files
// through git-lfs: its pre-push upload, then pointers that become the
// repo's Xet files) that the API then shows under the ids git made, byte
// for byte; a new branch and a tag; a branch deletion; an amended commit
// force-pushed, which drops the one it replaces.
func TestGitPush(t *testing.T) {
	testgit.Need(t, true)
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	p := newPushClone(t, e, alice, "alice/m", true)
	p.write("README.md", []byte("---\nlicense: mit\n---\n# a model\n"))
	p.write("sub/config.json", []byte(`{"hidden_size": 8}`))
	weights := bytes.Repeat([]byte{0, 1, 2, 3, 250}, 30_000)
	p.write("model.bin", weights) // *.bin is LFS by the Hub's .gitattributes
	p.write("run.sh", []byte("#!/bin/sh\necho hi\n"))
	os.Chmod(filepath.Join(p.work, "run.sh"), 0o755)
	head := p.commit("Add the model\n\nWith weights.")
	p.must("push", "-q", "origin", "main")
	if got := mustHead(t, e, alice, "alice/m"); got != head {
		t.Fatalf("the API's head %s, git's %s", got, head)
	}
	for path, want := range map[string][]byte{"README.md": []byte("---\nlicense: mit\n---\n# a model\n"), "sub/config.json": []byte(`{"hidden_size": 8}`), "model.bin": weights} {
		if r := e.Do("GET", "/alice/m/resolve/main/"+path, alice, nil); r.Status != 200 || !bytes.Equal(r.Body, want) {
			t.Errorf("%s through the API: %d, %d bytes, want %d", path, r.Status, len(r.Body), len(want))
		}
	}
	var commits []struct{ ID, Title, Message string }
	json.Unmarshal(e.Do("GET", "/api/models/alice/m/commits/main", alice, nil).Body, &commits)
	if len(commits) != 2 || commits[0].ID != head || commits[0].Title != "Add the model" || commits[0].Message != "With weights." {
		t.Errorf("commits after the push: %+v", commits)
	}
	var tree []map[string]any
	json.Unmarshal(e.Do("GET", "/api/models/alice/m/tree/main", alice, nil).Body, &tree)
	for _, it := range tree {
		if want := p.must("rev-parse", "HEAD:"+it["path"].(string)); it["oid"] != want {
			t.Errorf("oid of %s: %v, git's %s", it["path"], it["oid"], want)
		}
		if it["path"] == "model.bin" && it["lfs"] == nil {
			t.Errorf("model.bin is not an LFS file in the tree: %v", it)
		}
	}

	// A second commit, a branch and a tag; then the branch goes.
	p.write("README.md", []byte("# a model, v2\n"))
	second := p.commit("v2")
	p.must("push", "-q", "origin", "main", "main:refs/heads/dev")
	p.must("tag", "v1", head)
	p.must("push", "-q", "origin", "v1")
	for rev, want := range map[string]string{"main": second, "dev": second, "v1": head} {
		var info struct{ SHA string }
		json.Unmarshal(e.Do("GET", "/api/models/alice/m/revision/"+rev, alice, nil).Body, &info)
		if info.SHA != want {
			t.Errorf("%s: %s, want %s", rev, info.SHA, want)
		}
	}
	p.must("push", "-q", "origin", ":dev")
	if r := e.Do("GET", "/api/models/alice/m/revision/dev", alice, nil); r.Status != 404 {
		t.Errorf("dev after its deletion: %d", r.Status)
	}
	// A fresh clone is the pushed history, byte for byte.
	q := newPushClone(t, e, alice, "alice/m", true)
	if got := q.must("rev-parse", "HEAD", "HEAD~1"); got != second+"\n"+head {
		t.Errorf("a clone's history: %s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(q.work, "model.bin")); !bytes.Equal(b, weights) {
		t.Errorf("model.bin in a new clone: %d bytes", len(b))
	}
	q.must("fsck", "--strict")
	if mode := q.must("ls-files", "-s", "run.sh"); !strings.HasPrefix(mode, "100755 ") {
		t.Errorf("run.sh in a new clone: %q, want mode 100755", mode)
	}
	// An amended commit, force-pushed: the one it replaces is gone.
	p.must("commit", "-q", "--amend", "-m", "v2, amended")
	amended := p.must("rev-parse", "HEAD")
	p.must("push", "-q", "--force", "origin", "main")
	if got := mustHead(t, e, alice, "alice/m"); got != amended {
		t.Errorf("head after the force push: %s, want %s", got, amended)
	}
	if r := e.Do("GET", "/api/models/alice/m/revision/"+second, alice, nil); r.Status != 404 {
		t.Errorf("the replaced commit after the force push: %d, want 404", r.Status)
	}
	e.IndexAgrees()
}

// TestGitPushRefusals: every push the Hub refuses is refused with a
// sentence git prints, and changes nothing; a force push moves the branch.
func TestGitPushRefusals(t *testing.T) {
	testgit.Need(t, true)
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	aliceRead := e.Credential("alice", "read")
	e.createRepoJSON(alice, `{"name":"m"}`)
	before := mustHead(t, e, alice, "alice/m")
	p := newPushClone(t, e, alice, "alice/m", false)
	reset := func() {
		p.must("reset", "-q", "--hard", before)
		p.must("clean", "-qfdx")
	}
	bin := bytes.Repeat([]byte{0, 255}, 100)
	for _, c := range []struct {
		name, want string
		change     func()
	}{
		{"binary file", "contains binary files. Please use git-lfs", func() { p.write("data.raw", bin) }},
		{"text over 10 MiB", "larger than 10 MiB", func() { p.write("big.txt", bytes.Repeat([]byte("a\n"), 5<<20+1)) }},
		{"pointer to nothing", "LFS pointers to files this server does not have", func() {
			p.write("ghost.bin", gitobj.LFSPointer(strings.Repeat("ab", 32), 1234))
		}},
		{"symlink", "symbolic links are not taken", func() { os.Symlink("README.md", filepath.Join(p.work, "link")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			reset()
			c.change()
			p.commit(c.name)
			p.refused(c.want, "origin", "main")
		})
	}
	// A merge.
	reset()
	p.must("checkout", "-q", "-b", "side")
	p.write("a.txt", []byte("a"))
	p.commit("a")
	p.must("checkout", "-q", "main")
	p.write("b.txt", []byte("b"))
	p.commit("b")
	p.must("merge", "-q", "--no-edit", "side")
	p.refused("merge commits are not taken", "origin", "main")
	// Deleting main; moving a tag; a force push.
	reset()
	p.refused("cannot be deleted", "origin", ":main")
	p.write("c.txt", []byte("c"))
	c1 := p.commit("c")
	p.must("push", "-q", "origin", "main", c1+":refs/tags/t1")
	p.must("reset", "-q", "--hard", before)
	p.write("d.txt", []byte("d"))
	p.commit("d")
	p.refused("tags do not move", "--force", "origin", "HEAD:refs/tags/t1")
	p.refused("only branches", "origin", "HEAD:refs/pr/1")
	if got := mustHead(t, e, alice, "alice/m"); got != c1 {
		t.Errorf("head after the refusals: %s, want %s", got, c1)
	}
	// A force push moves main; c1 stays, tag t1 reaches it.
	d := p.must("rev-parse", "HEAD")
	p.must("push", "-q", "--force", "origin", "main")
	if got := mustHead(t, e, alice, "alice/m"); got != d {
		t.Errorf("head after a force push: %s, want %s", got, d)
	}
	if r := e.Do("GET", "/api/models/alice/m/revision/t1", alice, nil); r.Status != 200 {
		t.Errorf("tag t1 after the force push: %d", r.Status)
	}
	// Credentials that may not push: read-only (403), another tenant's
	// (404), none (401).
	u, _ := url.Parse(e.URL)
	for name, tok := range map[string]string{"read token": aliceRead, "other tenant": bob} {
		p.must("remote", "set-url", "origin", "http://git:"+tok+"@"+u.Host+"/alice/m")
		if out, err := p.git("push", "origin", "main"); err == nil || !strings.Contains(out, map[string]string{"read token": "403", "other tenant": "not found"}[name]) {
			t.Errorf("push with a %s: %v\n%s", name, err, out)
		}
	}
	e.IndexAgrees()
}

// pktLine is one pkt-line of git's protocol.
func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// emptyPack is a pack of no objects.
func emptyPack() []byte {
	b := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	sum := sha1.Sum(b)
	return append(b, sum[:]...)
}

// TestGitPushCrafted: receive-pack requests git would not send, straight
// to the route: a funny ref name, a pack that is garbage, cut short or a
// delta bomb. Each is refused in the report git reads, and nothing moves.
func TestGitPushCrafted(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	head := mustHead(t, e, alice, "alice/m")
	zero, other := strings.Repeat("0", 40), strings.Repeat("ab", 20)
	bomb := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01")
	bomb = append(bomb, 0x70|0x0b) // a REF delta of 11 bytes
	bomb = append(bomb, bytes.Repeat([]byte{1}, 20)...)
	var d bytes.Buffer
	zw := zlib.NewWriter(&d)
	zw.Write(append(binary.AppendUvarint(binary.AppendUvarint(nil, 1), 1<<40), 0x90, 0xff))
	zw.Close()
	bomb = append(bomb, d.Bytes()...)
	sum := sha1.Sum(bomb)
	bomb = append(bomb, sum[:]...)
	for _, c := range []struct {
		name, cmd string
		pack      []byte
		want      string
	}{
		{"funny ref name", zero + " " + other + " refs/heads/../x", emptyPack(), "ng refs/heads/../x refs/heads/../x: invalid branch or tag name"},
		{"garbage pack", head + " " + other + " refs/heads/main", []byte("PACK garbage"), "unpack "},
		{"truncated pack", head + " " + other + " refs/heads/main", emptyPack()[:10], "unpack "},
		{"delta bomb", head + " " + other + " refs/heads/main", bomb, "unpack "},
	} {
		body := pktLine(c.cmd+"\x00report-status\n") + "0000" + string(c.pack)
		r := e.Do("POST", "/alice/m/git-receive-pack", alice, []byte(body), "Content-Type: application/x-git-receive-pack-request")
		if !strings.Contains(string(r.Body), c.want) || c.want == "unpack " && strings.Contains(string(r.Body), "unpack ok") {
			t.Errorf("%s: %d %q, want %q in the report", c.name, r.Status, r.Body, c.want)
		}
	}
	if got := mustHead(t, e, alice, "alice/m"); got != head {
		t.Errorf("head moved to %s", got)
	}
	e.IndexAgrees()
}
