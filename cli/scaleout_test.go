package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"openxet/store"
	"openxet/store/s3test"
	"openxet/xet"

	"openxet/store/accounts"
)

// fixtureFile is one file of a captured client upload (testdata/<case>).
type fixtureFile struct {
	Path    string `json:"path"`
	Size    int    `json:"size"`
	SHA256  string `json:"sha256"`
	XetHash string `json:"xet_hash"`
}

// uploadFixture sends a captured client upload through the CAS API as the
// client did (every xorb, then the shards in order) and returns its files.
func uploadFixture(t *testing.T, base, token, name string) []fixtureFile {
	t.Helper()
	dir := filepath.Join("..", "testdata", name)
	var manifest struct{ Files []fixtureFile }
	data, err := os.ReadFile(filepath.Join(dir, "files.json"))
	if err != nil || json.Unmarshal(data, &manifest) != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	xorbs, _ := filepath.Glob(filepath.Join(dir, "xorbs", "*"))
	shards, _ := filepath.Glob(filepath.Join(dir, "shards", "*.shard"))
	if len(xorbs) == 0 || len(shards) == 0 {
		t.Fatalf("fixture %s: %d xorbs, %d shards", name, len(xorbs), len(shards))
	}
	for _, p := range xorbs {
		body, _ := os.ReadFile(p)
		if code, answer := request(t, "POST", base+"/v1/xorbs/default/"+filepath.Base(p), token, bytes.NewReader(body)); code != 200 {
			t.Fatalf("upload xorb %s: %d %s", filepath.Base(p), code, answer)
		}
	}
	for i := range shards { // in arrival order: 0.shard, 1.shard, …
		body, _ := os.ReadFile(filepath.Join(dir, "shards", fmt.Sprintf("%d.shard", i)))
		if code, answer := request(t, "POST", base+"/v1/shards", token, bytes.NewReader(body)); code != 200 {
			t.Fatalf("upload shard %d: %d %s", i, code, answer)
		}
	}
	return manifest.Files
}

// checkDownloads downloads every file (reconstruction from base, fetch URLs
// from fetchBase, see downloadVia) and compares its SHA-256 and size.
func checkDownloads(t *testing.T, base, fetchBase, token string, files []fixtureFile) {
	t.Helper()
	for _, f := range files {
		h, err := xet.ParseHash(f.XetHash)
		if err != nil {
			t.Fatal(err)
		}
		got, err := downloadVia(base, fetchBase, token, h)
		if err != nil {
			t.Fatalf("download %s (reconstruction from %s, fetch from %s): %v", f.Path, base, fetchBase, err)
		}
		if sum := sha256.Sum256(got); len(got) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			t.Fatalf("download %s: %d bytes with sha256 %x, want %d bytes with %s", f.Path, len(got), sum, f.Size, f.SHA256)
		}
	}
}

// casToken gets a read CAS token from the Hub token endpoint of base for a
// new repo of the credential's tenant.
func casToken(t *testing.T, base, token, tenant, repo string) string {
	t.Helper()
	if code, body := request(t, "POST", base+"/api/repos/create", token, strings.NewReader(`{"name":"`+repo+`"}`)); code != 200 {
		t.Fatalf("create repo: %d %s", code, body)
	}
	code, body := request(t, "GET", base+"/api/models/"+tenant+"/"+repo+"/xet-read-token/main", token, nil)
	var v struct{ AccessToken string }
	if code != 200 || json.Unmarshal(body, &v) != nil || v.AccessToken == "" {
		t.Fatalf("xet-read-token: %d %s", code, body)
	}
	return v.AccessToken
}

// TestNodesShareTheSigningKey: two servers with separate data directories
// on one index and one bucket (the scale-out shape) sign with the one key
// the bucket holds, so each accepts the other's fetch URLs and CAS tokens;
// the first node's old local signing.key became that key on its first
// start, so what it signed before the upgrade keeps verifying.
func TestNodesShareTheSigningKey(t *testing.T) {
	shared := t.TempDir()
	bucketDir := filepath.Join(shared, "bucket")
	flags := []string{"--index", filepath.Join(shared, "index.db"), "--bucket", store.FileBucketURL(bucketDir)}
	dirA, dirB := t.TempDir(), t.TempDir()
	old := bytes.Repeat([]byte{0x5a}, 32)
	if err := os.WriteFile(filepath.Join(dirA, "signing.key"), []byte(hex.EncodeToString(old)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServe(t, dirA, flags...)
	admin := a.adminToken(t)
	b := startServe(t, dirB, flags...)

	data, err := os.ReadFile(filepath.Join(bucketDir, "secrets", "signing-key"))
	if err != nil || strings.TrimSpace(string(data)) != hex.EncodeToString(old) {
		t.Fatalf("bucket's signing key %q (%v), want the migrated local key %x", data, err, old)
	}
	if _, err := os.Stat(filepath.Join(dirB, "signing.key")); !os.IsNotExist(err) {
		t.Fatalf("node B made a local signing key: %v", err)
	}

	files := uploadFixture(t, a.url, admin, "multi")
	checkDownloads(t, a.url, b.url, admin, files) // A's fetch URLs on B
	checkDownloads(t, b.url, a.url, admin, files) // B's on A

	for _, via := range [][2]*proc{{a, b}, {b, a}} {
		tok := casToken(t, via[0].url, admin, "admin", "demo-"+strings.TrimPrefix(via[0].url, "http://127.0.0.1:"))
		h, _ := xet.ParseHash(files[0].XetHash)
		if code, body := request(t, "GET", via[1].url+"/v1/reconstructions/"+h.String(), tok, nil); code != 200 {
			t.Fatalf("CAS token of %s on %s: %d %s", via[0].url, via[1].url, code, body)
		}
	}
	a.stop()
	b.stop()
}

// deploymentOf reads the deployment id a file:// bucket's marker holds.
func deploymentOf(t *testing.T, bucketDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bucketDir, "deployment.json"))
	var rec struct{ ID string }
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.ID == "" {
		t.Fatalf("deployment marker in %s: %q %v", bucketDir, data, err)
	}
	return rec.ID
}

// TestServeRefusesAnotherDeploymentsBucket: serve (and every command that
// opens the store) refuses an index pointed at another deployment's bucket
// or at a bucket without a marker, naming both ids and the cure; reindex
// rebuilds the index from the bucket, after which serve starts.
func TestServeRefusesAnotherDeploymentsBucket(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, d := range []string{"a", "b"} {
		st, err := store.Open(ctx, store.DirConfig(filepath.Join(root, d)))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.CreateCredential(ctx, "tenant-"+d, []string{accounts.ScopeWrite}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	dirA := filepath.Join(root, "a")
	idA, idB := deploymentOf(t, filepath.Join(dirA, "bucket")), deploymentOf(t, filepath.Join(root, "b", "bucket"))
	otherBucket := store.FileBucketURL(filepath.Join(root, "b", "bucket"))
	emptyBucket := store.FileBucketURL(filepath.Join(root, "empty"))

	for _, tc := range []struct {
		name, bucket string
		want         []string
	}{
		{"another deployment's bucket", otherBucket, []string{idA, idB, "openxet reindex", otherBucket}},
		{"an empty bucket", emptyBucket, []string{idA, "has no deployment marker", "openxet reindex", emptyBucket}},
	} {
		for _, args := range [][]string{
			{"serve", "--listen", "127.0.0.1:0", "--memory-budget", "512MiB"},
			{"credentials", "list"},
		} {
			args = append(args, "--data-dir", dirA, "--bucket", tc.bucket)
			code, out, errOut := run(t, nil, args...)
			if code != 1 {
				t.Fatalf("%s: %v: exit %d, want 1\n%s%s", tc.name, args[0], code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: %v: message does not name %q:\n%s", tc.name, args[0], w, errOut)
				}
			}
			if strings.Contains(out, "Token") {
				t.Fatalf("%s: a refused start printed a credential:\n%s", tc.name, out)
			}
		}
	}
	if got := deploymentOf(t, filepath.Join(dirA, "bucket")); got != idA {
		t.Fatalf("deployment of A's bucket changed to %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "empty", "deployment.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused start marked the empty bucket: %v", err)
	}

	// reindex --check reports the mismatch; reindex cures it.
	code, out, errOut := run(t, nil, "reindex", "--check", "--data-dir", dirA, "--bucket", otherBucket)
	if code != 1 || !strings.Contains(out, "deployment") || !strings.Contains(out, idB) {
		t.Fatalf("reindex --check against another deployment's bucket: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "reindex", "--data-dir", dirA, "--bucket", otherBucket); code != 0 {
		t.Fatalf("reindex: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "credentials", "list", "--data-dir", dirA, "--bucket", otherBucket)
	if code != 0 || !strings.Contains(out, "tenant-b") || strings.Contains(out, "tenant-a") {
		t.Fatalf("credentials list after reindex from B's bucket: exit %d\n%s%s", code, out, errOut)
	}
}

// TestServeOnS3: two `openxet serve` nodes (own data directories, one
// index) on one S3 bucket (MinIO) store a captured client upload through
// the CAS API and serve it back, each node's fetch URLs working on the
// other; the bucket holds the deployment marker and the signing key;
// reindex --check finds the index and the bucket in agreement; and the
// AWS SDK logs nothing per read.
func TestServeOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t) // for the in-process reindex --check
	bucket := srv.BucketURL(srv.CreateBucket(t))
	shared := t.TempDir()
	flags := []string{"--index", filepath.Join(shared, "index.db"), "--bucket", bucket}
	a := startServeEnv(t, t.TempDir(), srv.Env(), flags...)
	admin := a.adminToken(t)
	b := startServeEnv(t, t.TempDir(), srv.Env(), flags...)

	files := uploadFixture(t, a.url, admin, "multi")
	checkDownloads(t, a.url, a.url, admin, files)
	checkDownloads(t, a.url, b.url, admin, files)
	checkDownloads(t, b.url, a.url, admin, files)

	ctx := context.Background()
	st, err := store.OpenBucket(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, key := range []string{"deployment.json", "secrets/signing-key"} {
		if ok, err := st.Exists(ctx, key); err != nil || !ok {
			t.Fatalf("%s in the bucket: %v %v", key, ok, err)
		}
	}
	code, out, errOut := run(t, nil, append([]string{"reindex", "--check"}, flags...)...)
	if code != 0 || !strings.Contains(out, "index matches the bucket") {
		t.Fatalf("reindex --check: exit %d\n%s%s", code, out, errOut)
	}
	a.stop()
	b.stop()
	for _, p := range []*proc{a, b} {
		if strings.Contains(p.stderr.String(), "SDK ") {
			t.Fatalf("the AWS SDK logged:\n%s", p.stderr)
		}
	}
}
