package main

import (
	"bytes"
	"context"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestRead: a request task traced in this process comes back with its
// tenant, a time at least as long as what it did, and that time split
// into running and blocked (a channel wait); a task of another type is
// not a request.
func TestRead(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skip("a trace is running already:", err)
	}
	ctx, task := trace.NewTask(context.Background(), "request")
	trace.Log(ctx, "tenant", "alice")
	start := time.Now()
	for time.Since(start) < 5*time.Millisecond { // running
	}
	wake := make(chan struct{})
	go func() { time.Sleep(5 * time.Millisecond); close(wake) }()
	<-wake // blocked
	took := time.Since(start)
	task.End()
	_, other := trace.NewTask(context.Background(), "other")
	other.End()
	trace.Stop()

	rs, _, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d requests, want 1", len(rs))
	}
	r := rs[0]
	if r.tenant != "alice" || r.total() < took {
		t.Fatalf("tenant %q, time %v (it took %v)", r.tenant, r.total(), took)
	}
	var blocked, sum time.Duration
	for k, d := range r.split {
		sum += d
		if strings.HasPrefix(k, "blocked") {
			blocked += d
		}
	}
	if r.split["running"] < 4*time.Millisecond || blocked < 4*time.Millisecond || sum > r.total() {
		t.Fatalf("split %v of %v", r.split, r.total())
	}
	var out bytes.Buffer
	report(&out, "honest", rs)
	if !strings.Contains(out.String(), "honest: 1 requests") {
		t.Fatalf("report: %s", out.String())
	}
}
