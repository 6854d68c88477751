package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"openxet/xet"
)

// TestQuotaHoldsAcrossProcesses: a quota set through one process holds on
// another within the limits cache lifetime, and uploads split over both
// cannot pass it (the index transaction is the arbiter).
func TestQuotaHoldsAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	a := startServe(t, dir, "--cache-ttl", "1s")
	admin := a.adminToken(t)
	b := startServe(t, dir, "--cache-ttl", "1s")
	code, body := request(t, "POST", a.url+"/api/openxet/v1/admin/credentials", admin, strings.NewReader(`{"tenant":"alice","scopes":["write"]}`))
	if code != 201 {
		t.Fatalf("credential: %d %s", code, body)
	}
	var cred struct{ Token string }
	json.Unmarshal(body, &cred)

	xorbs := make([][]byte, 40)
	hashes := make([]xet.Hash, len(xorbs))
	var size int64
	for i := range xorbs {
		var info xet.XorbInfo
		xorbs[i], info = xet.BuildXorb([][]byte{bytes.Repeat([]byte{byte(i), 'q'}, 10_000)}, false)
		hashes[i], size = info.Hash, info.StreamLen
	}
	// B reads alice's limits (default: unlimited) into its cache first.
	if code, body := request(t, "POST", b.url+"/v1/xorbs/default/"+hashes[0].String(), cred.Token, bytes.NewReader(xorbs[0])); code != 200 {
		t.Fatalf("first upload via B: %d %s", code, body)
	}
	quota := 10*size + size/2
	code, body = request(t, "PUT", a.url+"/api/openxet/v1/admin/tenants/alice/limits", admin, strings.NewReader(fmt.Sprintf(`{"quota_bytes":%d}`, quota)))
	if code != 200 {
		t.Fatalf("set quota via A: %d %s", code, body)
	}
	// Within the cache lifetime B refuses what would pass the quota: fill
	// up to the quota through A, then B must refuse the next one.
	for i := 1; i < 10; i++ {
		if code, body := request(t, "POST", a.url+"/v1/xorbs/default/"+hashes[i].String(), cred.Token, bytes.NewReader(xorbs[i])); code != 200 {
			t.Fatalf("upload %d via A: %d %s", i, code, body)
		}
	}
	// B may answer 503 while it refreshes its cache; it must never store
	// the xorb. The bound only catches a B that never refuses.
	var lastCode int
	var last string
	if !b.waitFor(func() bool {
		code, body := request(t, "POST", b.url+"/v1/xorbs/default/"+hashes[10].String(), cred.Token, bytes.NewReader(xorbs[10]))
		if code == 200 {
			t.Fatalf("B stored a xorb past the quota: usage would exceed %d", quota)
		}
		lastCode, last = code, string(body)
		return code == 403 && strings.Contains(last, "quota_exceeded")
	}) {
		t.Fatalf("B never refused the upload past the quota: %d %s", lastCode, last)
	}
	// Raise the quota by a few xorbs and race uploads over both processes.
	quota = 14*size + size/2
	request(t, "PUT", a.url+"/api/openxet/v1/admin/tenants/alice/limits", admin, strings.NewReader(fmt.Sprintf(`{"quota_bytes":%d}`, quota)))
	var wg sync.WaitGroup
	for i := 10; i < len(xorbs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := a
			if i%2 == 1 {
				p = b
			}
			request(t, "POST", p.url+"/v1/xorbs/default/"+hashes[i].String(), cred.Token, bytes.NewReader(xorbs[i]))
		}()
	}
	wg.Wait()
	code, body = request(t, "GET", b.url+"/api/openxet/v1/admin/tenants/alice/limits", admin, nil)
	var lim struct {
		UsageBytes int64 `json:"usage_bytes"`
	}
	json.Unmarshal(body, &lim)
	if code != 200 || lim.UsageBytes > quota || lim.UsageBytes%size != 0 {
		t.Fatalf("usage %d after racing uploads, quota %d (%s)", lim.UsageBytes, quota, body)
	}
	a.stop()
	b.stop()
	// The index and the bucket agree.
	if code, out, errOut := run(t, nil, "reindex", "--check", "--data-dir", dir); code != 0 {
		t.Fatalf("reindex --check: %d %s %s", code, out, errOut)
	}
}

// TestLimitsCommands drives `openxet limits set|get|list` against a server.
func TestLimitsCommands(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, dir)
	env := map[string]string{"OPENXET_TOKEN": p.adminToken(t), "OPENXET_SERVER": p.url}
	if code, out, errOut := run(t, env, "credentials", "create", "--tenant", "alice", "--scope", "write"); code != 0 || !strings.Contains(out, "hf_oxt_") {
		t.Fatalf("create through the API: %d %s %s", code, out, errOut)
	}
	code, out, errOut := run(t, env, "limits", "set", "--tenant", "alice", "--quota", "10GiB", "--requests-per-second", "50", "--burst", "100")
	if code != 0 || !strings.Contains(out, "10 GiB") || !strings.Contains(out, "override") {
		t.Fatalf("set: %d %s %s", code, out, errOut)
	}
	code, out, _ = run(t, env, "limits", "get", "--tenant", "alice", "--json")
	var got struct {
		QuotaBytes  int64   `json:"quota_bytes"`
		TenantRPS   float64 `json:"tenant_requests_per_second"`
		TenantBurst int     `json:"tenant_burst"`
		CredBurst   int     `json:"credential_burst"`
	}
	if json.Unmarshal([]byte(out), &got); code != 0 || got.QuotaBytes != 10<<30 || got.TenantRPS != 50 || got.TenantBurst != 100 || got.CredBurst != 2000 {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, out, _ := run(t, env, "limits", "set", "--tenant", "alice", "--reset", "quota"); code != 0 || !strings.Contains(out, "unlimited") {
		t.Fatalf("reset: %d %s", code, out)
	}
	if code, out, _ := run(t, env, "limits", "list"); code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "TENANT") {
		t.Fatalf("list: %d %s", code, out)
	}
	code, _, errOut = run(t, env, "limits", "set", "--tenant", "alice", "--burst", "0")
	if code == 0 || !strings.Contains(errOut, "tenant_burst") {
		t.Fatalf("invalid value: %d %s", code, errOut)
	}
	code, _, errOut = run(t, map[string]string{"OPENXET_SERVER": p.url, "OPENXET_TOKEN": "hf_oxt_nope"}, "limits", "get", "--tenant", "alice")
	if code == 0 || !strings.Contains(errOut, "unauthorized") {
		t.Fatalf("bad token: %d %s", code, errOut)
	}
	p.stop()
}
