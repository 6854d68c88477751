package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"openxet/budget"
)

// hubRefusal checks a refusal on a Hub route: the sentence both stock
// clients print is the body's "error" and X-Error-Message; the machine code
// is the body's "code" and X-Error-Code (xErrorCode when the route names
// the Hub's own code); message, hint and request_id are there too.
func hubRefusal(t *testing.T, name string, r response, status int, code, xErrorCode, text string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d (%s)", name, r.Status, status, r.Body)
	}
	m := r.json(t)
	if m["error"] != text || r.Header.Get("X-Error-Message") != text {
		t.Errorf("%s: error %q, X-Error-Message %q; want both %q", name, m["error"], r.Header.Get("X-Error-Message"), text)
	}
	if m["code"] != code || r.Header.Get("X-Error-Code") != xErrorCode {
		t.Errorf("%s: code %v, X-Error-Code %q; want %s, %s", name, m["code"], r.Header.Get("X-Error-Code"), code, xErrorCode)
	}
	if m["message"] == nil || m["request_id"] != r.Header.Get("X-Request-Id") || m["request_id"] == "" {
		t.Errorf("%s: message %v, request_id %v (header %q)", name, m["message"], m["request_id"], r.Header.Get("X-Request-Id"))
	}
	return m
}

// TestHubRefusalsFollowTheHubConvention: on Hub routes a refusal's body
// "error" is the human sentence (message and hint) that @huggingface/hub
// prints, X-Error-Message is the same sentence for huggingface_hub, and the
// code is in "code" and X-Error-Code. The CAS and admin routes keep their
// documented shape ("error" is the code, no X-Error-Message).
func TestHubRefusalsFollowTheHubConvention(t *testing.T) {
	e := newTestEnv(t, smallBudget)
	clk := e.setClock() // nothing refills a rate limit unless the test says so
	alice, reader := e.credential("alice", "write"), e.credential("alice", "read")
	if r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"m"}`)); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}

	t.Run("missing scope", func(t *testing.T) {
		r := e.commitLines(reader, "alice/m", regularFileLine("a.txt", []byte("a")))
		m := hubRefusal(t, "read token commits", r, 403, "forbidden", "forbidden",
			"this credential of tenant alice has scope read; this route needs write. Use a credential with the write scope: openxet credentials create --tenant alice --scope write")
		if m["scope"] != "write" {
			t.Errorf("scope %v, want write", m["scope"])
		}
	})

	t.Run("quota_exceeded", func(t *testing.T) { hubQuotaExceeded(t, e, alice) })

	t.Run("memory_busy", func(t *testing.T) {
		// Another tenant holds the whole budget; alice's commit waits
		// memory_wait (50ms) and is refused.
		// Four other tenants each hold a credential's share (70MiB of 280MiB).
		for _, holder := range []string{"h1", "h2", "h3", "h4"} {
			res, err := e.srv.budget.Reserve(context.Background(), budget.Key{Credential: holder, Tenant: holder}, 70<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Release()
		}
		r := e.commitLines(alice, "alice/m", regularFileLine("a.txt", []byte("a")))
		m := hubRefusal(t, "commit while memory is full", r, 503, "memory_busy", "memory_busy",
			"the server's memory for request work is taken by other requests. Retry in 1 s (Retry-After); fewer concurrent requests help")
		if m["share"] != "budget" {
			t.Errorf("share %v, want budget", m["share"])
		}
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
	})

	t.Run("rate_limited", func(t *testing.T) { hubRateLimited(t, e, clk, alice) })

	t.Run("not found keeps the Hub's X-Error-Code", func(t *testing.T) {
		hubRefusal(t, "unknown repo", e.do("GET", "/api/models/alice/nope", alice, nil), 404, "not_found", "RepoNotFound",
			"repository alice/nope not found. Check the repo id, revision and path")
		hubRefusal(t, "unknown file", e.do("GET", "/alice/m/resolve/main/nope.txt", alice, nil), 404, "not_found", "EntryNotFound",
			"file nope.txt not found in alice/m at "+mustHead(t, e, alice, "alice/m")+". Check the repo id, revision and path")
	})

	t.Run("conflicts", func(t *testing.T) {
		r := e.do("POST", "/api/repos/create", alice, []byte(`{"name":"m"}`))
		m := hubRefusal(t, "repo exists", r, 409, "conflict", "conflict", "You already created this model repo")
		if m["url"] != e.http.URL+"/alice/m" || m["id"] != "alice/m" {
			t.Errorf("409 body without the repo's url and id: %s", r.Body)
		}
		if r := e.do("POST", "/api/models/alice/m/branch/dev", alice, nil); r.Status != 200 {
			t.Fatalf("branch: %d %s", r.Status, r.Body)
		}
		hubRefusal(t, "branch exists", e.do("POST", "/api/models/alice/m/branch/dev", alice, nil), 409, "conflict", "conflict",
			"Reference refs/heads/dev already exists in alice/m")
	})

	t.Run("admin API keeps the CAS shape", func(t *testing.T) {
		r := e.do("GET", "/api/openxet/v1/admin/tenants", alice, nil)
		wantError(t, r, 403, "forbidden")
		if r.Header.Get("X-Error-Message") != "" || r.json(t)["code"] != nil {
			t.Errorf("admin refusal in the Hub shape: %v %s", r.Header, r.Body)
		}
	})
}

// hubQuotaExceeded checks the quota refusal of a preupload in the Hub shape,
// and of a xorb upload in the CAS shape.
func hubQuotaExceeded(t *testing.T, e *testEnv, alice string) {
	preupload := func(token string) response {
		return e.do("POST", "/api/models/alice/m/preupload/main", token, []byte(`{"files":[{"path":"big.bin","size":100000,"sample":""}]}`))
	}
	e.putLimits("alice", map[string]any{"quota_bytes": 1000})
	before := e.snapshot()
	m := hubRefusal(t, "preupload over quota", preupload(alice), 403, "quota_exceeded", "quota_exceeded",
		"tenant alice: this upload of 97.7 KiB would pass the storage quota of 1000 B (0 B stored). Delete files or repos you no longer need, or ask an operator to raise the quota: openxet limits set --tenant alice --quota <size>")
	if m["quota"] != 1000.0 || m["usage"] != 0.0 || m["size"] != 100000.0 || !strings.HasPrefix(m["hint"].(string), "Delete files or repos") {
		t.Errorf("fields: %v", m)
	}
	if after := e.snapshot(); len(after.Objects) != len(before.Objects) {
		t.Errorf("a refused preupload changed the bucket")
	}
	// The same refusal on the CAS route keeps the CAS shape.
	r := e.do("POST", "/v1/xorbs/default/"+strings.Repeat("ab", 32), alice, make([]byte, 5000))
	wantError(t, r, 403, "quota_exceeded")
	if r.Header.Get("X-Error-Message") != "" || r.json(t)["code"] != nil || r.json(t)["request_id"] != r.Header.Get("X-Request-Id") {
		t.Errorf("CAS refusal: X-Error-Message %q, body %s", r.Header.Get("X-Error-Message"), r.Body)
	}
	e.putLimits("alice", map[string]any{"quota_bytes": -1})
}

// hubRateLimited checks the rate-limit refusal of a Hub GET, and of a HEAD
// (headers only).
func hubRateLimited(t *testing.T, e *testEnv, clk *fakeClock, alice string) {
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 0.001, "tenant_burst": 1})
	clk.Add(time.Second) // what the earlier requests spent has refilled
	var r response
	for range 2 {
		if r = e.do("GET", "/api/models/alice/m", alice, nil); r.Status == 429 {
			break
		}
	}
	m := hubRefusal(t, "repo info over rate", r, 429, "rate_limited", "rate_limited",
		"tenant rate limit reached. Slow down and retry in 1000 s (Retry-After)")
	if m["limit"] != "tenant" || r.Header.Get("RateLimit") != `"tenant";r=0;t=1000` {
		t.Errorf("limit %v, RateLimit %q", m["limit"], r.Header.Get("RateLimit"))
	}
	// HEAD gets the headers only.
	h := e.do("HEAD", "/alice/m/resolve/main/x", alice, nil)
	if h.Status != 429 || len(h.Body) != 0 || h.Header.Get("X-Error-Code") != "rate_limited" || !strings.HasPrefix(h.Header.Get("X-Error-Message"), "tenant rate limit reached") {
		t.Errorf("HEAD: %d %q %v", h.Status, h.Body, h.Header)
	}
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 2000, "tenant_burst": 4000})
	clk.Add(time.Hour)
}

func mustHead(t *testing.T, e *testEnv, token, repo string) string {
	t.Helper()
	var info struct{ SHA string }
	json.Unmarshal(e.do("GET", "/api/models/"+repo, token, nil).Body, &info)
	if info.SHA == "" {
		t.Fatalf("no head for %s", repo)
	}
	return info.SHA
}
