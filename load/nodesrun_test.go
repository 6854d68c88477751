package load

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"openxet/server"
	"openxet/store"
)

// startNodes runs n servers on one data directory, as several `openxet
// serve` processes share one (one SQLite index, one file:// bucket, one
// signing key): each has its own store handle, limiters, caches, memory
// budget and metrics registry. mutate changes every node's configuration;
// each node's handler is its own (wrap gets the node's index).
func startNodes(t *testing.T, n int, wrap func(int, http.Handler) http.Handler, mutate ...func(*server.Config)) []testServer {
	t.Helper()
	dir := t.TempDir()
	key := make([]byte, 32)
	rand.Read(key)
	var out []testServer
	for i := range n {
		st, err := store.Open(context.Background(), store.DirConfig(dir))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg := testServerConfig()
		cfg.SigningKey = key
		for _, m := range mutate {
			m(&cfg)
		}
		srv, err := server.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
		if err != nil {
			t.Fatal(err)
		}
		var h http.Handler = srv.Handler()
		if wrap != nil {
			h = wrap(i, h)
		}
		hs := httptest.NewServer(h)
		t.Cleanup(func() {
			hs.Close()
			st.Close()
		})
		ts := testServer{url: hs.URL}
		if i == 0 {
			if _, ts.admin, err = st.CreateCredential(context.Background(), "admin", []string{"admin", "write"}); err != nil {
				t.Fatal(err)
			}
		} else {
			ts.admin = out[0].admin
		}
		out = append(out, ts)
	}
	return out
}

func urlsOf(ns []testServer) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.url
	}
	return out
}

// servedByEvery reports whether every one of n nodes answered a request of
// class in the phase so far.
func servedByEvery(rec *recorder, p phaseSpan, class string, n int) bool {
	reqs, _, _, _ := rec.snapshot()
	seen := make([]bool, n)
	for _, r := range reqs {
		if r.class == class && r.start >= p.start && r.status != 0 && r.node >= 0 && int(r.node) < n {
			seen[r.node] = true
		}
	}
	return !slices.Contains(seen, false)
}

// TestAbuseOverNodes runs the abuse scenario against three nodes on one
// data directory and checks the scale-out rules through what the run
// reports: every node got honest and abusive traffic and was checked
// against its own limits (a credential limit of 1/s with burst 4, 3 auth
// failures a minute, an in-flight cap of 8 per credential, each per node),
// every node was seen enforcing the abuser's override before the attack,
// the held reads, 12 in all but 4 per node, were never refused for the cap
// (a count over all nodes would have refused), the abuser's quota held over
// all nodes, and every honest tenant's usage, read back through one node,
// is what it stored through all of them. The abuse phase is held open
// until every node was offered more than each limit allows and more reads
// were open at once than one node's cap.
func TestAbuseOverNodes(t *testing.T) {
	const n, authFailuresPerMinute, inFlight = 3, 3, 8
	ns := startNodes(t, n, nil, func(c *server.Config) {
		c.AuthFailuresPerMinute = authFailuresPerMinute
		c.Limits.MaxInFlightPerCredential = inFlight
	})
	cfg := tinyConfig(ns[0], Abuse)
	cfg.Servers = urlsOf(ns)
	a := &cfg.Abuser
	a.CredentialRequestsPerSecond, a.CredentialBurst = 1, 4
	a.AuthFailuresPerMinute = authFailuresPerMinute
	a.SprayWorkers = 1
	a.QuotaHeadroomBytes = 1
	a.Readers = 12
	cfg.holdPhase = func(p phaseSpan, rec *recorder, ab *abuser) bool {
		if p.name == "baseline" {
			return servedByEvery(rec, p, classHonest, n)
		}
		return servedByEvery(rec, p, classHonest, n) &&
			allOver(ab.floodEnvelopes()) && (ab.spray == nil || allOver(ab.sprayEnvelopes())) &&
			ab.quotaReached.Load() > 0 && ab.heldPeak.Load() > inFlight
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		logReport(t, r)
	}
	if !r.OK || honestRefusals(r) != 0 {
		logReport(t, r)
		t.Fatalf("OK %v, honest refusals %d, failures %v", r.OK, honestRefusals(r), r.Failures)
	}
	if len(r.Nodes) != n || r.Server != strings.Join(cfg.Servers, ",") {
		t.Fatalf("report names %d nodes (%q), want %d", len(r.Nodes), r.Server, n)
	}
	for i, node := range r.Nodes {
		if node.URL != cfg.Servers[i] || len(node.Phases) != 2 {
			t.Fatalf("node %d: %+v", i, node)
		}
		for _, p := range node.Phases {
			if p.Honest.Admitted == 0 {
				t.Errorf("%s %s: no honest request admitted", node.URL, p.Name)
			}
		}
		if p := node.Phases[1]; p.Abuser == nil || p.Abuser.RateLimited == 0 {
			t.Errorf("%s: the abuser was never rate limited there: %+v", node.URL, p.Abuser)
		}
		if m := node.Memory; !m.Measured || m.BudgetBytes != 512<<20 {
			t.Errorf("%s: memory %+v, want it measured against its own 512MiB budget", node.URL, m)
		}
	}
	if r.Memory.BudgetBytes != n*512<<20 {
		t.Errorf("deployment budget %d, want %d (the nodes' budgets summed)", r.Memory.BudgetBytes, n*512<<20)
	}
	ar := r.Abuser
	if ar == nil || ar.Spray == nil || len(ar.Nodes) != n {
		t.Fatalf("abuser report %+v", ar)
	}
	var admitted int64
	for _, nr := range ar.Nodes {
		if nr.OverrideSeconds == nil {
			t.Errorf("%s: never seen enforcing the abuser's credential limit", nr.Node)
		}
		if nr.Flood.Offered <= nr.Flood.Allowed || nr.Flood.Admitted > nr.Flood.Allowed {
			t.Errorf("%s: flood %+v, want offered over allowed and admitted within", nr.Node, nr.Flood)
		}
		if nr.HoldReaders != 4 || nr.InFlightLimit != inFlight || nr.InFlightRefusals != 0 {
			t.Errorf("%s: %d readers, in-flight cap %d, %d refused for it; want 4, %d, 0", nr.Node, nr.HoldReaders, nr.InFlightLimit, nr.InFlightRefusals, inFlight)
		}
		admitted += nr.Flood.Admitted
	}
	if ar.Flood.Admitted != admitted || ar.Flood.Allowed < int64(n)*ar.Nodes[0].Flood.Allowed/2 {
		t.Errorf("flood over all nodes %+v, nodes admitted %d in all", ar.Flood, admitted)
	}
	// One index: the quota is exact even over several nodes.
	if ar.QuotaStored != 0 || ar.UsageBytes > ar.QuotaBytes {
		t.Errorf("abuser stored %d quota uploads, usage %d, quota %d", ar.QuotaStored, ar.UsageBytes, ar.QuotaBytes)
	}
	if ac := r.Accounting; ac == nil || ac.Checked != cfg.Tenants || ac.Mismatches != 0 || ac.StoredBytes == 0 || ac.UsageBytes < ac.StoredBytes {
		t.Errorf("accounting %+v, want every tenant checked and matching", ac)
	}
	var b bytes.Buffer
	r.WriteText(&b)
	for _, want := range append(slices.Clone(cfg.Servers), "against 3 nodes", "per node", "honest usage: 4 of 4 tenants") {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range append(slices.Clone(cfg.Servers), "<h2>Nodes (3)</h2>", "Memory of the 3 nodes together") {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
}

func derefOr(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}
