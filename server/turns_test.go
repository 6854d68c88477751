package server

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"openxet/xet"
)

// hasTurnWait reports whether an answer's Server-Timing shows a wait for a
// turn.
func hasTurnWait(t *testing.T, r response) bool {
	_, ok := parseTiming(t, r.Header.Get(headerServerTiming))["turn_wait"]
	return ok
}

// TestBusyTenantTakesTurns: with server.turns_above_in_flight at 1, a
// request of a tenant that already has one in progress, by the same
// credential or another of the tenant's, waits for a turn before its
// handler runs, and says so in Server-Timing, the request log and the
// metrics; it is then served as usual. A tenant alone, and another tenant
// beside a busy one, go straight on. A fetch through a signed URL counts
// for the tenant of the credential it was signed for and takes a turn the
// same way.
func TestBusyTenantTakesTurns(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.TurnsAboveInFlight = 1 })
	t.Cleanup(func() { e.srv.turns.Close() }) // Serve would, at its end
	logs := &lockedBuffer{}
	e.srv.log = slog.New(slog.NewJSONHandler(logs, nil))
	alice := e.credential("alice", "read", "write")
	alice2 := e.credential("alice", "read") // another of alice's credentials
	bob := e.credential("bob", "read")
	chunks := randomChunks(3, 3, 10_000)
	x, _ := xet.BuildXorb(chunks, false)
	f := e.upload(alice, x)
	recon := e.do("GET", "/v1/reconstructions/"+f.Hash.String(), alice, nil)
	var rj reconJSON
	if err := json.Unmarshal(recon.Body, &rj); recon.Status != 200 || err != nil {
		t.Fatalf("reconstruction: %d %s %v", recon.Status, recon.Body, err)
	}
	var fetchURL string
	for _, fi := range rj.FetchInfo {
		fetchURL = fi[0].URL
	}

	if r := e.probe(alice); r.Status != 404 || hasTurnWait(t, r) {
		t.Fatalf("alice alone: %d, Server-Timing %q", r.Status, r.Header.Get("Server-Timing"))
	}
	if n := e.srv.turns.Stats().Turns; n != 0 {
		t.Fatalf("%d turns before anyone was busy", n)
	}

	// A xorb upload whose body never comes keeps one of alice's requests
	// in progress.
	conn := e.stalledUpload(t, alice)

	r := e.probe(alice)
	if r.Status != 404 || !hasTurnWait(t, r) {
		t.Fatalf("alice busy: %d, Server-Timing %q; want 404 after a turn", r.Status, r.Header.Get("Server-Timing"))
	}
	lines := requestLines(logs.String())
	if last := lines[len(lines)-1]; last["t_turn_wait"] == nil || last["status"] != float64(404) {
		t.Fatalf("the request log's line of the request that waited for a turn: %v", last)
	}
	if r := e.probe(alice2); r.Status != 404 || !hasTurnWait(t, r) {
		t.Fatalf("alice's other credential while alice is busy: %d, Server-Timing %q; want 404 after a turn", r.Status, r.Header.Get("Server-Timing"))
	}
	if r := e.probe(bob); r.Status != 404 || hasTurnWait(t, r) {
		t.Fatalf("bob beside busy alice: %d, Server-Timing %q", r.Status, r.Header.Get("Server-Timing"))
	}
	if r := e.fetch(fetchURL, ""); r.Status != 206 || !hasTurnWait(t, r) {
		t.Fatalf("alice's fetch while busy: %d, Server-Timing %q", r.Status, r.Header.Get("Server-Timing"))
	}
	if st := e.srv.turns.Stats(); st.Turns != 3 || st.Waiting != 0 {
		t.Fatalf("turns %+v, want 3 given and none waiting", st)
	}
	m := e.do("GET", "/metrics", e.admin, nil)
	for _, want := range []string{"openxet_turns_total 3", "openxet_turns_waiting 0", "openxet_turn_wait_seconds_count 3"} {
		if !strings.Contains(string(m.Body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	conn.Close()
	e.handlers.waitIdle()
	if r := e.probe(alice); r.Status != 404 || hasTurnWait(t, r) {
		t.Fatalf("alice after the upload ended: %d, Server-Timing %q", r.Status, r.Header.Get("Server-Timing"))
	}
}

// TestTurnsOff: server.turns_above_in_flight 0 never makes a request wait
// for a turn.
func TestTurnsOff(t *testing.T) {
	e := newTestEnv(t) // the test environment's Config leaves it 0
	alice := e.credential("alice", "read", "write")
	e.stalledUpload(t, alice)
	if r := e.probe(alice); r.Status != 404 || hasTurnWait(t, r) || e.srv.turns.Stats().Turns != 0 {
		t.Fatalf("turns off: %d, Server-Timing %q", r.Status, r.Header.Get("Server-Timing"))
	}
}
