package gitserve

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v6/plumbing"

	"openxet/gitobj"
	"openxet/testgit"
)

// memRepo is a Source of commits made here with gitobj (safe for the
// server's goroutines beside the test's).
type memRepo struct {
	mu      sync.Mutex
	refs    map[string]string
	commits map[string]Commit
	blobs   map[string][]byte // by SHA-256
	reads   int               // Blob calls
	trees   map[string]Tree   // the TreeCache
	listed  int               // Commit calls that asked for files
}

func newMemRepo() *memRepo {
	return &memRepo{refs: map[string]string{}, commits: map[string]Commit{}, blobs: map[string][]byte{}, trees: map[string]Tree{}}
}

func (m *memRepo) Tree(_ context.Context, id string) (Tree, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.trees[id]
	if !ok {
		return Tree{}, ErrNotFound
	}
	return t, nil
}

func (m *memRepo) PutTrees(_ context.Context, trees []Tree) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range trees {
		m.trees[t.ID] = t
	}
	return nil
}

// filesListed is how many times the server asked for a commit's files.
func (m *memRepo) filesListed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.listed
}

func (m *memRepo) Refs(context.Context) (map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.refs), nil
}

func (m *memRepo) setRef(ref, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refs[ref] = id
}

func (m *memRepo) blobReads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

func (m *memRepo) Commit(_ context.Context, id string, files bool) (Commit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.commits[id]
	if !ok {
		return Commit{}, ErrNotFound
	}
	if !files {
		c.Files = nil
	} else {
		m.listed++
	}
	return c, nil
}

func (m *memRepo) Blob(_ context.Context, sha string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	b, ok := m.blobs[sha]
	if !ok {
		return nil, fmt.Errorf("no blob %s", sha)
	}
	return b, nil
}

// commit makes a commit of files (path → content; a content starting with
// "lfs:" is a large file, served as its pointer) on parent.
func (m *memRepo) commit(t *testing.T, parent, msg string, at time.Time, files map[string]string) string {
	t.Helper()
	var fs []File
	var gfs []gitobj.File
	for p, content := range files {
		sum := sha256.Sum256([]byte(content))
		f := File{Path: p, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(content))}
		if strings.HasPrefix(content, "lfs:") {
			f.Pointer = true
			f.Blob = gitobj.BlobID(gitobj.LFSPointer(f.SHA256, f.Size))
		} else {
			f.Blob = gitobj.BlobID([]byte(content))
			m.mu.Lock()
			m.blobs[f.SHA256] = []byte(content)
			m.mu.Unlock()
		}
		fs = append(fs, f)
		gfs = append(gfs, gitobj.File{Path: p, Blob: f.Blob})
	}
	trees, err := gitobj.BuildTrees(gfs)
	if err != nil {
		t.Fatal(err)
	}
	sig := gitobj.Signature{Name: "alice", Email: "alice@openxet.invalid", When: at}
	gc := gitobj.Commit{Tree: trees.Root, Author: sig, Committer: sig, Message: gitobj.Message(msg, "")}
	if parent != "" {
		gc.Parents = []string{parent}
	}
	body, err := gc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	id := gitobj.CommitID(body)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commits[id] = Commit{Object: body, Files: fs}
	return id
}

// serve is a smart HTTP server of src at /repo, as the hub routes it.
func serve(t *testing.T, src Source) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repo/info/refs", func(w http.ResponseWriter, r *http.Request) {
		svc := r.URL.Query().Get("service")
		w.Header().Set("Content-Type", "application/x-"+svc+"-advertisement")
		if err := Advertise(r.Context(), w, src, svc, r.Header.Get("Git-Protocol")); err != nil {
			t.Errorf("advertise: %v", err)
		}
	})
	mux.HandleFunc("POST /repo/git-upload-pack", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
		if err := ServeUploadPack(r.Context(), body, w, src, r.Header.Get("Git-Protocol")); err != nil {
			t.Errorf("upload-pack: %v", err)
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL + "/repo"
}

// git runs the git binary in dir.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return testgit.Must(t, dir, testgit.Env(dir, "GIT_LFS_SKIP_SMUDGE=1"), args...)
}

func needGit(t *testing.T) { testgit.Need(t, false) }

// TestCloneWithStockGit: git clones (protocol v0 and v2, whole, shallow
// and without blobs), fetches a new commit, and checks what it got with
// fsck: every id and byte is the Source's.
func TestCloneWithStockGit(t *testing.T) {
	needGit(t)
	repo := newMemRepo()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c1 := repo.commit(t, "", "initial commit", at, map[string]string{".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n"})
	c2 := repo.commit(t, c1, "add weights", at.Add(time.Hour), map[string]string{
		".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n", "README.md": "# model\n", "w/model.bin": "lfs:" + strings.Repeat("x", 5000), "w/config.json": `{"a": 1}`})
	repo.refs["refs/heads/main"] = c2
	repo.refs["refs/heads/dev"] = c1
	repo.refs["refs/tags/v1"] = c1
	url := serve(t, repo)
	for _, tc := range []struct {
		name  string
		args  []string
		proto string
	}{
		{"v0", nil, "0"},
		{"v2", nil, "2"},
		{"depth 1", []string{"--depth", "1"}, "2"},
		{"v0 no blobs", []string{"--filter=blob:none"}, "0"},
		{"no blobs", []string{"--filter=blob:none"}, "2"},
		{"shallow since", []string{"--shallow-since=2026-12-01T09:30:00Z"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"-c", "protocol.version=" + tc.proto, "clone", "-q"}, tc.args...)
			git(t, dir, append(args, url, "clone")...)
			work := filepath.Join(dir, "clone")
			if head := git(t, work, "rev-parse", "HEAD"); head != c2 {
				t.Fatalf("HEAD %s, want %s", head, c2)
			}
			if b, _ := os.ReadFile(filepath.Join(work, "w", "config.json")); string(b) != `{"a": 1}` {
				t.Errorf("config.json: %q", b)
			}
			ptr, _ := os.ReadFile(filepath.Join(work, "w", "model.bin"))
			sum := sha256.Sum256([]byte("lfs:" + strings.Repeat("x", 5000)))
			if string(ptr) != string(gitobj.LFSPointer(hex.EncodeToString(sum[:]), 5004)) {
				t.Errorf("model.bin is not its pointer: %q", ptr)
			}
			if tc.args == nil {
				if got := git(t, work, "rev-parse", "origin/dev", "v1"); got != c1+"\n"+c1 {
					t.Errorf("dev and v1: %q, want %s", got, c1)
				}
				git(t, work, "fsck", "--strict")
			}
			if tc.name == "depth 1" || tc.name == "shallow since" {
				if n := git(t, work, "rev-list", "--count", "HEAD"); n != "1" {
					t.Errorf("a clone of depth 1 has %s commits", n)
				}
			}
		})
	}

	// Over v0 the server does not offer shallow fetches (go-git's v0
	// server cannot serve them statelessly): git says so at once.
	v0 := t.TempDir()
	out, err := testgit.Run(t, v0, testgit.Env(v0), "-c", "protocol.version=0", "clone", "-q", "--depth", "1", url, "clone")
	if err == nil || !strings.Contains(out, "does not support shallow") {
		t.Errorf("a v0 clone --depth 1: %v, %q; want git's refusal", err, out)
	}

	// A commit after the clone arrives with a pull.
	dir := t.TempDir()
	git(t, dir, "clone", "-q", url, "clone")
	work := filepath.Join(dir, "clone")
	c3 := repo.commit(t, c2, "more", at.Add(2*time.Hour), map[string]string{"README.md": "# model, again\n"})
	repo.setRef("refs/heads/main", c3)
	reads := repo.blobReads()
	git(t, work, "pull", "-q", "--ff-only")
	if head := git(t, work, "rev-parse", "HEAD"); head != c3 {
		t.Errorf("HEAD after pull %s, want %s", head, c3)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "README.md")); string(b) != "# model, again\n" {
		t.Errorf("README after pull: %q", b)
	}
	if n := repo.blobReads() - reads; n != 1 {
		t.Errorf("the pull read %d blobs, want 1 (the new README's)", n)
	}
}

// TestBadSources: a commit whose files do not make the tree its object
// names, or whose object is not kept, fails the request with an error
// that says so, and git gets no pack.
func TestBadSources(t *testing.T) {
	needGit(t)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for name, spoil := range map[string]func(r *memRepo, id string){
		"tree differs":  func(r *memRepo, id string) { c := r.commits[id]; c.Files = c.Files[:0]; r.commits[id] = c },
		"no object":     func(r *memRepo, id string) { c := r.commits[id]; c.Object = nil; r.commits[id] = c },
		"wrong pointer": func(r *memRepo, id string) { c := r.commits[id]; c.Files[0].Size++; r.commits[id] = c },
	} {
		t.Run(name, func(t *testing.T) {
			repo := newMemRepo()
			id := repo.commit(t, "", "c", at, map[string]string{"a.bin": "lfs:data"})
			repo.refs["refs/heads/main"] = id
			spoil(repo, id)
			st, err := newStorer(context.Background(), repo)
			if err != nil {
				t.Fatal(err)
			}
			if walk(st, id) == nil {
				t.Fatal("a spoiled commit was served")
			}
			if st.failed() == nil {
				t.Error("no error kept for the spoiled commit")
			}
		})
	}
}

func hashOf(id string) plumbing.Hash { return plumbing.NewHash(id) }

// walk reads commit id and its top tree from st, as a clone's walk does.
func walk(st *repoStorer, id string) error {
	o, err := st.EncodedObject(plumbing.AnyObject, hashOf(id))
	if err != nil {
		return err
	}
	body, _ := readAll(o)
	gc, err := gitobj.DecodeCommit(body)
	if err != nil {
		return err
	}
	_, err = st.EncodedObject(plumbing.TreeObject, hashOf(gc.Tree))
	return err
}

// TestTreeCache: a clone builds each commit's trees from its files once
// and gives them to the TreeCache; the next clone reads them from there
// and asks for no commit's files. A tree is served only once the walk
// reached it from the repo's commits, whatever the cache holds; a cached
// tree whose body is not its id, or whose files are not its entries,
// fails the request.
func TestTreeCache(t *testing.T) {
	needGit(t)
	repo := newMemRepo()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c1 := repo.commit(t, "", "one", at, map[string]string{"a/b/c.txt": "c", "a/d.bin": "lfs:d", "e.txt": "e"})
	c2 := repo.commit(t, c1, "two", at.Add(time.Hour), map[string]string{"a/b/c.txt": "c", "a/d.bin": "lfs:d", "e.bin": "lfs:e2"})
	repo.refs["refs/heads/main"] = c2
	url := serve(t, repo)
	git(t, t.TempDir(), "clone", "-q", "--bare", url, "one.git")
	if n := repo.filesListed(); n != 2 {
		t.Errorf("the first clone listed the files of %d commits, want 2", n)
	}
	if len(repo.trees) != 4 { // c1's top, c2's top, a, a/b
		t.Errorf("%d trees kept, want 4", len(repo.trees))
	}
	dir := t.TempDir()
	git(t, dir, "clone", "-q", url, "two")
	git(t, filepath.Join(dir, "two"), "fsck", "--strict")
	if n := repo.filesListed(); n != 2 {
		t.Errorf("the second clone listed files again (%d in all)", n)
	}

	// Kept, but not reached: not served.
	st, _ := newStorer(context.Background(), repo)
	for id := range repo.trees {
		if _, err := st.EncodedObject(plumbing.AnyObject, hashOf(id)); err == nil {
			t.Errorf("tree %s served before any commit named it", id)
		}
	}
	top := func(id string) string {
		gc, _ := gitobj.DecodeCommit(repo.commits[id].Object)
		return gc.Tree
	}
	for name, spoil := range map[string]func(tr *Tree){
		"body":         func(tr *Tree) { tr.Body = append([]byte(nil), repo.trees[top(c1)].Body...) },
		"files":        func(tr *Tree) { tr.Files = nil },
		"pointer size": func(tr *Tree) { tr.Files = append([]File(nil), tr.Files...); tr.Files[0].Size++ },
	} {
		t.Run(name, func(t *testing.T) {
			tr := repo.trees[top(c2)]
			good := tr
			spoil(&tr)
			repo.trees[tr.ID] = tr
			defer func() { repo.trees[tr.ID] = good }()
			st, _ := newStorer(context.Background(), repo)
			if walk(st, c2) == nil || st.failed() == nil {
				t.Errorf("a spoiled tree was served")
			}
		})
	}
}

// TestWithoutShallow: the v0 advertisement loses its shallow capability
// and nothing else; a malformed one is an error, never a panic.
func TestWithoutShallow(t *testing.T) {
	ref := "0123456789012345678901234567890123456789 HEAD\x00multi_ack shallow side-band-64k\n"
	in := "001e# service=git-upload-pack\n0000" + fmt.Sprintf("%04x", len(ref)+4) + ref + "0000"
	want := strings.Replace(in, fmt.Sprintf("%04x", len(ref)+4)+ref, fmt.Sprintf("%04x", len(ref)-8+4)+strings.Replace(ref, " shallow", "", 1), 1)
	if got, err := withoutShallow([]byte(in)); err != nil || string(got) != want {
		t.Errorf("withoutShallow: %q %v\nwant %q", got, err, want)
	}
	for _, bad := range []string{"00", "zzzz", "0003", "00ffshort", "001e# service=git-upload-pack\n000"} {
		if _, err := withoutShallow([]byte(bad)); err == nil {
			t.Errorf("withoutShallow(%q): no error", bad)
		}
	}
}
