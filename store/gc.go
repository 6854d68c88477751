package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"openxet/xet"

	"openxet/store/keep"
)

// Collection (docs/design.md §9): one pass of Collect
//
//  1. takes the collector lease in the index (one collector per
//     deployment; another process keeps serving) and, in the same
//     transaction, picks the pass's start T0: later than every touch
//     committed before it, earlier than every touch committed after it
//     (startTx);
//  2. finishes what a pass before it left half done (owner records whose
//     release committed in the index, objects it was deleting, dedup rows to
//     recompute);
//  3. marks, in one snapshot of the index, the reference graph
//     (refgraph.go: the xorbs each tenant's retained files reference, the
//     xorbs any retained file references, the blobs any revision names,
//     who owns what) and what the index knows of touches and releases,
//     lists the bucket, and plans: the owners to release and the objects
//     to delete, by the rules of package store/keep (a dry run stops here and
//     reports the plan);
//  4. releases each planned xorb owner (at once for the xorbs of files
//     its tenant deleted, else after OwnerGrace): the owner row and the
//     tenant's usage change in one index transaction (the only other
//     place a counter changes), then the owner record leaves the bucket.
//     Index first: a crash in between leaves the bucket with an owner the
//     index has not, the index behind the bucket as docs/design.md §3
//     allows; the next pass deletes the record (gc_pending), or reindex
//     restores the owner and a later pass releases it again;
//  5. releases the planned shard owners: their tenant has no retained
//     file registered through the shard and owns none of its xorbs (same
//     order);
//  6. sweeps the planned objects (xorbs, shards, blobs nobody owns or
//     references and nothing touched for the grace period): each is
//     condemned and forgotten by the index in one transaction that checks
//     the same rule again, then deleted from the bucket (its stale owner
//     records first). The dedup rows that offered a collected xorb go,
//     and the chunks they were for are recomputed from their tenants'
//     shards;
//  7. recomputes those dedup rows (and those of released shard owners).
//
// Why a grace period: an upload in progress has sent xorbs but registered
// no shard yet, a shard names xorbs no file references yet, a commit names a
// blob it stored a moment ago; a dedup answer may offer a xorb whose last
// owner is about to release it. The grace period runs from the last touch
// (upload, registration, commit) or release, so each of those has that long
// to finish. The index hooks (touch.go) make the pass safe against the
// races, whatever the grace: a pass never deletes what was touched after it
// started ("after" is ordered through the index, startTx), and its mark
// reads one snapshot of the index, so what a commit keeps from its parent
// without touching it is seen (mark). Every rule measures from one time
// base, T0 and the grace (package store/keep); the releases a pass makes are recorded
// at its T0, so its plan knows when their grace ends.

// DefaultGCGrace is the default grace period, 22 days: hf_xet keeps the
// shards of its own uploads in a local cache for 3 weeks and dedups new
// uploads against them without asking the server, so a xorb must outlive
// the last upload or release that named it by that long, or a stock client
// uploading the same data again would register a shard naming a xorb that
// is gone. It is also far longer than any upload, registration and commit
// sequence, and leaves an operator time to notice a wrong deletion.
const DefaultGCGrace = 22 * 24 * time.Hour

// DefaultGCLeaseTTL is how long the collector lease lasts without renewal.
// A running pass renews it every third of that on a heartbeat of its own
// (GCConfig.LeaseRenew), whatever its steps are doing (a mark of a large
// index reads for longer than this), and again in every batch's
// transaction; a crashed collector's lease expires at most this long after
// its last heartbeat, and another process may collect then.
const DefaultGCLeaseTTL = 30 * time.Second

// OwnerGrace caps how long a xorb owner no retained file of its tenant
// needs is kept after it was created (keep.OwnerGrace, the rule's).
const OwnerGrace = keep.OwnerGrace

// gcBatch is how many owners or objects one index transaction of a pass
// handles (and how many bucket deletes follow it). Uploads queue for the
// same write connection, so a pass's transaction adds its length to their
// latency: at 256 a release or sweep transaction held the connection for
// 130 ms (p99 780 ms) on a loaded 2-vCPU machine, and honest uploads
// waited for the connection up to 280 ms (p99) while a pass ran; at 32,
// 12 ms (p99 90 ms) and 96 ms. A pass is no slower for it (BENCHMARKS.md).
const gcBatch = 32

// ErrCollectorBusy means another collector holds the lease.
var ErrCollectorBusy = errors.New("another collector holds the lease")

// GCConfig says how a collection pass runs.
type GCConfig struct {
	// Grace is how long an object or owner nobody needs is kept after it
	// was last touched or released; 0 keeps nothing (tests, emergencies).
	Grace time.Duration
	// DryRun reports what a pass would do and changes nothing (it takes
	// no lease either).
	DryRun bool
	// LeaseTTL is how long the lease lasts without renewal; 0 means
	// DefaultGCLeaseTTL.
	LeaseTTL time.Duration
	// LeaseRenew is how often the pass's heartbeat renews the lease; 0
	// means a third of LeaseTTL. It runs on the wall clock (a ticker);
	// what it writes reads Config.Now.
	LeaseRenew time.Duration
	// Renewed, when set, is called after each renewal of the heartbeat
	// with its error (nil: renewed; ErrCollectorBusy: the lease was gone
	// and the pass stops). For tests.
	Renewed func(error)
	// Progress, when set, is told how far the pass is.
	Progress Progress
	// Hook, when set, is called between the steps of a pass with the
	// step's name, and after each read of its mark ("mark: files read",
	// ...; those run inside the mark's snapshot); an error stops the pass
	// right there, as a crash would (no clean-up, the lease stays until
	// it expires). For tests.
	Hook func(step string) error
}

// GCReport says what one pass did (or, for a dry run, would do).
type GCReport struct {
	DryRun   bool          `json:"dry_run"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// ReleasedOwners xorb owners released, giving back ReleasedBytes of
	// usage in all, per tenant in ReleasedByTenant.
	ReleasedOwners      int              `json:"released_owners"`
	ReleasedBytes       int64            `json:"released_bytes"`
	ReleasedByTenant    map[string]int64 `json:"released_by_tenant,omitempty"`
	ReleasedShardOwners int              `json:"released_shard_owners"`
	// Deleted objects and their bytes in the bucket.
	DeletedXorbs  int   `json:"deleted_xorbs"`
	DeletedShards int   `json:"deleted_shards"`
	DeletedBlobs  int   `json:"deleted_blobs"`
	DeletedBytes  int64 `json:"deleted_bytes"`
	// Resumed is work an earlier, interrupted pass left: owner records
	// deleted and objects finished.
	Resumed int `json:"resumed"`
	// Deferred owners and objects the pass would have released or deleted
	// were touched after it started (an upload, registration or commit
	// raced it); the next pass looks again. A touch made before the pass
	// started never defers it.
	Deferred int `json:"deferred"`
	// Waiting objects nobody owns or references, still within the grace
	// period, and their bytes.
	Waiting      int   `json:"waiting"`
	WaitingBytes int64 `json:"waiting_bytes"`
}

// Collect runs one collection pass. ErrCollectorBusy when another
// collector holds the lease (nothing changed).
func (s *Store) Collect(ctx context.Context, cfg GCConfig) (GCReport, error) {
	p, err := s.collect(ctx, cfg)
	return p.rep, err
}

// collect runs one pass and returns it (its plan and what it did, for
// tests).
func (s *Store) collect(ctx context.Context, cfg GCConfig) (*pass, error) {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultGCLeaseTTL
	}
	if cfg.LeaseRenew <= 0 {
		cfg.LeaseRenew = cfg.LeaseTTL / 3
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, int, int) {}
	}
	p := &pass{s: s, cfg: cfg, holder: randomHex(8), kept: map[string]bool{}}
	start := s.now()
	p.rep.DryRun = cfg.DryRun
	p.rep.Started = start.UTC()
	err := p.run(ctx)
	p.rep.Duration = s.now().Sub(start)
	if err != nil && !p.hookErr && !cfg.DryRun && !errors.Is(err, ErrCollectorBusy) {
		// Stopped (cancelled, bucket error): what is done is consistent;
		// give the lease back so the next pass need not wait for it.
		s.exec(context.WithoutCancel(ctx), `DELETE FROM gc_lease WHERE id = 1 AND holder = ?`, p.holder)
	}
	return p, err
}

type pass struct {
	s      *Store
	cfg    GCConfig
	holder string
	t0     int64     // unix seconds (startTx): touched > t0 means touched after the pass started
	time   keep.Time // t0 and the grace: the time base of every rule (package keep)
	rep    GCReport
	m      *mark
	// plan is what the pass means to do (a dry run's answer); done is
	// what it did of it.
	plan, done gcPlan
	// kept are the objects the plan swept that the pass keeps: an owner
	// of theirs it planned to release stayed.
	kept map[string]bool
	// hookErr: the Hook stopped the pass (a simulated crash: the lease
	// stays).
	hookErr bool
}

func (p *pass) hook(step string) error {
	if p.cfg.Hook == nil {
		return nil
	}
	err := p.cfg.Hook(step)
	p.hookErr = err != nil
	return err
}

func (p *pass) run(ctx context.Context) (err error) {
	if p.cfg.DryRun {
		p.t0 = p.s.now().Unix()
	} else {
		if err := p.lease(ctx, true); err != nil {
			return err
		}
		var stop func()
		ctx, stop = p.heartbeat(ctx)
		defer func() {
			stop()
			if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrCollectorBusy) {
				err = cause // the steps saw a cancelled context: say why
			}
		}()
	}
	p.time = keep.NewTime(p.t0, p.cfg.Grace)
	steps := []struct {
		name string
		fn   func(context.Context) error
		dry  bool
	}{
		{"resumed", p.resume, false},
		{"marked", p.markAndPlan, true},
		{"owners released", p.releaseOwners, true},
		{"shard owners released", p.releaseShardOwners, true},
		{"swept", p.sweep, true},
		{"dedup recomputed", p.recomputeDedup, false},
		{"tenants tidied", p.tidyTenants, false},
	}
	for _, st := range steps {
		if p.cfg.DryRun && !st.dry {
			continue
		}
		if err := st.fn(ctx); err != nil {
			return err
		}
		if err := p.hook(st.name); err != nil {
			return err
		}
	}
	if !p.cfg.DryRun {
		err := p.s.exec(ctx, `DELETE FROM gc_lease WHERE id = 1 AND holder = ?`, p.holder)
		if err != nil {
			return fmt.Errorf("release the collector lease: %w", err)
		}
	}
	return nil
}

// heartbeat renews the pass's lease every LeaseRenew until stop is called
// (which waits for it), so that a pass keeps its lease however long a
// step runs and a crashed one loses it within LeaseTTL. When it finds the
// lease gone (another process took it after it expired: this process
// stalled for longer than LeaseTTL), it cancels the returned context with
// ErrCollectorBusy, so the pass stops; every step that acts checks the
// lease in its own transaction anyway (inLeasedTx). A renewal the index
// refuses (busy, unreachable) is tried again at the next beat.
func (p *pass) heartbeat(ctx context.Context) (context.Context, func()) {
	pctx, cancel := context.WithCancelCause(ctx)
	hctx, stopBeat := context.WithCancel(pctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.LeaseRenew)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			var renewed int64
			err := p.s.inTx(hctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(hctx, `UPDATE gc_lease SET expires = ? WHERE id = 1 AND holder = ?`,
					p.s.now().Add(p.cfg.LeaseTTL).Unix(), p.holder)
				if err != nil {
					return err
				}
				renewed, err = res.RowsAffected()
				return err
			})
			if hctx.Err() != nil {
				return // the pass is stopping: nothing was learnt
			}
			lost := err == nil && renewed == 0
			if lost {
				err = fmt.Errorf("%w: this pass's lease expired and another process took it", ErrCollectorBusy)
				cancel(err)
			}
			if p.cfg.Renewed != nil {
				p.cfg.Renewed(err)
			}
			if lost {
				return
			}
		}
	}()
	return pctx, func() {
		stopBeat()
		<-done
		cancel(nil)
	}
}

// lease takes (first) or renews the collector lease. The first take reads
// T0 inside the transaction: every index write that commits after it reads
// the clock after T0.
func (p *pass) lease(ctx context.Context, first bool) error {
	return p.s.inTx(ctx, func(tx *sql.Tx) error { return p.leaseTx(ctx, tx, first) })
}

func (p *pass) leaseTx(ctx context.Context, tx *sql.Tx, first bool) error {
	now := p.s.now()
	var holder string
	var expires int64
	err := tx.QueryRowContext(ctx, `SELECT holder, expires FROM gc_lease WHERE id = 1`).Scan(&holder, &expires)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("collector lease: %w", err)
	}
	if err == nil && holder != p.holder && (expires > now.Unix() || !first) {
		return fmt.Errorf("%w (%s, until %s)", ErrCollectorBusy, holder, time.Unix(expires, 0).UTC().Format(time.RFC3339))
	}
	if !first && errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: this pass's lease is gone", ErrCollectorBusy)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_lease(id, holder, expires) VALUES (1, ?, ?)
		ON CONFLICT(id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires`, p.holder, now.Add(p.cfg.LeaseTTL).Unix()); err != nil {
		return fmt.Errorf("collector lease: %w", err)
	}
	if first {
		t0, err := startTx(ctx, tx, p.s.pg, now.Unix())
		if err != nil {
			return fmt.Errorf("collector lease: %w", err)
		}
		p.t0 = t0
	}
	return nil
}

// startTx picks a pass's start T0, in the transaction that takes the
// lease, and makes it the touch floor (gc_state 'touch_floor') every later
// touch reads (touchTx): T0 is at least now, one more than the floor the
// last pass set, and every touch committed so far; a touch that commits
// after it is at least floor+1 = T0+1. So "touched after the pass
// started" is touched > T0, ordered through the index whatever the
// clock's resolution: a touch made before the pass never defers it, one
// made after always does (issue 34).
//
// On PostgreSQL a touching transaction that started before this one
// committed read the old floor; this transaction reads every touch since
// that floor (the range, not just its maximum) and the touching one reads
// the floor this one writes, so SERIALIZABLE aborts one of the two
// (index.DB.Tx runs it again) rather than let both commit.
func startTx(ctx context.Context, tx *sql.Tx, pg bool, now int64) (int64, error) {
	var floor int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(value), 0) FROM gc_state WHERE name = 'touch_floor'`).Scan(&floor); err != nil {
		return 0, err
	}
	var latest, n int64
	q := `SELECT COALESCE(MAX(touched), 0), 0 FROM gc_objects WHERE touched > ?`
	if pg {
		q = `SELECT COALESCE(MAX(touched), 0), COUNT(*) FROM gc_objects WHERE touched > ?`
	}
	if err := tx.QueryRowContext(ctx, q, floor).Scan(&latest, &n); err != nil {
		return 0, err
	}
	t0 := max(now, floor+1, latest)
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_state(name, value) VALUES ('touch_floor', ?)
		ON CONFLICT(name) DO UPDATE SET value = excluded.value`, t0); err != nil {
		return 0, err
	}
	return t0, nil
}

// inLeasedTx runs fn in a transaction that first renews the lease, so
// nothing is condemned by a pass that lost it.
func (p *pass) inLeasedTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return p.s.inTx(ctx, func(tx *sql.Tx) error {
		if err := p.leaseTx(ctx, tx, false); err != nil {
			return err
		}
		return fn(tx)
	})
}

// resume finishes what an interrupted pass left: owner records whose
// release the index committed, objects it condemned, dedup rows it owes.
func (p *pass) resume(ctx context.Context) error {
	keys, err := queryStrings(ctx, p.s.db, `SELECT key FROM gc_pending ORDER BY key`)
	if err != nil {
		return err
	}
	if err := p.deletePending(ctx, keys); err != nil {
		return err
	}
	p.rep.Resumed += len(keys)
	doomed, err := queryStrings(ctx, p.s.db, `SELECT key FROM gc_objects WHERE doomed IS NOT NULL ORDER BY key`)
	if err != nil {
		return err
	}
	p.forgetLayouts(doomed)
	for start := 0; start < len(doomed); start += gcBatch {
		batch := doomed[start:min(start+gcBatch, len(doomed))]
		if err := p.deleteObjects(ctx, batch); err != nil {
			return err
		}
		if err := p.finishObjects(ctx, batch); err != nil {
			return err
		}
	}
	p.rep.Resumed += len(doomed)
	p.cfg.Progress("resume", len(keys)+len(doomed), len(keys)+len(doomed))
	return nil
}

// deletePending deletes bucket records the index already dropped, then
// their gc_pending rows.
func (p *pass) deletePending(ctx context.Context, keys []string) error {
	for start := 0; start < len(keys); start += gcBatch {
		batch := keys[start:min(start+gcBatch, len(keys))]
		if err := p.lease(ctx, false); err != nil {
			return err
		}
		for _, k := range batch {
			if err := p.s.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
				return fmt.Errorf("delete %s: %w", k, err)
			}
		}
		err := p.s.inTx(ctx, func(tx *sql.Tx) error {
			for _, k := range batch {
				if _, err := tx.ExecContext(ctx, `DELETE FROM gc_pending WHERE key = ?`, k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *layoutCache) drop(h xet.Hash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, h)
}

// tidyTenants drops every tenant row nothing holds any more.
func (p *pass) tidyTenants(ctx context.Context) error {
	if err := p.s.exec(ctx, `DELETE FROM tenants WHERE `+tidyTenantsWhere); err != nil {
		return fmt.Errorf("tidy tenants: %w", err)
	}
	return nil
}

func queryStrings(ctx context.Context, q queryer, query string, args ...any) ([]string, error) {
	var out []string
	err := eachRow(ctx, q, query, func(r *sql.Rows) error {
		var v string
		if err := r.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, args...)
	return out, err
}

func eachRow(ctx context.Context, q queryer, query string, fn func(*sql.Rows) error, args ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("index query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
