package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"openxet/store/pgtest"
	"openxet/store/s3test"
	"openxet/xet"
)

// TestThreeNodesOnPostgresAndS3 is the scale-out deployment: three
// `openxet serve` processes with data directories of their own, one
// PostgreSQL index, one S3 bucket (MinIO).
//   - A reconstruction answered by one node is fetched from another.
//   - A quota is exact across the nodes under concurrent uploads through
//     all three: exactly the xorbs that fit are stored.
//   - A revocation and a limits override made on one node hold on the
//     others once limits.cache_ttl has passed.
//   - Killing a node (SIGKILL) loses nothing it acknowledged, and
//     reindex --check finds the index and the bucket in agreement.
func TestThreeNodesOnPostgresAndS3(t *testing.T) {
	pg := pgtest.Start(t)
	s3 := s3test.Start(t)
	s3.Setenv(t) // for the in-process reindex --check
	const ttl = time.Second
	flags := []string{"--index", pg.NewIndex(t), "--bucket", s3.BucketURL(s3.CreateBucket(t)), "--cache-ttl", ttl.String()}
	a := startServeEnv(t, t.TempDir(), s3.Env(), flags...)
	admin := a.adminToken(t)
	b := startServeEnv(t, t.TempDir(), s3.Env(), flags...)
	c := startServeEnv(t, t.TempDir(), s3.Env(), flags...)
	nodes := []*proc{a, b, c}

	// Reconstructions from one node, fetch URLs on another.
	files := uploadFixture(t, a.url, admin, "multi")
	checkDownloads(t, a.url, b.url, admin, files)
	checkDownloads(t, b.url, c.url, admin, files)
	checkDownloads(t, c.url, a.url, admin, files)

	checkQuotaAcrossNodes(t, nodes, admin)
	checkChangesAcrossNodes(t, nodes, admin, ttl)

	// Kill C after it acknowledged an upload: every file is served by A
	// and B, and the bucket and the index agree.
	more := uploadFixture(t, c.url, admin, "small")
	c.cmd.Process.Kill()
	c.cmd.Wait()
	checkDownloads(t, a.url, b.url, admin, more)
	checkDownloads(t, b.url, a.url, admin, files)
	code, out, errOut := run(t, nil, append([]string{"reindex", "--check"}, flags[:4]...)...)
	if code != 0 || !strings.Contains(out, "index matches the bucket") {
		t.Fatalf("reindex --check: exit %d\n%s%s", code, out, errOut)
	}
	a.stop()
	b.stop()
}

// checkQuotaAcrossNodes uploads xorbs of one tenant through all nodes at
// once, against a quota that admits exactly 7 of them, and checks that 7
// are stored and that every node reports their usage.
func checkQuotaAcrossNodes(t *testing.T, nodes []*proc, admin string) {
	t.Helper()
	a := nodes[0]
	tok := newCredential(t, a.url, admin, "quota", "write")
	const each, admitted = 6, 7
	var xorbs [][]byte
	var hashes []xet.Hash
	var size int64
	for i := range len(nodes) * each {
		body, info := xet.BuildXorb([][]byte{bytes.Repeat([]byte{byte(i), 'n'}, 20_000)}, false)
		xorbs, hashes, size = append(xorbs, body), append(hashes, info.Hash), info.StreamLen
	}
	quota := admitted*size + size/2
	if code, body := request(t, "PUT", a.url+"/api/openxet/v1/admin/tenants/quota/limits", admin, strings.NewReader(fmt.Sprintf(`{"quota_bytes":%d}`, quota))); code != 200 {
		t.Fatalf("set quota: %d %s", code, body)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for n, p := range nodes {
		for i := range each {
			k := n*each + i
			wg.Go(func() {
				code, body := uploadRetrying(t, p.url, tok, hashes[k], xorbs[k])
				if code != 200 && !(code == 403 && strings.Contains(string(body), "quota_exceeded")) {
					t.Errorf("xorb %d via node %d: %d %s", k, n, code, body)
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if codes[200] != admitted {
		t.Fatalf("answers %v: %d stored, want exactly %d (quota %d, xorb %d bytes)", codes, codes[200], admitted, quota, size)
	}
	for _, p := range nodes {
		var v struct {
			UsageBytes int64 `json:"usage_bytes"`
		}
		code, body := request(t, "GET", p.url+"/api/openxet/v1/admin/tenants/quota/limits", admin, nil)
		if json.Unmarshal(body, &v); code != 200 || v.UsageBytes != admitted*size {
			t.Fatalf("usage via %s: %d %s, want %d", p.url, code, body, admitted*size)
		}
	}
}

// checkChangesAcrossNodes checks that a revocation and an override made on
// the first node hold on the others once the cache lifetime ttl has passed
// since they were made.
func checkChangesAcrossNodes(t *testing.T, nodes []*proc, admin string, ttl time.Duration) {
	t.Helper()
	a, b := nodes[0], nodes[1]
	victim := newCredential(t, a.url, admin, "victim", "read")
	suspended := newCredential(t, a.url, admin, "paused", "read")
	for _, p := range nodes[1:] { // the others cache both credentials and limits
		for _, tk := range []string{victim, suspended} {
			if code, body := request(t, "GET", p.url+"/api/whoami-v2", tk, nil); code != 200 {
				t.Fatalf("whoami via %s: %d %s", p.url, code, body)
			}
		}
	}
	id := strings.Split(victim, "_")[2]
	if code, body := request(t, "DELETE", a.url+"/api/openxet/v1/admin/credentials/"+id, admin, nil); code != 200 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if code, body := request(t, "PUT", a.url+"/api/openxet/v1/admin/tenants/paused/limits", admin, strings.NewReader(`{"suspended":true}`)); code != 200 {
		t.Fatalf("suspend: %d %s", code, body)
	}
	changed := time.Now()
	b.waitFor(func() bool { return time.Since(changed) > ttl }) // the documented bound, on the wall clock the nodes use
	for _, p := range nodes[1:] {
		if code, body := request(t, "GET", p.url+"/api/whoami-v2", victim, nil); code != 401 {
			t.Fatalf("revoked credential via %s after %v: %d %s", p.url, ttl, code, body)
		}
		if code, body := request(t, "GET", p.url+"/api/whoami-v2", suspended, nil); code != 403 || !strings.Contains(string(body), "tenant_suspended") {
			t.Fatalf("suspended tenant via %s after %v: %d %s", p.url, ttl, code, body)
		}
	}
}

// newCredential creates a credential of tenant with one scope through the
// admin API of base and returns its token.
func newCredential(t *testing.T, base, admin, tenant, scope string) string {
	t.Helper()
	code, body := request(t, "POST", base+"/api/openxet/v1/admin/credentials", admin, strings.NewReader(`{"tenant":"`+tenant+`","scopes":["`+scope+`"]}`))
	var cred struct{ Token string }
	if json.Unmarshal(body, &cred); code != 201 || cred.Token == "" {
		t.Fatalf("credential for %s: %d %s", tenant, code, body)
	}
	return cred.Token
}

// uploadRetrying uploads a xorb, again after a 503 (as the stock client
// does, with a growing pause): on a loaded machine a node may answer that
// while the index is busy with the other nodes' transactions, or
// quota_pending while another node's upload of the same tenant is still
// in progress, which on a loaded machine can take longer than twenty
// immediate retries. It gives up after a minute of 503s.
func uploadRetrying(t *testing.T, base, token string, h xet.Hash, body []byte) (int, []byte) {
	pause, deadline := 10*time.Millisecond, time.Now().Add(time.Minute)
	for {
		code, answer := request(t, "POST", base+"/v1/xorbs/default/"+h.String(), token, bytes.NewReader(body))
		if code != 503 {
			return code, answer
		}
		if time.Now().After(deadline) {
			t.Errorf("xorb %s via %s: 503 for a minute: %s", h, base, answer)
			return 503, nil
		}
		time.Sleep(pause)
		pause = min(2*pause, 500*time.Millisecond)
	}
}
