package hub_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

type preuploadAnswer struct {
	Files []struct {
		Path         string
		UploadMode   string
		ShouldIgnore bool
		OID          *string
	}
}

func (e env) preupload(t *testing.T, token, typ, repo string, body any) preuploadAnswer {
	t.Helper()
	b, _ := json.Marshal(body)
	r := e.Do("POST", "/api/"+typ+"s/"+repo+"/preupload/main", token, b)
	if r.Status != 200 {
		t.Fatalf("preupload %s: %d %s", b, r.Status, r.Body)
	}
	var a preuploadAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func sample(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestNewRepoStartsWithTheHubsGitattributes: a new repo's first commit
// holds the Hub's default .gitattributes, as a regular file the tree and
// resolve serve.
func TestNewRepoStartsWithTheHubsGitattributes(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	e.createRepoJSON(alice, `{"name":"m"}`)
	e.createRepoJSON(alice, `{"name":"d","type":"dataset"}`)
	for _, c := range []struct{ api, file, want string }{
		{"/api/models/alice/m", "/alice/m/resolve/main/.gitattributes", "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"},
		{"/api/datasets/alice/d", "/datasets/alice/d/resolve/main/.gitattributes", "*.png filter=lfs diff=lfs merge=lfs -text\n"},
	} {
		var info struct {
			Siblings []struct {
				RFilename string
				LFS       any
			}
		}
		json.Unmarshal(e.Do("GET", c.api, alice, nil).Body, &info)
		if len(info.Siblings) != 1 || info.Siblings[0].RFilename != ".gitattributes" || info.Siblings[0].LFS != nil {
			t.Errorf("%s: siblings %+v, want .gitattributes alone, regular", c.api, info.Siblings)
		}
		r := e.Do("GET", c.file, alice, nil)
		if r.Status != 200 || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s: %d %q, want a line %q", c.file, r.Status, r.Body, c.want)
		}
	}
}

// TestPreuploadDecidesAsTheHub: lfs for a path the committed .gitattributes
// marks, a file over 10 MiB or a binary sample; regular for small text and
// empty files; a committed .gitattributes replaces the default, and
// shouldIgnore follows the request's gitIgnore or the committed .gitignore.
func TestPreuploadDecidesAsTheHub(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "write")
	e.createRepoJSON(alice, `{"name":"d","type":"dataset"}`)
	type file struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		Sample string `json:"sample"`
	}
	files := []file{
		{"data/train-00000-of-00001.parquet", 3000, sample("PAR1")}, // a 10-row shard
		{"README.md", 500, sample("---\nconfigs: []\n---\n")},
		{"big.csv", 11 << 20, sample("a,b\n1,2\n")},
		{"blob.dat", 100, sample("\x00\x01\x02")},
		{"latin1.txt", 4, sample("caf\xe9")},
		{"empty.bin", 0, ""},
		{"images/cat.png", 10, sample("\x89PNG")},
		{"notes.txt", 20, sample("hello")},
	}
	want := map[string]string{"data/train-00000-of-00001.parquet": "lfs", "README.md": "regular", "big.csv": "lfs",
		"blob.dat": "lfs", "latin1.txt": "lfs", "empty.bin": "regular", "images/cat.png": "lfs", "notes.txt": "regular"}
	check := func(step string, a preuploadAnswer, want map[string]string, ignoredWant map[string]bool) {
		t.Helper()
		if len(a.Files) != len(want) {
			t.Fatalf("%s: %d files, want %d", step, len(a.Files), len(want))
		}
		for _, f := range a.Files {
			if f.UploadMode != want[f.Path] || f.ShouldIgnore != ignoredWant[f.Path] {
				t.Errorf("%s: %s: %s, ignore %v; want %s, %v", step, f.Path, f.UploadMode, f.ShouldIgnore, want[f.Path], ignoredWant[f.Path])
			}
		}
	}
	check("default .gitattributes", e.preupload(t, alice, "dataset", "alice/d", map[string]any{"files": files}), want, nil)
	check("gitIgnore in the request", e.preupload(t, alice, "dataset", "alice/d", map[string]any{"files": files, "gitIgnore": "*.txt\n!notes.txt\nimages/\n"}),
		want, map[string]bool{"latin1.txt": true, "images/cat.png": true})

	// A committed .gitattributes and .gitignore replace the default.
	r := e.Do("POST", "/api/datasets/alice/d/commit/main", alice, []byte(strings.Join([]string{
		`{"key":"header","value":{"summary":"rules"}}`,
		regularFileLine(".gitattributes", []byte("*.txt filter=lfs\n*.png -filter\n")),
		regularFileLine(".gitignore", []byte("*.md\n")),
	}, "\n")))
	if r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	want2 := map[string]string{"data/train-00000-of-00001.parquet": "regular", "README.md": "regular", "big.csv": "lfs",
		"blob.dat": "lfs", "latin1.txt": "lfs", "empty.bin": "regular", "images/cat.png": "lfs", "notes.txt": "lfs"}
	check("committed .gitattributes", e.preupload(t, alice, "dataset", "alice/d", map[string]any{"files": files}), want2, map[string]bool{"README.md": true})
	// images/cat.png: -filter unsets the pattern, but its sample is binary.

	// Bad input is refused and another tenant's repo is not found.
	for _, c := range []struct {
		name, token, path, body string
		status                  int
	}{
		{"bad sample", alice, "/api/datasets/alice/d/preupload/main", `{"files":[{"path":"a","size":1,"sample":"%%"}]}`, 400},
		{"bad path", alice, "/api/datasets/alice/d/preupload/main", `{"files":[{"path":"../a","size":1,"sample":""}]}`, 400},
		{"negative size", alice, "/api/datasets/alice/d/preupload/main", `{"files":[{"path":"a","size":-1,"sample":""}]}`, 400},
		{"bad gitIgnore", alice, "/api/datasets/alice/d/preupload/main", `{"files":[],"gitIgnore":7}`, 400},
		{"another tenant", bob, "/api/datasets/alice/d/preupload/main", `{"files":[]}`, 404},
	} {
		if r := e.Do("POST", c.path, c.token, []byte(c.body)); r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
		}
	}
}
