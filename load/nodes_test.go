package load

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"openxet/limits"
	"openxet/server"
)

func TestParseServers(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		says string
	}{
		{"http://127.0.0.1:8080", []string{"http://127.0.0.1:8080"}, ""},
		{" http://127.0.0.1:1/ ,https://n2.example:443/base/", []string{"http://127.0.0.1:1", "https://n2.example:443/base"}, ""},
		{"", nil, "empty URL"},
		{"http://127.0.0.1:1,,http://127.0.0.1:2", nil, "element 2 of 3 is empty"},
		{"http://127.0.0.1:1,", nil, "element 2 of 2 is empty"},
		{"http://127.0.0.1:1,ftp://127.0.0.1:2", nil, `"ftp://127.0.0.1:2" (element 2): want an http:// or https:// URL`},
		{"127.0.0.1:8080", nil, "want an http:// or https:// URL"},
		{"http://", nil, "want an http:// or https:// URL with a host"},
		{"http://127.0.0.1:1,http://127.0.0.1:2,HTTP://127.0.0.1:1/", nil, "listed twice (elements 1 and 3)"},
		{"http://127.0.0.1:1/?node=2", nil, "without user, query or fragment"},
		{strings.Repeat("http://127.0.0.1:1,", MaxServers) + "http://127.0.0.1:2", nil, "at most 64"},
	}
	for _, c := range cases {
		got, err := ParseServers(c.in)
		if c.says == "" {
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("ParseServers(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseServers(%q) = %q, %v; want an error saying %q", c.in, got, err, c.says)
		}
	}
}

func TestNodesOf(t *testing.T) {
	ns := nodes{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://node.example:3/base"}
	for u, want := range map[string]int{
		"http://127.0.0.1:2/v1/fetch/ab?c=1":     1,
		"http://127.0.0.1:1":                     0,
		"https://127.0.0.1:1/v1/fetch/ab":        -1, // another scheme
		"http://127.0.0.1:3/v1/fetch/ab":         -1,
		"http://NODE.example:3/base/v1/fetch/ab": 2,
		"http://node.example:3/basement/v1":      -1,
		"::not a url":                            -1,
	} {
		if got := ns.of(u); got != want {
			t.Errorf("of(%s) = %d, want %d", u, got, want)
		}
	}
	c := newCursor(4, 3)
	var got []int
	for range 5 {
		got = append(got, c.next())
	}
	if !slices.Equal(got, []int{1, 2, 0, 1, 2}) {
		t.Errorf("cursor from 4 over 3 nodes gave %v", got)
	}
}

// TestRateLimitPolicy: the load reads a node's RateLimit-Policy the way
// the server writes it (limits.Rate.Policy), to see a limits override in
// effect.
func TestRateLimitPolicy(t *testing.T) {
	for _, c := range []struct {
		rps   float64
		burst int
	}{{1, 4}, {100, 200}, {1000, 2000}, {0.5, 3}, {3, 1}, {7, 10}, {3e9, 5}} {
		q, w := rateLimitPolicy(c.rps, c.burst)
		wq, window := limits.Rate{PerSecond: c.rps, Burst: c.burst}.Policy()
		ww := limits.RetryAfterSeconds(window)
		if q != wq || w != ww {
			t.Errorf("%g/s burst %d: q=%d w=%d, the server announces q=%d w=%d", c.rps, c.burst, q, w, wq, ww)
		}
	}
	if q, w, ok := parsePolicy(`"credential";q=4;w=4`, "credential"); !ok || q != 4 || w != 4 {
		t.Errorf("parsePolicy = %d %d %v", q, w, ok)
	}
	for _, h := range []string{`"tenant";q=4;w=4`, `"credential";q=4`, "", `"in_flight";q=8;qu="concurrent-requests"`} {
		if _, _, ok := parsePolicy(h, "credential"); ok {
			t.Errorf("parsePolicy(%s) accepted it as the credential policy", h)
		}
	}
}

// twoNodeAbuser is an abuser over nodes a and b, each with a credential
// limit of 10/s burst 20 and an in-flight cap of 4, readers readers shared
// out between them, and every counter at zero.
func twoNodeAbuser(readers int) *abuser {
	lim := tenantLimits{CredentialRequestsPerSecond: 10, CredentialBurst: 20, MaxInFlightPerCredential: 4}
	return &abuser{
		cfg: AbuserConfig{Readers: readers}, nodes: nodes{"http://a", "http://b"},
		floodBy: make([]envCounters, 2), sprayBy: make([]envCounters, 2),
		holdOpen: make([]atomic.Int64, 2), holdOpenPeak: make([]atomic.Int64, 2),
		holds:      []holdURL{{node: 0}, {node: 1}},
		nodeLimits: []tenantLimits{lim, lim},
	}
}

// TestCheckNodes: each node's envelope is checked against that node's own
// limit. Two nodes each admitting just under their allowance pass although
// together they admit more than one node allows (rate limits are per
// node); one node over its allowance fails although both together are
// within twice it. A node that refuses held reads for its in-flight cap
// while the run never had enough readers there to reach it fails too.
func TestCheckNodes(t *testing.T) {
	t0 := time.Now()
	set := func(ab *abuser, admitted ...int64) {
		for i, n := range admitted {
			c := &ab.floodBy[i]
			c.first.Store(t0.UnixNano())
			c.last.Store(t0.Add(time.Second).UnixNano()) // allows 20 + 10·1 + 1 = 31
			c.answered.Store(100)
			c.admitted.Store(n)
		}
	}
	cases := []struct {
		name     string
		readers  int
		admitted []int64
		inFlight []int
		fail     string // failure kind, "" for none
		names    string // the node the message names
	}{
		{"each within, together over one node's", 4, []int64{31, 31}, []int{0, 0}, "", ""},
		{"one over, together within two nodes'", 4, []int64{40, 10}, []int{0, 0}, failEnvelope, "http://a"},
		{"refused under the in-flight cap", 4, []int64{1, 1}, []int{0, 1}, failInFlight, "http://b"},
		{"refused with readers enough to reach it", 8, []int64{1, 1}, []int{3, 1}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ab := twoNodeAbuser(c.readers)
			set(ab, c.admitted...)
			rec := newRecorder(t0)
			ar := &AbuserReport{}
			ab.checkNodes(ar, c.inFlight, rec)
			_, _, failures, msgs := rec.snapshot()
			if c.fail == "" {
				if len(failures) != 0 {
					t.Fatalf("failures %v: %v", failures, msgs)
				}
			} else if failures[c.fail] != 1 || len(failures) != 1 || !strings.Contains(msgs[0], c.names) {
				t.Fatalf("failures %v %v, want one %q naming %s", failures, msgs, c.fail, c.names)
			}
			if len(ar.Nodes) != 2 || ar.Flood.Admitted != c.admitted[0]+c.admitted[1] || ar.Flood.Allowed != 62 {
				t.Errorf("report %+v; want both nodes, and over both the admitted summed against 2 × 31", ar)
			}
		})
	}
}

// TestMemoryPerNode: each node's RSS is checked against its own budget;
// the deployment's figures are sums. Node b is over its budget plus
// overhead while the sum is within the summed limit: the run fails, naming
// b.
func TestMemoryPerNode(t *testing.T) {
	const mib = 1 << 20
	m := &memSampler{
		nodes: []*admin{{base: "http://a"}, {base: "http://b"}},
		samples: [][]MemSample{
			{{AtSeconds: 0, RSSBytes: 100 * mib, ReservedBytes: 10 * mib, BudgetBytes: 200 * mib}, {AtSeconds: 1, RSSBytes: 120 * mib, ReservedBytes: 0, BudgetBytes: 200 * mib}},
			{{AtSeconds: 0, RSSBytes: 300 * mib, ReservedBytes: 20 * mib, BudgetBytes: 200 * mib}, {AtSeconds: 1, RSSBytes: 200 * mib, ReservedBytes: 0, BudgetBytes: 200 * mib}},
		},
		total: []MemSample{{AtSeconds: 0, RSSBytes: 400 * mib, ReservedBytes: 30 * mib, BudgetBytes: 400 * mib}, {AtSeconds: 1, RSSBytes: 320 * mib, ReservedBytes: 0, BudgetBytes: 400 * mib}},
	}
	rec := newRecorder(time.Now())
	per, total := m.report(50*mib, rec)
	_, _, failures, msgs := rec.snapshot()
	if failures[failMemory] != 1 || !strings.Contains(msgs[0], "http://b") || strings.Contains(msgs[0], "http://a") {
		t.Fatalf("failures %v %v, want one naming http://b", failures, msgs)
	}
	if per[0].PeakRSSBytes != 120*mib || per[1].PeakRSSBytes != 300*mib || per[1].LimitBytes != 250*mib {
		t.Errorf("per node %+v", per)
	}
	if !total.Measured || total.BudgetBytes != 400*mib || total.LimitBytes != 500*mib || total.PeakRSSBytes != 400*mib || total.PeakReservedBytes != 30*mib {
		t.Errorf("total %+v", total)
	}
}

// TestCheckAccounting: a tenant's usage as the server counts it must be at
// least what the run stored for it and at most that plus what it cannot be
// sure of.
func TestCheckAccounting(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	adm := &admin{base: ts.url, token: ts.admin, hc: http.DefaultClient}
	cred, err := adm.createCredential(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	x, body := newXorb(7, 100<<10)
	c := &client{hc: http.DefaultClient, rec: newRecorder(time.Now()), timeout: time.Minute}
	if a := c.do(ctx, who{}, "POST", ts.url+"/v1/xorbs/default/"+x.info.Hash.String(), cred.Token, body); a.status != http.StatusOK {
		t.Fatalf("upload: %s", a.describe())
	}
	size := x.info.StreamLen
	for _, tc := range []struct {
		stored, unsure int64
		ok             bool
	}{
		{size, 0, true},
		{0, size, true},
		{size / 2, size, true},
		{size + 1, 0, false},
		{0, size - 1, false},
	} {
		tn := &tenant{name: "acct"}
		tn.stored.Store(tc.stored)
		tn.unsure.Store(tc.unsure)
		rec := newRecorder(time.Now())
		ar := checkAccounting(ctx, []*admin{adm}, []*tenant{tn}, rec)
		_, _, failures, _ := rec.snapshot()
		if got := failures[failAccounting] == 0; got != tc.ok || ar.Checked != 1 || ar.UsageBytes != size {
			t.Errorf("stored %d unsure %d against usage %d: ok %v (%v), report %+v; want ok %v", tc.stored, tc.unsure, size, got, failures, ar, tc.ok)
		}
	}
}

// policyRewriter makes a node announce a credential policy that is never
// the override's, as a node that never enforces it would.
type policyRewriter struct{ http.ResponseWriter }

func (w policyRewriter) WriteHeader(code int) {
	if w.Header().Get("RateLimit-Policy") != "" {
		w.Header().Set("RateLimit-Policy", `"credential";q=999;w=1`)
	}
	w.ResponseWriter.WriteHeader(code)
}

// TestAwaitOverride: before the attack, the run waits until every node
// enforces the abuser's credential limit. A node that cached the tenant's
// limits before the override was set keeps its old limit until its cache
// refreshes (limits.cache_ttl, 3 s here): it is probed again until it
// shows the new one. A node that never shows it is a failure, named, once
// the wait is over.
func TestAwaitOverride(t *testing.T) {
	var hide atomic.Bool
	ns := startNodes(t, 2, func(i int, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i == 1 && hide.Load() {
				w = policyRewriter{w}
			}
			next.ServeHTTP(w, r)
		})
	}, func(c *server.Config) { c.LimitsCacheTTL = 3 * time.Second })
	ctx := context.Background()
	adm := &admin{base: ns[0].url, token: ns[0].admin, hc: http.DefaultClient}
	run := func(t *testing.T, tenantName string, wait time.Duration) (*abuser, map[string]int, []string) {
		probe, err := adm.createCredential(ctx, tenantName)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder(time.Now())
		ab := &abuser{
			cfg: AbuserConfig{CredentialRequestsPerSecond: 1, CredentialBurst: 4}, nodes: nodes(urlsOf(ns)), probe: probe,
			c: &client{hc: http.DefaultClient, rec: rec, timeout: time.Minute}, overrideWait: wait,
		}
		// Node b reads the tenant's limits (the defaults) into its cache.
		if a := ab.c.do(ctx, who{}, "GET", ns[1].url+"/v1/chunks/default/"+strings.Repeat("0", 64), probe.Token, nil); a.status != http.StatusNotFound {
			t.Fatalf("first request to node b: %s", a.describe())
		}
		if _, err := adm.setLimits(ctx, tenantName, map[string]any{"credential_requests_per_second": 1, "credential_burst": 4}); err != nil {
			t.Fatal(err)
		}
		ab.overrideSet = time.Now()
		ab.awaitOverride(ctx, rec)
		_, _, failures, msgs := rec.snapshot()
		return ab, failures, msgs
	}
	t.Run("stale cache", func(t *testing.T) {
		ab, failures, msgs := run(t, "stale", overrideWait)
		if len(failures) != 0 {
			t.Fatalf("failures %v: %v", failures, msgs)
		}
		if ab.overrideSeconds[0] < 0 || ab.overrideSeconds[1] < 0 {
			t.Fatalf("override seen after %v", ab.overrideSeconds)
		}
		// Node a dropped its cache entry at the PUT; node b had to be
		// asked again once its cache refreshed.
		if ab.overridePolls[0] != 1 || ab.overridePolls[1] < 2 {
			t.Errorf("probes until the override showed: %v, want 1 on node a and more on node b", ab.overridePolls)
		}
	})
	t.Run("never", func(t *testing.T) {
		hide.Store(true)
		defer hide.Store(false)
		ab, failures, msgs := run(t, "never", time.Second)
		if failures[failOverride] != 1 || len(msgs) != 1 || !strings.Contains(msgs[0], ns[1].url) || !strings.Contains(msgs[0], "last probe:") {
			t.Fatalf("failures %v %v, want one %q naming node b and its last answer", failures, msgs, failOverride)
		}
		if ab.overrideSeconds[0] < 0 || ab.overrideSeconds[1] >= 0 {
			t.Errorf("override seen after %v, want node a only", ab.overrideSeconds)
		}
	})
}
