package index

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestCheckpointsCountedAndLogged: every background checkpoint is counted
// with its time; one of 5 ms or more is logged at DEBUG with its start, one
// of SlowCheckpoint or more at INFO and counted as slow; a short one is
// not logged.
func TestCheckpointsCountedAndLogged(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := &DB{log: log}
	ctx := context.Background()
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, dur := range []time.Duration{time.Millisecond, 7 * time.Millisecond, SlowCheckpoint, 3 * SlowCheckpoint / 2} {
		d.checkpointed(ctx, at, dur, WALCheckpoint{LogPages: 40, CopiedPages: 30})
	}
	want := CheckpointStats{Checkpoints: 4, Slow: 2, Time: 258 * time.Millisecond}
	if got := d.CheckpointStats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantLines := []string{"level=DEBUG msg=\"index checkpoint\" start=2026-12-05T08:00:00.000Z ms=7 log_pages=40 copied_pages=30",
		"level=INFO msg=\"index checkpoint\" start=2026-12-05T08:00:00.000Z ms=100 log_pages=40 copied_pages=30",
		"level=INFO msg=\"index checkpoint\" start=2026-12-05T08:00:00.000Z ms=150 log_pages=40 copied_pages=30"}
	if len(lines) != len(wantLines) {
		t.Fatalf("log:\n%s\nwant %d lines", out.String(), len(wantLines))
	}
	for i, l := range lines {
		if _, rest, _ := strings.Cut(l, " "); rest != wantLines[i] { // after time=
			t.Errorf("log line %d: %s\nwant %s", i, rest, wantLines[i])
		}
	}
}
