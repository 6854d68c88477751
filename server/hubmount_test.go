package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/hub"
	"openxet/xet"
)

// Tests of the Hub as the server mounts it: what its routes take from the
// server (quota from the tenant's limits, memory from the budget). The Hub's
// own tests are in package hub; hub_errors_test.go checks how the server
// renders the Hub's refusals.

// commitLines commits the operation lines given (NDJSON) to repo's main.
func (e *testEnv) commitLines(token, repo string, lines ...string) response {
	e.t.Helper()
	body := `{"key":"header","value":{"summary":"test"}}` + "\n"
	for _, l := range lines {
		body += l + "\n"
	}
	return e.do("POST", "/api/models/"+repo+"/commit/main", token, []byte(body))
}

func regularFileLine(path string, content []byte) string {
	return fmt.Sprintf(`{"key":"file","value":{"path":%q,"content":%q,"encoding":"base64"}}`, path, base64.StdEncoding.EncodeToString(content))
}

// createRepo makes the model repo {tenant}/{name} with token.
func (e *testEnv) createRepo(token, name string) {
	e.t.Helper()
	if r := e.do("POST", "/api/repos/create", token, []byte(`{"name":"`+name+`","type":"model"}`)); r.Status != 200 {
		e.t.Fatalf("create repo: %d %s", r.Status, r.Body)
	}
}

// uploadWithSHA256 stores xorb bodies and registers one file of them whose
// shard carries the SHA-256 of its bytes, as hf_xet does; returns the
// SHA-256 in hex and the file's size.
func (e *testEnv) uploadWithSHA256(token string, xorbs ...[]byte) (string, int64) {
	e.t.Helper()
	var infos []xet.XorbInfo
	var content []byte
	for _, b := range xorbs {
		info, err := xet.ParseXorb(b, hashOf(b))
		if err != nil {
			e.t.Fatal(err)
		}
		if r := e.postXorb(token, b, info.Hash); r.Status != 200 {
			e.t.Fatalf("xorb upload: %d %s", r.Status, r.Body)
		}
		chunks, _ := xet.DecodeChunks(b)
		for _, c := range chunks {
			content = append(content, c...)
		}
		infos = append(infos, info)
	}
	f, cas := fileOf(infos...)
	sum := sha256.Sum256(content)
	// The shard stores the SHA-256 so that its String is the hex digest.
	sha, err := xet.ParseHash(hex.EncodeToString(sum[:]))
	if err != nil {
		e.t.Fatal(err)
	}
	f.SHA256 = &sha
	f.Flags |= xet.FileFlagMetadataExt
	sh := &xet.Shard{Files: []xet.FileInfo{f}, Xorbs: cas}
	if r := e.do("POST", "/v1/shards", token, sh.MarshalUpload()); r.Status != 200 {
		e.t.Fatalf("shard upload: %d %s", r.Status, r.Body)
	}
	if _, err := e.st.FileBySHA256(context.Background(), "alice", hex.EncodeToString(sum[:])); err != nil {
		e.t.Fatalf("the uploaded file is not found by its SHA-256: %v", err)
	}
	return hex.EncodeToString(sum[:]), int64(len(content))
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestPreuploadAndLFSBatchCountOnlyNewBytes: a tenant at its quota may
// announce content it already stored (found by SHA-256) at a new path, in
// preupload and in an LFS batch; content announced twice in one request
// counts once; new content is refused 403 quota_exceeded, changing nothing.
func TestPreuploadAndLFSBatchCountOnlyNewBytes(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	e.createRepo(alice, "m")
	body, _ := xet.BuildXorb(randomChunks(40, 3, 40_000), false)
	sha, size := e.uploadWithSHA256(alice, body)
	usage, err := e.st.Usage(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	newSHA := strings.Repeat("0f", 32)

	type file struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		Sample string `json:"sample"`
		SHA    string `json:"sha,omitempty"`
	}
	type object struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	}
	preupload := func(files ...file) response {
		return e.do("POST", "/api/models/alice/m/preupload/main", alice, jsonBody(map[string]any{"files": files}))
	}
	batch := func(objects ...object) response {
		return e.do("POST", "/alice/m.git/info/lfs/objects/batch", alice, jsonBody(map[string]any{
			"operation": "upload", "transfers": []string{"basic", "xet"}, "hash_algo": "sha256", "objects": objects}))
	}
	atQuota, room := usage, usage+size // no room for new bytes; room for one new file
	cases := []struct {
		name  string
		quota int64
		do    func() response
		want  int
	}{
		{"at the quota, preupload: stored content at a new path", atQuota, func() response {
			return preupload(file{Path: "copy.bin", Size: size, SHA: sha})
		}, 200},
		{"at the quota, lfs batch: stored content", atQuota, func() response { return batch(object{sha, size}) }, 200},
		{"at the quota, preupload: new content", atQuota, func() response { return preupload(file{Path: "a.bin", Size: size, SHA: newSHA}) }, 403},
		{"at the quota, lfs batch: new content", atQuota, func() response { return batch(object{newSHA, size}) }, 403},
		{"preupload: stored content at two new paths", room, func() response {
			return preupload(file{Path: "copy.bin", Size: size, SHA: sha}, file{Path: "copy2.bin", Size: size, SHA: strings.ToUpper(sha)})
		}, 200},
		{"preupload: new content within the quota, twice", room, func() response {
			return preupload(file{Path: "a.bin", Size: size, SHA: newSHA}, file{Path: "b.bin", Size: size, SHA: newSHA})
		}, 200},
		{"lfs batch: new content within the quota, twice", room, func() response { return batch(object{newSHA, size}, object{newSHA, size}) }, 200},
		{"preupload: stored and new content over the quota", room, func() response {
			return preupload(file{Path: "copy.bin", Size: size, SHA: sha}, file{Path: "a.bin", Size: size + 1, SHA: newSHA})
		}, 403},
		{"preupload: new content without its sha", room, func() response { return preupload(file{Path: "a.bin", Size: size + 1}) }, 403},
		{"lfs batch: new content over the quota", room, func() response { return batch(object{sha, size}, object{newSHA, size + 1}) }, 403},
		{"lfs batch: two new objects over the quota", room, func() response {
			return batch(object{newSHA, size}, object{strings.Repeat("1e", 32), size})
		}, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.putLimits("alice", map[string]any{"quota_bytes": c.quota})
			before := e.snapshot()
			r := c.do()
			if c.want == 403 {
				wantError(t, r, 403, "quota_exceeded")
			} else if r.Status != c.want {
				t.Fatalf("status %d, want %d: %s", r.Status, c.want, r.Body)
			}
			if diff := cmp.Diff(before, e.snapshot()); diff != "" {
				t.Fatalf("the request changed the state:\n%s", diff)
			}
		})
	}

	// Stored content gets no upload action; new content does.
	r := batch(object{sha, size}, object{newSHA, 1})
	var ans struct {
		Objects []struct {
			OID     string         `json:"oid"`
			Actions map[string]any `json:"actions"`
		} `json:"objects"`
	}
	if err := json.Unmarshal(r.Body, &ans); err != nil || len(ans.Objects) != 2 {
		t.Fatalf("batch answer: %d %s", r.Status, r.Body)
	}
	if ans.Objects[0].Actions != nil || ans.Objects[1].Actions == nil {
		t.Fatalf("actions: stored %v, new %v", ans.Objects[0].Actions, ans.Objects[1].Actions)
	}
}

// TestHubJSONReservesBeforeDecoding: preupload and LFS batch reserve the
// memory their JSON body takes before they read it. While the credential's
// share is held, a body that is not even JSON gets 503 memory_busy, not 400:
// nothing was decoded. A body over the cap is refused 413 before it is read,
// and so is a list of more than hub.MaxJSONEntries entries.
func TestHubJSONReservesBeforeDecoding(t *testing.T) {
	e := newTestEnv(t, smallBudget)
	alice := e.credential("alice", "write")
	e.createRepo(alice, "m")
	notJSON := bytes.Repeat([]byte("x"), 40<<10)
	routes := []string{"/api/models/alice/m/preupload/main", "/alice/m.git/info/lfs/objects/batch"}
	for _, p := range routes {
		if r := e.do("POST", p, alice, notJSON); r.Status != 400 {
			t.Fatalf("%s with memory free: %d %s, want 400", p, r.Status, r.Body)
		}
	}

	// More entries than one request may carry: 413, before they are decoded.
	many := make([]map[string]any, hub.MaxJSONEntries+1)
	for i := range many {
		many[i] = map[string]any{"path": "f", "size": 1, "oid": "x"}
	}
	for _, p := range routes {
		r := e.do("POST", p, alice, jsonBody(map[string]any{"operation": "upload", "files": many, "objects": many}))
		wantError(t, r, 413, "payload_too_large")
	}

	// The two stalled uploads leave a quarter MiB of alice's 70 MiB share.
	e.holdMemory(t, alice, strings.Repeat("ef", 32), 65<<20)
	e.holdMemory(t, alice, strings.Repeat("ee", 32), 4<<20+3<<18)
	busy := e.srv.budget.Stats().Busy.Credential
	for _, p := range routes {
		r := e.do("POST", p, alice, notJSON)
		wantError(t, r, 503, "memory_busy")
	}
	if got := e.srv.budget.Stats().Busy.Credential - busy; got != 2 {
		t.Fatalf("%d reservations refused by the credential share, want 2", got)
	}

	for _, p := range routes {
		head := "POST " + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + alice + "\r\nContent-Length: 16777217\r\n\r\n"
		r := e.exchange([]byte(head), false)
		wantError(t, r, 413, "payload_too_large")
	}
}

// TestOwnNamespacesCoverTheServersRoutes: every first path segment of a
// route the server serves itself is reserved from the Hub's repo pages, so
// that a GET of an unknown path under it stays a JSON 404 rather than a
// repo page (/api/ is the Hub's, which reserves it; the rest of the Hub's
// routes start with a namespace parameter, /datasets/ or /spaces/, or are
// the landing page).
func TestOwnNamespacesCoverTheServersRoutes(t *testing.T) {
	e := newTestEnv(t)
	reserved := map[string]bool{}
	for _, ns := range ownNamespaces() {
		reserved[ns] = true
	}
	for _, r := range e.srv.echo.Routes() {
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.Path, "/"), "/")
		switch {
		case seg == "" || seg == "api" || seg == "datasets" || seg == "spaces" || strings.HasPrefix(seg, ":"):
		case !reserved[seg]:
			t.Errorf("route %s %s: namespace %q is not in ownNamespaces", r.Method, r.Path, seg)
		}
	}
}
