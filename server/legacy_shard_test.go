package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"openxet/xet"
)

// TestLegacyClientShards replays what hf_xet 1.1.6 and 1.2.0 uploaded
// (testdata/small-hf_xet-*, captured by testdata/capture/capture.py) on the
// routes each used: their shards say footer_size 200 and end at the CAS
// bookend. Both register, and every file then reconstructs to the bytes
// whose SHA-256 files.json records.
func TestLegacyClientShards(t *testing.T) {
	for _, c := range []struct{ dir, xorbRoute, shardRoute string }{
		{"small-hf_xet-1.1.6", "/xorb/default/", "/shard/default/"},
		{"small-hf_xet-1.2.0", "/xorbs/default/", "/shards"},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", c.dir)
			e := newTestEnv(t)
			alice := e.credential("alice", "write")
			xorbs, _ := filepath.Glob(filepath.Join(dir, "xorbs", "*"))
			for _, p := range xorbs {
				if r := e.do("POST", c.xorbRoute+filepath.Base(p), alice, readFile(t, p)); r.Status != 200 {
					t.Fatalf("xorb %s: %d %s", filepath.Base(p), r.Status, r.Body)
				}
			}
			shard := readFile(t, filepath.Join(dir, "shards", "0.shard"))
			if shard[40] != xet.ShardFooterBytes {
				t.Fatalf("captured shard has footer_size %d; this test is about 200", shard[40])
			}
			route := c.shardRoute
			if route == "/shard/default/" {
				sum := sha256.Sum256(shard) // the path hash is not checked against the body
				route += hex.EncodeToString(sum[:])
			}
			if r := e.do("POST", route, alice, shard); r.Status != 200 {
				t.Fatalf("shard: %d %s", r.Status, r.Body)
			}
			var meta struct {
				Files []struct {
					Path    string `json:"path"`
					Size    int    `json:"size"`
					SHA256  string `json:"sha256"`
					XetHash string `json:"xet_hash"`
				} `json:"files"`
			}
			if err := json.Unmarshal(readFile(t, filepath.Join(dir, "files.json")), &meta); err != nil {
				t.Fatal(err)
			}
			for _, f := range meta.Files {
				if f.Size == 0 {
					continue // the empty file has the zero hash and no reconstruction
				}
				r := e.do("GET", "/v1/reconstructions/"+f.XetHash, alice, nil)
				if r.Status != 200 {
					t.Fatalf("%s: reconstruction %d %s", f.Path, r.Status, r.Body)
				}
				sum := sha256.Sum256(e.assemble(r.Body))
				if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
					t.Errorf("%s: reassembled sha256 %s, want %s", f.Path, got, f.SHA256)
				}
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
