package store

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"openxet/xet"
)

// walFrames is the number of pages the write-ahead log file of index has
// room for (its size; SQLite reuses a log from its start after a complete
// checkpoint, so the size is the most the log held at once).
func walFrames(tb testing.TB, index string) int {
	tb.Helper()
	fi, err := os.Stat(index + "-wal")
	if err != nil {
		tb.Fatal(err)
	}
	const header, frameHeader, page = 32, 24, 4096
	return int(max(fi.Size()-header, 0) / (frameHeader + page))
}

// TestSQLiteCheckpointsOffTheRequestPath: with background checkpoints no
// commit checkpoints, however long the log grows (a commit that does makes
// its request wait for the copy and the fsync: the stalls of issue 34
// item 4), until the backstop; a checkpoint on the checkpoint connection
// copies the whole log, and the commits after it reuse the log from its
// start. The control, CheckpointEvery < 0, is SQLite's own way: commits
// checkpoint at 1000 pages, so the log never grows much past them.
func TestSQLiteCheckpointsOffTheRequestPath(t *testing.T) {
	ctx := context.Background()
	const sqliteAuto = 1000 // SQLite's wal_autocheckpoint
	seed := uint64(0)
	// putUntil uploads until the log has room for frames pages, or 1,000
	// uploads (about 3.5 times what that takes without checkpoints).
	putUntil := func(s *Store, index string, frames int) {
		t.Helper()
		for n := 0; walFrames(t, index) < frames && n < 1000; n++ {
			seed++
			body, info := xet.BuildXorb(chunksOf(seed, 200, 64), false)
			if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name       string
		every      int // Config.CheckpointEvery's sign
		wantGrowth bool
	}{
		{"background", 0, true},
		{"on commit", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			index := filepath.Join(t.TempDir(), "index.db")
			s := New(Config{IndexPath: index, BucketURL: "mem://", CheckpointEvery: time.Duration(tc.every)})
			s.checkpointsByHand = true
			if err := s.Open(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Writes until the log holds three times what makes a commit
			// checkpoint, or many more writes than that takes.
			start := seed
			putUntil(s, index, 3*sqliteAuto)
			grew := walFrames(t, index) >= 3*sqliteAuto
			if grew != tc.wantGrowth {
				t.Fatalf("after %d uploads the log has room for %d pages; grown past %d: %v, want %v",
					seed-start, walFrames(t, index), 3*sqliteAuto, grew, tc.wantGrowth)
			}
			if !tc.wantGrowth {
				if s.idx.HasCheckpointConn() {
					t.Fatal("a checkpoint connection without background checkpoints")
				}
				return
			}
			c, err := s.idx.Checkpoint(ctx)
			if err != nil || c.LogPages < 3*sqliteAuto || c.CopiedPages != c.LogPages {
				t.Fatalf("checkpoint: %+v %v; want every page of a log of at least %d copied", c, err, 3*sqliteAuto)
			}
			size := walFrames(t, index)
			for range 50 {
				seed++
				body, info := xet.BuildXorb(chunksOf(seed, 200, 64), false)
				if _, err := s.PutXorb(ctx, "alice", info, body[:info.StreamLen], Unlimited); err != nil {
					t.Fatal(err)
				}
			}
			if got := walFrames(t, index); got != size {
				t.Fatalf("after a checkpoint and 50 uploads the log has room for %d pages, want the %d it had (reused from its start)", got, size)
			}
			if c, err := s.idx.Checkpoint(ctx); err != nil || c.LogPages == 0 || c.LogPages >= size {
				t.Fatalf("the next checkpoint: %+v %v; want a log restarted at its start", c, err)
			}
		})
	}
}

// BenchmarkCheckpointPauses measures what checkpoints of a SQLite index
// cost the uploads that meet them: PutXorb of xorbs with 1,000 chunks (the
// layout of a 64 MiB xorb; the bucket is mem:// so that the index is all
// there is), one after another as fast as they go (about 50 times the
// index writes of uploads at disk speed, so checkpoints are large and
// frequent), in three modes:
//   - on_commit: SQLite's own way (before issue 34 item 4), a commit that
//     finds 1,000 pages of log checkpoints before it returns;
//   - background: serve's default, a checkpoint every
//     DefaultCheckpointEvery on the checkpoint connection (run here by the
//     benchmark so that it can time them);
//   - none: no checkpoint at all, the control: what the machine's own
//     noise costs.
//
// Metrics: the upload latency's median, p99, p99.9 and maximum in ms;
// pauses, the uploads that took more than 10 times the median; in
// background mode also ckpt-max-ms, the longest checkpoint (what a commit
// doing it would have waited), overlap-max-ms, the slowest upload that ran
// while a checkpoint did (what a checkpoint off the request path still
// costs an upload, through the disk or the CPU), other-max-ms, the slowest
// of the others, ckpt-time-%, the share of the run checkpoints took, and
// log-max-pages, the longest log a checkpoint found: walBackstopPages or
// more when the log never restarted and a commit checkpointed (under
// writes that never pause, a write rarely begins while all of the log is
// copied, which a restart needs).
//
//	go test -run '^$' -bench CheckpointPauses -benchtime 20000x -count 1 ./store/
func BenchmarkCheckpointPauses(b *testing.B) {
	for _, mode := range []string{"on_commit", "background", "none"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			every := time.Duration(0)
			if mode == "on_commit" {
				every = -1
			}
			s := New(Config{IndexPath: filepath.Join(b.TempDir(), "index.db"), BucketURL: "mem://", CheckpointEvery: every})
			s.checkpointsByHand = true
			if err := s.Open(ctx); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "none" { // not even the backstop
				if _, err := s.wdb.ExecContext(ctx, "PRAGMA wal_autocheckpoint(0)"); err != nil {
					b.Fatal(err)
				}
			}
			var ckpts []timeSpan
			logMax := 0 // the most pages of log a checkpoint found
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				if mode != "background" {
					return
				}
				t := time.NewTicker(DefaultCheckpointEvery)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						from := time.Now()
						c, err := s.idx.Checkpoint(ctx)
						if err != nil {
							b.Error(err)
						}
						logMax = max(logMax, c.LogPages)
						ckpts = append(ckpts, timeSpan{from, time.Now()})
					}
				}
			}()
			ups := make([]timeSpan, 0, b.N)
			i := uint64(0)
			for b.Loop() {
				i++
				body, info := xet.BuildXorb(chunksOf(i, 1000, 64), false)
				from := time.Now()
				if _, err := s.PutXorb(ctx, "bench", info, body[:info.StreamLen], Unlimited); err != nil {
					b.Fatal(err)
				}
				ups = append(ups, timeSpan{from, time.Now()})
			}
			close(stop)
			<-done
			reportUploads(b, ups)
			if mode == "background" {
				reportCheckpoints(b, ups, ckpts, logMax)
			}
		})
	}
}

// timeSpan is when an upload or a checkpoint began and ended.
type timeSpan struct{ from, to time.Time }

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportUploads reports BenchmarkCheckpointPauses's metrics of the
// uploads' latencies: median, p99, p99.9, maximum and pauses.
func reportUploads(b *testing.B, ups []timeSpan) {
	lat := make([]time.Duration, len(ups))
	for k, u := range ups {
		lat[k] = u.to.Sub(u.from)
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(int(q*float64(len(lat))), len(lat)-1)] }
	pauses := 0
	for _, d := range lat {
		if d > 10*at(0.5) {
			pauses++
		}
	}
	b.ReportMetric(millis(at(0.5)), "p50-ms")
	b.ReportMetric(millis(at(0.99)), "p99-ms")
	b.ReportMetric(millis(at(0.999)), "p99.9-ms")
	b.ReportMetric(millis(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(float64(pauses), "pauses")
}

// reportCheckpoints reports BenchmarkCheckpointPauses's metrics of the
// checkpoints of background mode and the uploads they overlapped; logMax
// is the longest log a checkpoint found.
func reportCheckpoints(b *testing.B, ups, ckpts []timeSpan, logMax int) {
	var longest, busy, overlap, other time.Duration
	for _, c := range ckpts {
		longest = max(longest, c.to.Sub(c.from))
		busy += c.to.Sub(c.from)
	}
	k := 0 // ups and ckpts are in time order
	for _, u := range ups {
		for k < len(ckpts) && !ckpts[k].to.After(u.from) {
			k++
		}
		if k < len(ckpts) && ckpts[k].from.Before(u.to) {
			overlap = max(overlap, u.to.Sub(u.from))
		} else {
			other = max(other, u.to.Sub(u.from))
		}
	}
	b.ReportMetric(millis(longest), "ckpt-max-ms")
	b.ReportMetric(float64(logMax), "log-max-pages")
	b.ReportMetric(millis(overlap), "overlap-max-ms")
	b.ReportMetric(millis(other), "other-max-ms")
	b.ReportMetric(100*float64(busy)/float64(ups[len(ups)-1].to.Sub(ups[0].from)), "ckpt-time-%")
}

// TestCheckpointsCounted: a Store's background checkpoints are counted
// (index's TestCheckpointsCountedAndLogged tests what is counted and
// logged).
func TestCheckpointsCounted(t *testing.T) {
	ctx := context.Background()
	// The loop itself counts what it runs.
	s := New(Config{IndexPath: filepath.Join(t.TempDir(), "index.db"), BucketURL: "mem://", CheckpointEvery: time.Millisecond})
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for deadline := time.Now().Add(time.Minute); s.CheckpointStats().Checkpoints < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("no background checkpoints counted: %+v", s.CheckpointStats())
		}
		time.Sleep(time.Millisecond)
	}
}
