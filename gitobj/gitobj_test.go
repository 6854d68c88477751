package gitobj

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"openxet/testgit"
)

// gitRepo is a scratch repository of the git binary, the judge of every id
// this package makes.
type gitRepo struct {
	t   *testing.T
	dir string
}

func newGitRepo(t *testing.T) gitRepo {
	t.Helper()
	testgit.Need(t, false)
	r := gitRepo{t: t, dir: t.TempDir()}
	r.run(nil, "init", "-q", "--bare", r.dir)
	return r
}

func (r gitRepo) run(stdin []byte, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = testgit.Env(r.dir, "GIT_DIR="+r.dir, "GIT_INDEX_FILE="+filepath.Join(r.dir, "test-index"))
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestBlobIDsAreGits(t *testing.T) {
	g := newGitRepo(t)
	for _, content := range [][]byte{nil, []byte("hello\n"), LFSPointer(strings.Repeat("ab", 32), 1<<40), bytes.Repeat([]byte{0, 1, 2}, 5000)} {
		if got, want := BlobID(content), g.run(content, "hash-object", "--stdin"); got != want {
			t.Errorf("BlobID(%q...) = %s, git says %s", content[:min(len(content), 20)], got, want)
		}
	}
	ptr := string(LFSPointer("4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393", 12345))
	if want := "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"; ptr != want {
		t.Errorf("pointer %q, want %q", ptr, want)
	}
}

// treeCase is files whose trees git sorts in its own way: "a.b" sorts
// before the folder "a" (compared as "a/"), which sorts before "a0".
var treeCase = []string{"README.md", "a.b", "a/x.bin", "a/b/deep.txt", "a0", "z/y/x/w.json", ".gitattributes", "a-b/c"}

func TestTreesAreGits(t *testing.T) {
	g := newGitRepo(t)
	var files []File
	for i, p := range treeCase {
		blob := g.run([]byte("content of "+p), "hash-object", "-w", "--stdin")
		mode := "100644"
		if i%3 == 1 {
			mode = "100755"
		}
		g.run(nil, "update-index", "--add", "--cacheinfo", mode+","+blob+","+p)
		files = append(files, File{Path: p, Blob: blob, Exec: mode == "100755"})
	}
	root := g.run(nil, "write-tree")
	trees, err := BuildTrees(files)
	if err != nil {
		t.Fatal(err)
	}
	if trees.Root != root {
		t.Fatalf("root tree %s, git wrote %s", trees.Root, root)
	}
	for dir, id := range trees.Dirs {
		want := root
		if dir != "" {
			want = g.run(nil, "rev-parse", root+":"+dir)
		}
		if id != want {
			t.Errorf("tree of %q is %s, git says %s", dir, id, want)
		}
		if got := g.run(nil, "cat-file", "tree", id); !bytes.Equal([]byte(got), bytes.TrimSpace(trees.Objects[id])) {
			t.Errorf("tree %s body differs from git's", id)
		}
	}
	if len(trees.Dirs) != 7 || len(trees.Objects) != 7 { // "", a, a/b, a-b, z, z/y, z/y/x
		t.Errorf("%d folders and %d trees (%v), want 7", len(trees.Dirs), len(trees.Objects), trees.Dirs)
	}
	empty, err := BuildTrees(nil)
	if err != nil || empty.Root != g.run(nil, "hash-object", "-t", "tree", "/dev/null") {
		t.Errorf("empty tree %s, %v", empty.Root, err)
	}
}

func TestBuildTreesRefuses(t *testing.T) {
	blob := BlobID([]byte("x"))
	for _, paths := range [][]string{
		{"a//b"}, {"/a"}, {"a/"}, {"a/../b"}, {".git/config"}, {"a/.git"}, {"."},
		{"a", "a/b"}, {"a/b", "a"}, {"same", "same"}, {"a\x00b"},
	} {
		var files []File
		for _, p := range paths {
			files = append(files, File{Path: p, Blob: blob})
		}
		if _, err := BuildTrees(files); !errors.Is(err, ErrBadObject) {
			t.Errorf("BuildTrees(%q) = %v, want ErrBadObject", paths, err)
		}
	}
}

func TestCommitsAreGits(t *testing.T) {
	g := newGitRepo(t)
	tree := g.run(nil, "hash-object", "-w", "-t", "tree", "/dev/null")
	when := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	east := time.FixedZone("", 5*3600+30*60)
	var parent string
	for i, c := range []Commit{
		{Message: Message("initial", "")},
		{Message: Message("Upload model.safetensors", "a description\n\nof two paragraphs")},
		{Message: Message("from the east", ""), Committer: Signature{Name: "Other", Email: "o@example.com", When: when.In(east)}},
	} {
		c.Tree = tree
		if parent != "" {
			c.Parents = []string{parent}
		}
		c.Author = Signature{Name: "Alice <admin>", Email: "alice@example.com\n", When: when.Add(time.Duration(i) * time.Hour)}
		if c.Committer.Name == "" {
			c.Committer = c.Author
		}
		body, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"commit-tree", tree, "-m", strings.TrimSuffix(c.Message, "\n")}
		if parent != "" {
			args = append(args, "-p", parent)
		}
		cmd := exec.Command("git", args...)
		cmd.Env = testgit.Env(g.dir, "GIT_DIR="+g.dir,
			"GIT_AUTHOR_NAME=Alice admin", "GIT_AUTHOR_EMAIL=alice@example.com",
			"GIT_AUTHOR_DATE="+fmt.Sprint(c.Author.When.Unix())+" +0000",
			"GIT_COMMITTER_NAME="+signature(c.Committer).Name, "GIT_COMMITTER_EMAIL="+c.Committer.Email,
			"GIT_COMMITTER_DATE="+fmt.Sprint(c.Committer.When.Unix())+" "+c.Committer.When.Format("-0700"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("commit-tree: %v\n%s", err, out)
		}
		want := strings.TrimSpace(string(out))
		if got := CommitID(body); got != want {
			t.Fatalf("commit %d: id %s, git made %s:\n%s\ngit's:\n%s", i, got, want, body, g.run(nil, "cat-file", "commit", want))
		}
		back, err := DecodeCommit(body)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := back.Encode()
		if !bytes.Equal(again, body) {
			t.Errorf("decode and encode changed commit %d:\n%s\n%s", i, body, again)
		}
		parent = want
	}
}

func TestMessage(t *testing.T) {
	for _, tc := range []struct{ summary, description, msg string }{
		{"one", "", "one\n"},
		{"one", "two\n\nthree", "one\n\ntwo\n\nthree\n"},
		{"one\n", "\ntwo\n", "one\n\ntwo\n"},
	} {
		if got := Message(tc.summary, tc.description); got != tc.msg {
			t.Errorf("Message(%q, %q) = %q, want %q", tc.summary, tc.description, got, tc.msg)
		}
		s, d := SplitMessage(tc.msg)
		if s != strings.TrimSpace(tc.summary) || d != strings.Trim(tc.description, "\n") {
			t.Errorf("SplitMessage(%q) = %q, %q", tc.msg, s, d)
		}
	}
	if s, d := SplitMessage("a wrapped\nsummary\n\nbody\n"); s != "a wrapped summary" || d != "body" {
		t.Errorf("wrapped summary: %q, %q", s, d)
	}
}

func TestCommitRefuses(t *testing.T) {
	for _, c := range []Commit{{Tree: "nothex"}, {Tree: strings.Repeat("a", 40), Parents: []string{"short"}}} {
		if _, err := c.Encode(); !errors.Is(err, ErrBadObject) {
			t.Errorf("Encode(%+v) = %v, want ErrBadObject", c, err)
		}
	}
	for _, body := range []string{"", "garbage", "parent " + strings.Repeat("a", 40) + "\n\nmsg"} {
		if _, err := DecodeCommit([]byte(body)); !errors.Is(err, ErrBadObject) {
			t.Errorf("DecodeCommit(%q) = %v, want ErrBadObject", body, err)
		}
	}
}

func FuzzDecodeCommit(f *testing.F) {
	c := Commit{Tree: strings.Repeat("a", 40), Parents: []string{strings.Repeat("b", 40)}, Author: Signature{Name: "a", Email: "b", When: time.Unix(1, 0)}, Message: "m\n"}
	body, _ := c.Encode()
	f.Add(body)
	f.Add([]byte("tree x\nauthor \n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeCommit(body)
		if err != nil {
			return
		}
		if _, err := c.Encode(); err != nil && !errors.Is(err, ErrBadObject) {
			t.Fatal(err)
		}
	})
}

func FuzzBuildTrees(f *testing.F) {
	f.Add("a/b\nc\nd/e/f")
	f.Add("a\na/b")
	f.Fuzz(func(t *testing.T, paths string) {
		var files []File
		for _, p := range strings.Split(paths, "\n") {
			files = append(files, File{Path: p, Blob: BlobID([]byte(p))})
		}
		trees, err := BuildTrees(files)
		if err != nil {
			if !errors.Is(err, ErrBadObject) {
				t.Fatal(err)
			}
			return
		}
		if trees.Root == "" || trees.Objects[trees.Root] == nil {
			t.Fatalf("no root for %q", paths)
		}
	})
}

func TestParsePointer(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	if got, size, ok := ParsePointer(LFSPointer(sha, 1234)); !ok || got != sha || size != 1234 {
		t.Errorf("ParsePointer(LFSPointer) = %s, %d, %v", got, size, ok)
	}
	for _, b := range []string{
		"", "hello", string(LFSPointer(sha, 1)) + "extra", strings.Replace(string(LFSPointer(sha, 1)), "size 1", "size -1", 1),
		strings.Replace(string(LFSPointer(sha, 1)), "size 1", "size 01", 1), strings.ToUpper(string(LFSPointer(sha, 1))),
		strings.Replace(string(LFSPointer(sha, 1)), sha, sha[:63]+"g", 1),
	} {
		if _, _, ok := ParsePointer([]byte(b)); ok {
			t.Errorf("ParsePointer(%q) took it", b)
		}
	}
}

func FuzzParsePointer(f *testing.F) {
	f.Add(LFSPointer(strings.Repeat("0", 64), 7))
	f.Add([]byte("version https://git-lfs.github.com/spec/v1\noid sha256:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sha, size, ok := ParsePointer(b)
		if ok && !bytes.Equal(LFSPointer(sha, size), b) {
			t.Fatalf("%q read as %s, %d", b, sha, size)
		}
	})
}
