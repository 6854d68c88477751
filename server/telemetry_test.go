package server

import (
	"testing"
)

// TestTelemetryDoesNotSpendTheRate: hf_xet posts its telemetry with the
// tenant's credential; that must not use up the tenant's or the
// credential's allowance, and it is answered even when none is left. It
// still needs a valid token.
func TestTelemetryDoesNotSpendTheRate(t *testing.T) {
	e := newTestEnv(t)
	e.setClock() // the clock stands still: nothing refills
	alice := e.credential("alice", "read")
	e.putLimits("alice", map[string]any{"tenant_requests_per_second": 0.001, "tenant_burst": 2,
		"credential_requests_per_second": 0.001, "credential_burst": 2})
	telemetry := func(step string, token string, status int) {
		t.Helper()
		for i := range 5 {
			r := e.do("POST", "/v1/telemetry", token, []byte(`{"event":"upload"}`))
			if r.Status != status {
				t.Fatalf("%s, telemetry %d: %d %s, want %d", step, i, r.Status, r.Body, status)
			}
		}
	}
	telemetry("full burst", alice, 204)
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("first request after telemetry: %d %s (telemetry spent the burst)", r.Status, r.Body)
	}
	telemetry("one left", alice, 204)
	if r := e.probe(alice); r.Status != 404 {
		t.Fatalf("second request after telemetry: %d %s (telemetry spent the burst)", r.Status, r.Body)
	}
	wantError(t, e.probe(alice), 429, "rate_limited")
	telemetry("none left", alice, 204)
	telemetry("no token", "", 401)
	telemetry("bad token", alice[:len(alice)-4]+"0000", 401)
}
