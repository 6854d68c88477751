package server

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

func TestQuotaRefusesXorbBeforeBodyRead(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	first, info := xet.BuildXorb(randomChunks(20, 2, 30_000), false)
	if r := e.postXorb(alice, first, info.Hash); r.Status != 200 {
		t.Fatal(r.Status)
	}
	e.putLimits("alice", map[string]any{"quota_bytes": info.StreamLen + 1000})
	before := e.snapshot()
	big, bigInfo := xet.BuildXorb(randomChunks(21, 2, 30_000), false)

	for _, expect := range []bool{true, false} {
		t.Run(fmt.Sprintf("expect_100_continue=%v", expect), func(t *testing.T) {
			conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/xorbs/default/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n", bigInfo.Hash, alice, len(big))
			if expect {
				fmt.Fprint(conn, "Expect: 100-continue\r\n")
			}
			fmt.Fprint(conn, "\r\n")
			// Not one body byte has been sent: the answer must come anyway.
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := readAll(res)
			r := response{Status: res.StatusCode, Header: res.Header, Body: b}
			wantError(t, r, 403, "quota_exceeded")
			m := r.json(t)
			if m["quota"] != float64(info.StreamLen+1000) || m["usage"] != float64(info.StreamLen) || !strings.Contains(m["hint"].(string), "openxet limits set") {
				t.Fatalf("body %s", b)
			}
			if diff := cmp.Diff(before, e.snapshot()); diff != "" {
				t.Fatalf("state changed:\n%s", diff)
			}
		})
	}
	// A xorb the tenant already owns still succeeds, at no cost and
	// without a body.
	if r := e.rawRequest("POST", "/v1/xorbs/default/"+info.Hash.String(), alice, fmt.Sprintf("Content-Length: %d", len(first))); r.Status != 200 || !strings.Contains(string(r.Body), "false") {
		t.Fatalf("owned xorb: %d %s", r.Status, r.Body)
	}
}

func TestAdminLimitsRequireAdmin(t *testing.T) {
	e := newTestEnv(t)
	read, write := e.credential("alice", "read"), e.credential("alice", "write")
	body := []byte(`{"quota_bytes": 1000}`)
	for _, path := range []string{"/api/openxet/v1/admin/tenants/alice/limits", "/api/openxet/v1/admin/tenants"} {
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			if strings.HasSuffix(path, "tenants") && m != "GET" {
				continue
			}
			wantError(t, e.do(m, path, "", body), 401, "unauthorized")
			wantError(t, e.do(m, path, read, body), 403, "forbidden")
			wantError(t, e.do(m, path, write, body), 403, "forbidden")
			if r := e.do(m, path, e.admin, body); r.Status != 200 {
				t.Fatalf("%s %s as admin: %d %s", m, path, r.Status, r.Body)
			}
		}
	}
	r := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil)
	m := r.json(t)
	if m["quota_bytes"] != float64(-1) || m["source"].(map[string]any)["quota_bytes"] != "default" {
		t.Fatalf("after DELETE: %s", r.Body)
	}
	for _, bad := range []string{`{"quota_bytes": -5}`, `{"tenant_burst": 0}`, `{"nonsense": 1}`, `not json`} {
		wantError(t, e.do("PUT", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, []byte(bad)), 400, "bad_request")
	}
	wantError(t, e.do("GET", "/api/openxet/v1/admin/tenants/..%2Fetc/limits", e.admin, nil), 400, "bad_request")
}

// TestAdminLimitsRefuseBadDocuments: a limits document is one JSON object;
// trailing data, null and anything but an object are refused with 400 and
// change nothing (before, `{}{"quota_bytes":1}` applied `{}` and wiped
// every override).
func TestAdminLimitsRefuseBadDocuments(t *testing.T) {
	e := newTestEnv(t)
	e.credential("alice", "read")
	path := "/api/openxet/v1/admin/tenants/alice/limits"
	e.putLimits("alice", map[string]any{"quota_bytes": 5000, "tenant_burst": 7})
	before := e.do("GET", path, e.admin, nil)
	docBefore, _, err := e.st.TenantLimits(t.Context(), "alice")
	if before.Status != 200 || err != nil {
		t.Fatalf("GET: %d %s %v", before.Status, before.Body, err)
	}
	for _, bad := range []string{
		`{}{"quota_bytes":1}`,
		`{"quota_bytes":1}{}`,
		`{} x`,
		`{}]`,
		`null`,
		` null `,
		`[]`,
		`1`,
		`"quota_bytes"`,
		`true`,
		``,
		`{"quota_bytes": 1`,
		`{"quota_bytes": null, "quota_bytes": 1} {}`,
	} {
		r := e.do("PUT", path, e.admin, []byte(bad))
		if r.Status != 400 || r.json(t)["error"] != "bad_request" {
			t.Errorf("PUT %q: %d %s, want 400 bad_request", bad, r.Status, r.Body)
		}
		after := e.do("GET", path, e.admin, nil)
		doc, _, err := e.st.TenantLimits(t.Context(), "alice")
		if err != nil || string(doc) != string(docBefore) || string(after.Body) != string(before.Body) {
			t.Fatalf("after PUT %q: index %s (was %s), GET %s (was %s)", bad, doc, docBefore, after.Body, before.Body)
		}
	}
	// Whitespace around one object is fine.
	if r := e.do("PUT", path, e.admin, []byte(" {\"quota_bytes\": 6000}\n ")); r.Status != 200 || r.json(t)["quota_bytes"] != float64(6000) {
		t.Fatalf("one object with whitespace: %d %s", r.Status, r.Body)
	}
}

// TestAdminLimitsUnknownTenant: a tenant the index does not know (no
// credential, usage, repo or limits record) is 404 on GET, PUT and DELETE
// of its limits, and nothing is written; PUT ?create=1 makes it known.
// Before, a typo answered the defaults and PUT set limits nobody has.
func TestAdminLimitsUnknownTenant(t *testing.T) {
	e := newTestEnv(t)
	e.credential("alice", "read")
	const path = "/api/openxet/v1/admin/tenants/ghost/limits"
	counts := func() map[string]int64 {
		m, err := e.st.Counts(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := counts()
	for _, c := range []struct{ method, query, body string }{
		{"GET", "", ""},
		{"PUT", "", `{"quota_bytes": 1000}`},
		{"PUT", "?create=0", `{"quota_bytes": 1000}`},
		{"PUT", "?create=false", `{}`},
		{"DELETE", "", ""},
	} {
		r := e.do(c.method, path+c.query, e.admin, []byte(c.body))
		wantError(t, r, 404, "not_found")
		if m := r.json(t); !strings.Contains(m["message"].(string), "ghost") || !strings.Contains(m["hint"].(string), "create=1") {
			t.Fatalf("%s %s: %s", c.method, c.query, r.Body)
		}
	}
	wantError(t, e.do("PUT", path+"?create=maybe", e.admin, []byte(`{}`)), 400, "bad_request")
	if diff := cmp.Diff(before, counts()); diff != "" {
		t.Fatalf("refusals changed the index (-before +after):\n%s", diff)
	}
	if _, ok, _ := e.st.TenantLimits(t.Context(), "ghost"); ok {
		t.Fatal("limits stored for an unknown tenant")
	}
	// Known tenants are served as before, with or without create.
	if r := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil); r.Status != 200 {
		t.Fatalf("known tenant: %d %s", r.Status, r.Body)
	}
	if r := e.do("PUT", "/api/openxet/v1/admin/tenants/alice/limits?create=1", e.admin, []byte(`{"quota_bytes": 5}`)); r.Status != 200 {
		t.Fatalf("known tenant with create=1: %d %s", r.Status, r.Body)
	}
	// create=1 makes the tenant known.
	r := e.do("PUT", path+"?create=1", e.admin, []byte(`{"quota_bytes": 1000}`))
	if r.Status != 200 || r.json(t)["quota_bytes"] != float64(1000) {
		t.Fatalf("PUT ?create=1: %d %s", r.Status, r.Body)
	}
	if r := e.do("GET", path, e.admin, nil); r.Status != 200 || r.json(t)["quota_bytes"] != float64(1000) {
		t.Fatalf("GET after create: %d %s", r.Status, r.Body)
	}
	if r := e.do("DELETE", path, e.admin, nil); r.Status != 200 {
		t.Fatalf("DELETE after create: %d %s", r.Status, r.Body)
	}
}

// TestQuotaIsExact: 64 concurrent uploaders of distinct xorbs against a
// quota that fits only some. Usage never passes the quota, each refusal is
// 403 or 503 as specified, and usage equals the owned xorbs' sizes.
func TestQuotaIsExact(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	type x struct {
		body []byte
		info xet.XorbInfo
	}
	xs := make([]x, 64)
	for i := range xs {
		xs[i].body, xs[i].info = xet.BuildXorb(randomChunks(uint64(100+i), 1, 20_000), false)
	}
	quota := 20*xs[0].info.StreamLen + 7
	e.putLimits("alice", map[string]any{"quota_bytes": quota})
	var wg sync.WaitGroup
	statuses := make([]int, len(xs))
	for i := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.http.URL+"/v1/xorbs/default/"+xs[i].info.Hash.String(), bytes.NewReader(xs[i].body))
			req.Header.Set("Authorization", "Bearer "+alice)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := readAll(res)
			statuses[i] = res.StatusCode
			switch res.StatusCode {
			case 200:
			case 403:
				if !strings.Contains(string(b), "quota_exceeded") {
					t.Errorf("403 body %s", b)
				}
			case 503:
				if !strings.Contains(string(b), "quota_pending") || res.Header.Get("Retry-After") == "" {
					t.Errorf("503 %v %s", res.Header, b)
				}
			default:
				t.Errorf("status %d %s", res.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	var stored int64
	for i, s := range statuses {
		if s == 200 {
			stored += xs[i].info.StreamLen
		}
	}
	usage := e.snapshot().Usage["alice"]
	if usage > quota || usage != stored || stored == 0 {
		t.Fatalf("usage %d, stored %d, quota %d (statuses %v)", usage, stored, quota, statuses)
	}
	if rows := e.snapshot().Rows["xorb_owners"]; rows != int64(usage/xs[0].info.StreamLen) {
		t.Fatalf("%d owner rows for usage %d", rows, usage)
	}
}

// TestOverQuotaTenantCanStillReadDedupAndRegister: reads, dedup queries
// and shard uploads never stop because of a quota.
func TestOverQuotaTenantCanStillReadDedupAndRegister(t *testing.T) {
	e := newTestEnv(t)
	alice := e.credential("alice", "write")
	x1, info := xet.BuildXorb(randomChunks(30, 3, 20_000), false)
	f := e.upload(alice, x1)
	e.putLimits("alice", map[string]any{"quota_bytes": 1})
	if r := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil); r.Status != 200 {
		t.Fatalf("read: %d %s", r.Status, r.Body)
	}
	if r := e.do("GET", "/v1/chunks/default/"+info.Chunks[0].Hash.String(), alice, nil); r.Status != 200 {
		t.Fatalf("dedup: %d %s", r.Status, r.Body)
	}
	// A new file made of the stored xorb's chunks [1,3): only a shard.
	g := xet.FileInfo{Terms: []xet.Term{{Xorb: info.Hash, UnpackedBytes: info.Chunks[1].Size + info.Chunks[2].Size, ChunkStart: 1, ChunkEnd: 3}},
		Verification: []xet.Hash{xet.RangeHash([]xet.Hash{info.Chunks[1].Hash, info.Chunks[2].Hash})}, Flags: 0x80000000}
	g.Hash = xet.FileHash([]xet.Leaf{{Hash: info.Chunks[1].Hash, Size: uint64(info.Chunks[1].Size)}, {Hash: info.Chunks[2].Hash, Size: uint64(info.Chunks[2].Size)}})
	sh := &xet.Shard{Files: []xet.FileInfo{g}}
	if r := e.do("POST", "/v1/shards", alice, sh.MarshalUpload()); r.Status != 200 {
		t.Fatalf("shard: %d %s", r.Status, r.Body)
	}
	x2, info2 := xet.BuildXorb(randomChunks(31, 1, 1000), false)
	wantError(t, e.postXorb(alice, x2, info2.Hash), 403, "quota_exceeded")
}
