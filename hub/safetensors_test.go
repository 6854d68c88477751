package hub_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// safetensorsFile is a safetensors file of one F32 tensor name of n
// values, its header padded as the format allows, then the data.
func safetensorsFile(name string, n int, seed uint64) (file []byte, header string) {
	header = fmt.Sprintf(`{"__metadata__":{"format":"pt"},%q:{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}`, name, n, 4*n)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(randomBytes(seed, 4*n))
	return b.Bytes(), header
}

// TestShardedSafetensorsMetadata: get_sharded_safetensors_metadata's one
// request answers the index without its weight_map and each shard's
// header, read from its first bytes, whether the shard is a Xet file or a
// regular one; a reader of another tenant gets the same answer for a
// shared repo and RepoNotFound for a private one; a missing index or
// shard is EntryNotFound; an index or a shard that is not what it claims
// is 400 naming the file.
func TestShardedSafetensorsMetadata(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.Credential("alice", "write"), e.Credential("bob", "read")
	e.createRepoJSON(alice, `{"name":"m","visibility":"internal"}`)
	e.createRepoJSON(alice, `{"name":"p"}`)
	big, bigHeader := safetensorsFile("layers.0.w", 200_000, 1) // 800 KB: through LFS, stored as Xet
	small, smallHeader := safetensorsFile("lm_head.w", 4, 2)
	sum := sha256.Sum256(big)
	oid := hex.EncodeToString(sum[:])
	_, obj := e.lfsBatch(alice, "alice/m", nil, big)
	if r := put(t, obj.Actions.Upload.Href, big); r.Status != 200 {
		t.Fatalf("PUT: %d %s", r.Status, r.Body)
	}
	index := `{"metadata":{"total_size":800016},"weight_map":{"layers.0.w":"model-00001-of-00002.safetensors","lm_head.w":"model-00002-of-00002.safetensors"}}`
	lines := []string{
		fmt.Sprintf(`{"key":"lfsFile","value":{"path":"model-00001-of-00002.safetensors","algo":"sha256","oid":%q,"size":%d}}`, oid, len(big)),
		regularFileLine("model-00002-of-00002.safetensors", small),
		regularFileLine("model.safetensors.index.json", []byte(index)),
		regularFileLine("bad.index.json", []byte(`{"weight_map":{"a":"notes.txt"}}`)),
		regularFileLine("broken.index.json", []byte(`{"weight_map": [1, 2]`)),
		regularFileLine("lost.index.json", []byte(`{"weight_map":{"a":"gone.safetensors"}}`)),
		regularFileLine("notes.txt", []byte("\xff\xff\xff\xff\xff\xff\xff\x7fnot a safetensors file")),
	}
	for _, repo := range []string{"alice/m", "alice/p"} {
		if repo == "alice/p" {
			lines = lines[1:] // a private repo of regular files only
		}
		if r := e.commitLines(alice, repo, lines...); r.Status != 200 {
			t.Fatalf("commit to %s: %d %s", repo, r.Status, r.Body)
		}
	}
	want := map[string]any{}
	json.Unmarshal([]byte(`{"index":{"metadata":{"total_size":800016}},"headers":{"model-00001-of-00002.safetensors":`+bigHeader+`,"model-00002-of-00002.safetensors":`+smallHeader+`}}`), &want)
	for _, tok := range []string{alice, bob} {
		r := e.Do("GET", "/api/models/alice/m/safetensors-metadata/model.safetensors.index.json", tok, nil)
		if r.Status != 200 {
			t.Fatalf("metadata: %d %s", r.Status, r.Body)
		}
		if diff := cmp.Diff(want, r.JSON(t)); diff != "" {
			t.Errorf("metadata answer (-want +got):\n%s", diff)
		}
	}
	before := e.state()
	for _, c := range []struct {
		name, tok, path string
		status          int
		code, words     string
	}{
		{"private repo of another tenant", bob, "/api/models/alice/p/safetensors-metadata/model.safetensors.index.json", 404, "RepoNotFound", "repository alice/p not found"},
		{"missing index", alice, "/api/models/alice/m/safetensors-metadata/none.index.json", 404, "EntryNotFound", "file none.index.json not found"},
		{"missing shard", alice, "/api/models/alice/m/safetensors-metadata/lost.index.json", 404, "EntryNotFound", "file gone.safetensors, a shard lost.index.json names, not found"},
		{"not an index", alice, "/api/models/alice/m/safetensors-metadata/broken.index.json", 400, "bad_request", "broken.index.json is not a safetensors index"},
		{"not a safetensors file", alice, "/api/models/alice/m/safetensors-metadata/bad.index.json", 400, "bad_request", "notes.txt is not a safetensors file"},
		{"a dataset", alice, "/api/datasets/alice/m/safetensors-metadata/model.safetensors.index.json", 404, "RepoNotFound", ""},
	} {
		r := e.Do("GET", c.path, c.tok, nil)
		if r.Status != c.status || r.Header.Get("X-Error-Code") != c.code || !strings.Contains(r.Header.Get("X-Error-Message"), c.words) {
			t.Errorf("%s: %d %s %q, want %d %s with %q", c.name, r.Status, r.Header.Get("X-Error-Code"), r.Header.Get("X-Error-Message"), c.status, c.code, c.words)
		}
	}
	if diff := cmp.Diff(before, e.state()); diff != "" {
		t.Errorf("the refusals changed the state:\n%s", diff)
	}
}
