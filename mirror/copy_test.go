package mirror_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestCopyFromMirroredRepo: tenant bob copies a Xet file of a mirrored
// repo into a repo of his own as huggingface_hub's CommitOperationCopy
// does (lfs-files/duplicate on the upstream's repo id, then a commit
// naming the file by its SHA-256). The mirror pulls the file it has not
// pulled yet, once; the copy downloads as the upstream's bytes; a hash the
// mirrored revisions do not name is failed without reaching the upstream;
// the index agrees with the bucket.
func TestCopyFromMirroredRepo(t *testing.T) {
	u := newUpstream(t)
	weights := randomBytes(1, weightsBytes)
	up := u.repo(t, "google-bert", "bert-tiny", map[string][]byte{"model.safetensors": weights}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read", "write")
	if r := e.Do("POST", "/api/repos/create", tok, []byte(`{"name":"copy"}`)); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	entry, _ := up.Entry("model.safetensors")
	duplicate := func(xetHash, sha string) []any {
		t.Helper()
		body := fmt.Sprintf(`{"target":{"type":"model","name":"bob/copy"},"files":[{"xetHash":%q,"sha256":%q,"filename":"model.safetensors"}]}`, xetHash, sha)
		r := e.Do("POST", "/api/models/google-bert/bert-tiny/lfs-files/duplicate", tok, []byte(body), "Content-Type: application/json")
		var answer struct {
			Failed []any `json:"failed"`
		}
		if err := json.Unmarshal(r.Body, &answer); r.Status != 200 || err != nil || answer.Failed == nil {
			t.Fatalf("duplicate: %d %s", r.Status, r.Body)
		}
		return answer.Failed
	}
	opens := e.up.opens.Load()
	if failed := duplicate(strings.Repeat("ab", 32), strings.Repeat("cd", 32)); len(failed) != 1 || e.up.opens.Load() != opens {
		t.Fatalf("a hash no mirrored revision names: failed %v, %d upstream opens", failed, e.up.opens.Load()-opens)
	}
	if failed := duplicate(entry.XetHash, entry.SHA256); len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	if n := e.up.opens.Load() - opens; n != 1 {
		t.Errorf("the copy opened %d upstream streams, want 1 (the pull of the file)", n)
	}
	line := fmt.Sprintf(`{"key":"lfsFile","value":{"path":"w.bin","algo":"sha256","oid":%q}}`, entry.SHA256)
	if r := e.Do("POST", "/api/models/bob/copy/commit/main", tok, []byte(`{"key":"header","value":{"summary":"copy"}}`+"\n"+line+"\n"), "Content-Type: application/x-ndjson"); r.Status != 200 {
		t.Fatalf("commit: %d %s", r.Status, r.Body)
	}
	got := e.Do("GET", "/bob/copy/resolve/main/w.bin", tok, nil)
	if got.Status != 200 || !bytes.Equal(got.Body, weights) {
		t.Fatalf("bob's copy: %d, %d bytes, want the upstream's %d", got.Status, len(got.Body), len(weights))
	}
	if usage, _ := e.Store.Usage(context.Background(), "bob"); usage != 0 {
		t.Errorf("bob charged %d bytes for a copy under dedup_scope global", usage)
	}
	e.checkIndex(t)
}

// TestDuplicateMirroredRepo: duplicate_repo of a mirrored repo is not
// served (the mirror holds the revisions its readers resolved, under refs
// of its own): 501 not_served naming the feature, no repo made, nothing
// asked of the upstream.
func TestDuplicateMirroredRepo(t *testing.T) {
	u := newUpstream(t)
	u.repo(t, "google-bert", "bert-tiny", map[string][]byte{"model.safetensors": randomBytes(3, 100_000)}, nil)
	e := newMirror(t, u)
	tok := e.Credential("bob", "read", "write")
	if r := e.Do("GET", "/api/models/google-bert/bert-tiny", tok, nil); r.Status != 200 {
		t.Fatalf("info: %d %s", r.Status, r.Body)
	}
	opens := e.up.opens.Load()
	r := e.Do("POST", "/api/models/google-bert/bert-tiny/duplicate", tok, []byte(`{"repository":"bob/bert-copy"}`))
	if r.Status != 501 || r.Header.Get("X-Error-Code") != "not_served" || !strings.Contains(r.Header.Get("X-Error-Message"), "duplicates of mirrored repos") {
		t.Errorf("duplicate of a mirrored repo: %d %s %q (%s)", r.Status, r.Header.Get("X-Error-Code"), r.Header.Get("X-Error-Message"), r.Body)
	}
	if r := e.Do("GET", "/api/models/bob/bert-copy", tok, nil); r.Status != 404 {
		t.Errorf("bob/bert-copy after the refusal: %d", r.Status)
	}
	if n := e.up.opens.Load() - opens; n != 0 {
		t.Errorf("the refusal opened %d upstream streams", n)
	}
	e.checkIndex(t)
}
