package index

// The background checkpoints of a SQLite index (PostgreSQL has nothing
// to do): on a connection of their own, so that no request waits for one.

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"time"
)

// DefaultCheckpointEvery is Config.CheckpointEvery's default.
const DefaultCheckpointEvery = 100 * time.Millisecond

// walBackstopPages is the wal_autocheckpoint of a SQLite index whose
// checkpoints run in the background (64 MiB of log at 4 KiB pages): a
// commit checkpoints only when the background ones fell that far behind,
// which bounds the log.
const walBackstopPages = 16384

// startCheckpoints opens the connection of a SQLite index's background
// checkpoints and starts their loop (checkpointLoop), unless
// Config.CheckpointEvery turned them off. A checkpoint on a connection of
// its own waits for no writer and makes none wait: SQLite's checkpoint
// copies the log's pages into the file while commits go on appending to
// it (PASSIVE); a commit only restarts the log from its start once a
// checkpoint has copied all of it.
func (d *DB) startCheckpoints(ctx context.Context) error {
	if d.pg || d.checkpointEvery <= 0 {
		return nil
	}
	db, err := openPool(ctx, d.cfg.Location, d.busy, false, walBackstopPages)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	d.cdb = db
	if d.cfg.CheckpointsByHand {
		return nil
	}
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stopCheckpoints, d.checkpointsDone = stop, make(chan struct{})
	go d.checkpointLoop(cctx, d.checkpointEvery, d.checkpointsDone)
	return nil
}

// checkpointLoop checkpoints every interval until ctx ends, then closes
// done. A checkpoint that finds nothing new to copy costs a read of the
// log's header.
func (d *DB) checkpointLoop(ctx context.Context, interval time.Duration, done chan<- struct{}) {
	every(ctx, interval, done, func() {
		from := time.Now()
		c, err := d.Checkpoint(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Debug("index checkpoint", "err", err)
			}
			return
		}
		d.checkpointed(ctx, from, time.Since(from), c)
	})
}

// SlowCheckpoint is how long a background checkpoint of a SQLite index
// runs before the log says so at INFO and openxet_index_checkpoints_slow_total
// counts it (docs/operations.md, "SQLite checkpoints").
const SlowCheckpoint = 100 * time.Millisecond

// checkpointLogged is the shortest checkpoint logged at DEBUG, with its
// start, so that a run's upload pauses can be laid beside its checkpoints
// (compat/bench_checkpoints.py).
const checkpointLogged = 5 * time.Millisecond

// checkpointCounts is what CheckpointStats reports.
type checkpointCounts struct {
	n, slow atomic.Uint64
	nanos   atomic.Int64
}

// CheckpointStats is how many background checkpoints of a SQLite index
// ran, how many of them took SlowCheckpoint or longer, and their time.
type CheckpointStats struct {
	Checkpoints, Slow uint64
	Time              time.Duration
}

// CheckpointStats reports the background checkpoints so far (none on
// PostgreSQL, or with Config.CheckpointEvery negative).
func (d *DB) CheckpointStats() CheckpointStats {
	c := &d.checkpoints
	return CheckpointStats{Checkpoints: c.n.Load(), Slow: c.slow.Load(), Time: time.Duration(c.nanos.Load())}
}

// checkpointed records a background checkpoint that began at from and
// took dur: counted, and logged when it took long enough to matter.
func (d *DB) checkpointed(ctx context.Context, from time.Time, dur time.Duration, c WALCheckpoint) {
	d.checkpoints.n.Add(1)
	d.checkpoints.nanos.Add(int64(dur))
	level := slog.LevelDebug
	switch {
	case dur >= SlowCheckpoint:
		d.checkpoints.slow.Add(1)
		level = slog.LevelInfo
	case dur < checkpointLogged:
		return
	}
	d.log.LogAttrs(ctx, level, "index checkpoint", slog.Time("start", from),
		slog.Float64("ms", float64(dur.Microseconds())/1000),
		slog.Int("log_pages", c.LogPages), slog.Int("copied_pages", c.CopiedPages))
}

// HasCheckpointConn reports whether the DB opened the connection of
// background checkpoints (a SQLite index with Config.CheckpointEvery
// positive).
func (d *DB) HasCheckpointConn() bool { return d.cdb != nil }

// Checkpoint runs one PASSIVE checkpoint of a SQLite index on the
// checkpoint connection: it copies every page of the log that no reader
// still needs into the index file. It returns the pages the log held and
// those copied so far. The background loop calls it; tests with
// Config.CheckpointsByHand call it by hand.
func (d *DB) Checkpoint(ctx context.Context) (WALCheckpoint, error) {
	var c WALCheckpoint
	var busy int
	err := d.cdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &c.LogPages, &c.CopiedPages)
	return c, Err(err)
}

// WALCheckpoint is what a checkpoint reports: the pages of the log and
// those of them copied into the index file.
type WALCheckpoint struct{ LogPages, CopiedPages int }

// Fold folds SQLite's write-ahead log into the index file, so the file is
// complete on its own; PostgreSQL has nothing to do. loc is db's location.
func Fold(ctx context.Context, loc string, db *sql.DB) error {
	if IsPostgres(loc) {
		return nil
	}
	_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}
