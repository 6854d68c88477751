package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"gocloud.dev/blob"

	"openxet/xet"
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
//  3. marks, in one snapshot of the index: the xorbs each tenant's
//     retained files reference, the xorbs any retained file references,
//     the blobs any revision names;
//  4. releases each xorb owner whose tenant no longer needs it (at once
//     for the xorbs of files it deleted, else after OwnerGrace): the owner
//     row and the tenant's usage change in one index transaction (the only
//     other place a counter changes), then the owner record leaves the
//     bucket. Index first: a crash in between leaves the bucket with an
//     owner the index has not, the index behind the bucket as docs/design.md §3
//     allows; the next pass deletes the record (gc_pending), or reindex
//     restores the owner and a later pass releases it again;
//  5. releases shard owners whose tenant has no retained file registered
//     through the shard and owns none of its xorbs (same order);
//  6. sweeps: an object (xorb, shard, blob) that nobody owns or references
//     and that nothing touched for the grace period is condemned and
//     forgotten by the index in one transaction that checks all of that
//     again, then deleted from the bucket (its stale owner records first).
//     The dedup rows that offered a collected xorb go, and the chunks they
//     were for are recomputed from their tenants' shards;
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
// without touching it is seen (mark).

// DefaultGCGrace is the default grace period, 22 days: hf_xet keeps the
// shards of its own uploads in a local cache for 3 weeks and dedups new
// uploads against them without asking the server, so a xorb must outlive
// the last upload or release that named it by that long, or a stock client
// uploading the same data again would register a shard naming a xorb that
// is gone. It is also far longer than any upload, registration and commit
// sequence, and leaves an operator time to notice a wrong deletion.
const DefaultGCGrace = 22 * 24 * time.Hour

// DefaultGCLeaseTTL is how long the collector lease lasts without renewal.
// A pass renews it at every batch; a crashed collector's lease expires
// after this long and another process may collect.
const DefaultGCLeaseTTL = 5 * time.Minute

// OwnerGrace caps how long a xorb owner no retained file of its tenant
// needs is kept after it was created: an upload abandoned before its shard
// stops counting against the quota after a day even when gc.grace is
// longer. (An upload that registers its shard later adopts the xorb again:
// nothing is lost, only charged again.) Owners of xorbs the tenant's
// deleted files referenced are released at the next pass.
const OwnerGrace = 24 * time.Hour

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
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultGCLeaseTTL
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, int, int) {}
	}
	p := &pass{s: s, cfg: cfg, holder: randomHex(8)}
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
	return p.rep, err
}

type pass struct {
	s      *Store
	cfg    GCConfig
	holder string
	t0     int64 // unix seconds (startTx): touched > t0 means touched after the pass started
	cutoff int64 // t0 - grace
	rep    GCReport
	m      *mark
	// hookErr: the Hook stopped the pass (a simulated crash: the lease
	// stays).
	hookErr bool
}

// graceEnd is the latest release (or write) time whose grace period is
// over now.
func (p *pass) graceEnd() int64 {
	return p.s.now().Unix() - int64(p.cfg.Grace/time.Second)
}

func (p *pass) hook(step string) error {
	if p.cfg.Hook == nil {
		return nil
	}
	err := p.cfg.Hook(step)
	p.hookErr = err != nil
	return err
}

func (p *pass) run(ctx context.Context) error {
	if p.cfg.DryRun {
		p.t0 = p.s.now().Unix()
	} else {
		if err := p.lease(ctx, true); err != nil {
			return err
		}
	}
	p.cutoff = p.t0 - int64(p.cfg.Grace/time.Second)
	steps := []struct {
		name string
		fn   func(context.Context) error
		dry  bool
	}{
		{"resumed", p.resume, false},
		{"marked", p.mark, true},
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
// (pgTx runs it again) rather than let both commit.
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

// mark is what a pass reads once, after T0.
type mark struct {
	owners      []ownerRow
	ownerCount  map[string]int             // xorb → owners
	need        map[string]map[string]bool // tenant → xorbs its retained files reference
	fileRef     map[string]bool            // xorbs a retained file references
	shardOwners []shardOwnerRow
	shardCount  map[string]int  // shard → owners
	blobs       map[string]bool // blobs a revision names
	touched     map[string]int64
	released    map[string]int64
	dropped     map[[2]string]bool // (tenant, xorb) a released file referenced
	epoch       int64
}

// owned and referenced say what the sweep must keep; the releases of the
// same pass update them.
func (m *mark) owned(x string) bool      { return m.ownerCount[x] > 0 }
func (m *mark) referenced(x string) bool { return m.fileRef[x] }

func (m *mark) ownerReleased(x string) { m.ownerCount[x]-- }

// releasedAt notes a release this pass made, so that its sweep counts the
// object as waiting out its grace period (not as deferred).
func (m *mark) releasedAt(key string, at int64) { m.released[key] = max(m.released[key], at) }
func (m *mark) shardOwnerReleased(shard string) { m.shardCount[shard]-- }

type ownerRow struct {
	xorb, tenant string
	size         int64
	created      int64
}

type shardOwnerRow struct{ shard, tenant string }

// mark reads what the pass keeps, as of one moment after T0: all its reads
// run in one snapshot of the index (inSnapshot). The pass is safe only
// because of that: a commit retains its parent's entries without touching
// them, so a blob a branch has referenced for longer than the grace period
// is kept only because the mark sees a revision naming it. Read statement
// by statement, a commit landing between the read of the commits and that
// of the refs left a ref naming a commit the mark had not read, the repo's
// revisions looked empty, and the sweep deleted every blob of its head
// (issue 34). Whatever commits after the snapshot either names only what a
// revision in the snapshot names, or touched it after T0.
func (p *pass) mark(ctx context.Context) error {
	return p.s.inSnapshot(ctx, func(tx *sql.Tx) error { return p.markIn(ctx, tx) })
}

func (p *pass) markIn(ctx context.Context, db queryer) error {
	m := &mark{ownerCount: map[string]int{}, need: map[string]map[string]bool{}, fileRef: map[string]bool{},
		shardCount: map[string]int{}, blobs: map[string]bool{}, touched: map[string]int64{}, released: map[string]int64{}, dropped: map[[2]string]bool{}}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE((SELECT value FROM gc_state WHERE name = 'epoch'), 0)`).Scan(&m.epoch); err != nil {
		return fmt.Errorf("mark: %w", err)
	}
	err := eachRow(ctx, db, `SELECT xorb, tenant, size, created FROM xorb_owners`, func(r *sql.Rows) error {
		var o ownerRow
		if err := r.Scan(&o.xorb, &o.tenant, &o.size, &o.created); err != nil {
			return err
		}
		m.owners = append(m.owners, o)
		m.ownerCount[o.xorb]++
		return nil
	})
	if err != nil {
		return err
	}
	if err := p.hook("mark: owners read"); err != nil {
		return err
	}
	files := 0
	err = eachRow(ctx, db, `SELECT tenant, terms FROM files`, func(r *sql.Rows) error {
		var tenant string
		var terms []byte
		if err := r.Scan(&tenant, &terms); err != nil {
			return err
		}
		ts, err := decodeTerms(terms)
		if err != nil {
			return err
		}
		need := m.need[tenant]
		if need == nil {
			need = map[string]bool{}
			m.need[tenant] = need
		}
		for _, t := range ts {
			x := t.Xorb.String()
			need[x] = true
			m.fileRef[x] = true
		}
		files++
		return nil
	})
	if err != nil {
		return err
	}
	if err := p.hook("mark: files read"); err != nil {
		return err
	}
	err = eachRow(ctx, db, `SELECT shard, tenant FROM shard_owners`, func(r *sql.Rows) error {
		var o shardOwnerRow
		if err := r.Scan(&o.shard, &o.tenant); err != nil {
			return err
		}
		m.shardOwners = append(m.shardOwners, o)
		m.shardCount[o.shard]++
		return nil
	})
	if err != nil {
		return err
	}
	if err := p.hook("mark: shard owners read"); err != nil {
		return err
	}
	tenants, err := queryStrings(ctx, db, `SELECT DISTINCT tenant FROM repos ORDER BY tenant`)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		rev, err := loadRevisions(ctx, db, t, p.hook)
		if err != nil {
			return err
		}
		for b := range rev.blobs {
			m.blobs[b] = true
		}
	}
	if err := p.hook("mark: revisions read"); err != nil {
		return err
	}
	err = eachRow(ctx, db, `SELECT key, touched, released FROM gc_objects`, func(r *sql.Rows) error {
		var k string
		var t, rel int64
		if err := r.Scan(&k, &t, &rel); err != nil {
			return err
		}
		m.touched[k], m.released[k] = t, rel
		return nil
	})
	if err != nil {
		return err
	}
	if err := p.hook("mark: objects read"); err != nil {
		return err
	}
	err = eachRow(ctx, db, `SELECT tenant, xorb FROM gc_dropped`, func(r *sql.Rows) error {
		var k [2]string
		if err := r.Scan(&k[0], &k[1]); err != nil {
			return err
		}
		m.dropped[k] = true
		return nil
	})
	if err != nil {
		return err
	}
	p.m = m
	p.cfg.Progress("mark", files, files)
	return nil
}

// releaseOwners releases the xorb owners their tenants no longer need: not
// referenced by a retained file of the tenant, not touched since T0, and
// either older than the grace period or referenced by a file the tenant
// released (so deleting a repo gives the quota back at the next pass).
func (p *pass) releaseOwners(ctx context.Context) error {
	var cands []ownerRow
	for _, o := range p.m.owners {
		if p.m.need[o.tenant][o.xorb] {
			continue
		}
		if o.created >= p.t0-int64(min(p.cfg.Grace, OwnerGrace)/time.Second) && !p.m.dropped[[2]string{o.tenant, o.xorb}] {
			continue
		}
		if p.m.touched[xorbKey(o.xorb)] > p.t0 {
			p.rep.Deferred++ // a candidate an upload or registration touched since T0
			continue
		}
		cands = append(cands, o)
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].tenant != cands[j].tenant {
			return cands[i].tenant < cands[j].tenant
		}
		return cands[i].xorb < cands[j].xorb
	})
	if p.cfg.DryRun {
		now := p.s.now().Unix()
		for _, o := range cands {
			p.noteReleased(o.tenant, o.size)
			p.m.ownerReleased(o.xorb)
			p.m.releasedAt(xorbKey(o.xorb), now)
		}
		return nil
	}
	done := 0
	for start := 0; start < len(cands); start += gcBatch {
		batch := cands[start:min(start+gcBatch, len(cands))]
		var keys []string
		var now int64
		err := p.inLeasedTx(ctx, func(tx *sql.Tx) error {
			keys = keys[:0]
			now = p.s.now().Unix()
			for _, o := range batch {
				ok, err := p.releaseOwnerTx(ctx, tx, o, now)
				if err != nil {
					return err
				}
				if ok {
					keys = append(keys, xorbOwnerKey(o.xorb, o.tenant))
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		released := map[string]bool{}
		for _, k := range keys {
			released[k] = true
		}
		for _, o := range batch {
			if released[xorbOwnerKey(o.xorb, o.tenant)] {
				p.noteReleased(o.tenant, o.size)
				p.m.ownerReleased(o.xorb)
				p.m.releasedAt(xorbKey(o.xorb), now)
			}
		}
		if err := p.hook("owners indexed"); err != nil {
			return err
		}
		if err := p.deletePending(ctx, keys); err != nil {
			return err
		}
		done += len(batch)
		p.cfg.Progress("release owners", done, len(cands))
	}
	if len(cands) == 0 {
		p.cfg.Progress("release owners", 0, 0)
	}
	return p.dropSettledHints(ctx)
}

// dropSettledHints forgets the "dropped" hints the pass found nothing to
// do for: the tenant owns no such xorb, or a retained file of it still
// references the xorb. (A hint whose owner was released went with it; one
// deferred by a race stays for the next pass.)
func (p *pass) dropSettledHints(ctx context.Context) error {
	owns := make(map[[2]string]bool, len(p.m.owners))
	for _, o := range p.m.owners {
		owns[[2]string{o.tenant, o.xorb}] = true
	}
	var settled [][2]string
	for k := range p.m.dropped {
		if !owns[k] || p.m.need[k[0]][k[1]] {
			settled = append(settled, k)
		}
	}
	if len(settled) == 0 || p.cfg.DryRun {
		return nil
	}
	return p.s.inTx(ctx, func(tx *sql.Tx) error {
		for _, k := range settled {
			if _, err := tx.ExecContext(ctx, `DELETE FROM gc_dropped WHERE tenant = ? AND xorb = ?`, k[0], k[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (p *pass) noteReleased(tenant string, size int64) {
	p.rep.ReleasedOwners++
	p.rep.ReleasedBytes += size
	if p.rep.ReleasedByTenant == nil {
		p.rep.ReleasedByTenant = map[string]int64{}
	}
	p.rep.ReleasedByTenant[tenant] += size
}

// releaseOwnerTx drops one owner row and its size from the tenant's usage,
// and queues the owner record's deletion from the bucket. It reports
// false when the owner is gone or was touched since the pass started.
func (p *pass) releaseOwnerTx(ctx context.Context, tx *sql.Tx, o ownerRow, now int64) (bool, error) {
	var touched int64
	err := tx.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, xorbKey(o.xorb)).Scan(&touched)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	if touched > p.t0 {
		p.rep.Deferred++
		return false, nil
	}
	return releaseOwner(ctx, tx, o.xorb, o.tenant, now)
}

// releaseOwner drops an owner row, subtracts its size from the tenant's
// usage (never below zero: an index where it would is refused as
// inconsistent) and queues the owner record's deletion.
func releaseOwner(ctx context.Context, tx *sql.Tx, xorb, tenant string, now int64) (bool, error) {
	var size int64
	err := tx.QueryRowContext(ctx, `DELETE FROM xorb_owners WHERE xorb = ? AND tenant = ? RETURNING size`, xorb, tenant).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("release owner %s of %s: %w", tenant, xorb, err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE tenants SET usage_bytes = usage_bytes - ?1 WHERE name = ?2 AND usage_bytes >= ?1`, size, tenant)
	if err != nil {
		return false, fmt.Errorf("release owner %s of %s: %w", tenant, xorb, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, fmt.Errorf("release owner %s of %s: the usage of %s is below the xorb's %d bytes; the index is inconsistent, run `openxet reindex`", tenant, xorb, tenant, size)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_pending(key, since) VALUES (?, ?) ON CONFLICT DO NOTHING`, xorbOwnerKey(xorb, tenant), now); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, released) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET released = CASE WHEN excluded.released > gc_objects.released THEN excluded.released ELSE gc_objects.released END`, xorbKey(xorb), now); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM gc_dropped WHERE tenant = ? AND xorb = ?`, tenant, xorb); err != nil {
		return false, err
	}
	return true, tidyTenantTx(ctx, tx, tenant)
}

// tidyTenantsWhere drops tenant rows nothing holds any more (no usage,
// limits, credentials, owners or repos): reindex would not make them.
const tidyTenantsWhere = `usage_bytes = 0 AND limits IS NULL AND quota_bytes IS NULL
	AND NOT EXISTS (SELECT 1 FROM credentials c WHERE c.tenant = tenants.name)
	AND NOT EXISTS (SELECT 1 FROM xorb_owners o WHERE o.tenant = tenants.name)
	AND NOT EXISTS (SELECT 1 FROM repos r WHERE r.tenant = tenants.name)`

func tidyTenantTx(ctx context.Context, tx *sql.Tx, tenant string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM tenants WHERE name = ? AND `+tidyTenantsWhere, tenant); err != nil {
		return fmt.Errorf("tidy tenant %s: %w", tenant, err)
	}
	return nil
}

// releaseShardOwners releases (shard, tenant) pairs the tenant no longer
// needs: no retained file of the tenant has its row from the shard, the
// tenant owns none of the xorbs it names, and it was not registered again
// within the grace period. The tenant's dedup rows from the shard go; those
// another shard of the tenant also provides are recomputed (so the index
// stays what reindex would build).
func (p *pass) releaseShardOwners(ctx context.Context) error {
	var cands []shardOwnerRow
	for _, o := range p.m.shardOwners {
		if p.m.touched[shardKey(o.shard)] > p.cutoff || p.m.epoch > p.graceEnd() {
			continue
		}
		cands = append(cands, o)
	}
	done := 0
	for start := 0; start < len(cands); start += gcBatch {
		batch := cands[start:min(start+gcBatch, len(cands))]
		var keys []string
		var now int64
		release := func(tx *sql.Tx) error {
			keys = keys[:0]
			now = p.s.now().Unix()
			for _, o := range batch {
				ok, err := p.releaseShardOwnerTx(ctx, tx, o, now)
				if err != nil {
					return err
				}
				if ok {
					keys = append(keys, shardOwnerKey(o.shard, o.tenant))
				}
			}
			if p.cfg.DryRun {
				return errDryRun
			}
			return nil
		}
		var err error
		if p.cfg.DryRun {
			err = p.s.inTx(ctx, release)
			if errors.Is(err, errDryRun) {
				err = nil
			}
		} else {
			err = p.inLeasedTx(ctx, release)
		}
		if err != nil {
			return err
		}
		p.rep.ReleasedShardOwners += len(keys)
		released := map[string]bool{}
		for _, k := range keys {
			released[k] = true
		}
		for _, o := range batch {
			if released[shardOwnerKey(o.shard, o.tenant)] {
				p.m.shardOwnerReleased(o.shard)
				p.m.releasedAt(shardKey(o.shard), now)
			}
		}
		if p.cfg.DryRun {
			continue
		}
		if err := p.hook("shard owners indexed"); err != nil {
			return err
		}
		if err := p.deletePending(ctx, keys); err != nil {
			return err
		}
		done += len(batch)
		p.cfg.Progress("release shards", done, len(cands))
	}
	return nil
}

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("dry run")

func (p *pass) releaseShardOwnerTx(ctx context.Context, tx *sql.Tx, o shardOwnerRow, now int64) (bool, error) {
	var touched int64
	err := tx.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, shardKey(o.shard)).Scan(&touched)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	if touched > p.cutoff {
		return false, nil
	}
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM files WHERE tenant = ? AND shard = ? LIMIT 1`, o.tenant, o.shard).Scan(&one)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM shard_xorbs sx JOIN xorb_owners o ON o.xorb = sx.xorb WHERE sx.shard = ? AND o.tenant = ? LIMIT 1`, o.shard, o.tenant).Scan(&one)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	return releaseShardOwner(ctx, tx, o.shard, o.tenant, now)
}

// releaseShardOwner drops a (shard, tenant) row and the tenant's dedup rows
// from the shard (noting their chunks for recomputation), and queues the
// owner record's deletion.
func releaseShardOwner(ctx context.Context, tx *sql.Tx, shard, tenant string, now int64) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM shard_owners WHERE shard = ? AND tenant = ?`, shard, tenant)
	if err != nil {
		return false, fmt.Errorf("release shard owner %s of %s: %w", tenant, shard, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_dedup_gaps(tenant, chunk) SELECT tenant, chunk FROM dedup WHERE tenant = ? AND shard = ? ON CONFLICT DO NOTHING`, tenant, shard); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM dedup WHERE tenant = ? AND shard = ?`, tenant, shard); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_pending(key, since) VALUES (?, ?) ON CONFLICT DO NOTHING`, shardOwnerKey(shard, tenant), now); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, released) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET released = CASE WHEN excluded.released > gc_objects.released THEN excluded.released ELSE gc_objects.released END`, shardKey(shard), now); err != nil {
		return false, err
	}
	return true, nil
}

// recomputeDedup refills the dedup rows of chunks whose row came from a
// released shard, from the tenant's remaining shards: the smallest (xorb,
// shard) that provides the chunk, as the shard registrations and reindex
// choose it.
func (p *pass) recomputeDedup(ctx context.Context) error {
	tenants, err := queryStrings(ctx, p.s.db, `SELECT DISTINCT tenant FROM gc_dedup_gaps ORDER BY tenant`)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		if err := p.s.recomputeDedup(ctx, t); err != nil {
			return err
		}
		if err := p.lease(ctx, false); err != nil {
			return err
		}
	}
	return nil
}

type dedupPick struct{ xorb, shard string }

func (s *Store) recomputeDedup(ctx context.Context, tenant string) error {
	gaps := map[string]bool{}
	chunks, err := queryStrings(ctx, s.db, `SELECT chunk FROM gc_dedup_gaps WHERE tenant = ?`, tenant)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		gaps[c] = true
	}
	shards, err := queryStrings(ctx, s.db, `SELECT shard FROM shard_owners WHERE tenant = ? ORDER BY shard`, tenant)
	if err != nil {
		return err
	}
	best := map[string]dedupPick{}
	consider := func(chunk xet.Hash, xorb xet.Hash, shard string) {
		c := chunk.String()
		if !gaps[c] {
			return
		}
		cand := dedupPick{xorb.String(), shard}
		if cur, ok := best[c]; !ok || cand.xorb < cur.xorb || (cand.xorb == cur.xorb && cand.shard < cur.shard) {
			best[c] = cand
		}
	}
	for _, sh := range shards {
		body, err := s.bucket.ReadAll(ctx, shardKey(sh))
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("recompute dedup: %w", err)
		}
		parsed, err := xet.ParseShard(body)
		if err != nil {
			return fmt.Errorf("recompute dedup: shard %s: %w", sh, err)
		}
		for _, f := range parsed.Files {
			if len(f.Terms) == 0 {
				continue
			}
			layout, err := s.storedLayout(ctx, f.Terms[0].Xorb)
			if err != nil || int(f.Terms[0].ChunkStart) >= len(layout) {
				continue
			}
			consider(layout[f.Terms[0].ChunkStart].Hash, f.Terms[0].Xorb, sh)
		}
		for _, c := range parsed.Xorbs {
			if _, err := s.storedLayout(ctx, c.Xorb); err != nil {
				continue
			}
			for _, cc := range c.Chunks {
				if xet.DedupEligible(cc.Hash) || cc.Flags&(1<<31) != 0 {
					consider(cc.Hash, c.Xorb, sh)
				}
			}
		}
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for c := range gaps {
			if pick, ok := best[c]; ok {
				ch, err := xet.ParseHash(c)
				if err != nil {
					return err
				}
				x, err := xet.ParseHash(pick.xorb)
				if err != nil {
					return err
				}
				if err := addDedup(ctx, tx, tenant, pick.shard, x, 0, &ch); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM gc_dedup_gaps WHERE tenant = ? AND chunk = ?`, tenant, c); err != nil {
				return err
			}
		}
		return nil
	})
}

// storedLayout reads a xorb's layout from the index (not the cache: the
// xorb may have been collected by another process).
func (s *Store) storedLayout(ctx context.Context, h xet.Hash) ([]xet.XorbChunk, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, `SELECT chunks FROM xorbs WHERE hash = ?`, h.String()).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("xorb %s: %w", h, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeChunks(b)
}

// sweepable is an object of the bucket a sweep may delete.
type sweepable struct {
	key  string
	size int64
}

// sweep deletes the objects nobody owns or references whose grace period
// is over.
func (p *pass) sweep(ctx context.Context) error {
	for _, prefix := range []string{prefixXorbs, prefixShards, prefixBlobs} {
		objs, err := listObjects(ctx, p.s.bucket, p.s.dir, prefix)
		if err != nil {
			return err
		}
		var cands []sweepable
		for _, o := range objs {
			name := strings.TrimPrefix(o.Key, prefix)
			switch prefix {
			case prefixXorbs:
				if p.m.owned(name) || p.m.referenced(name) {
					continue
				}
			case prefixShards:
				if p.m.shardCount[name] > 0 {
					continue
				}
			case prefixBlobs:
				if p.m.blobs[name] {
					continue
				}
			}
			// touched is the race guard (nothing touched after T0 - grace);
			// the release, write and epoch times only start the grace.
			settled := max(p.m.released[o.Key], o.ModTime.Unix(), p.m.epoch)
			if p.m.touched[o.Key] > p.cutoff || settled > p.graceEnd() {
				p.rep.Waiting++
				p.rep.WaitingBytes += o.Size
				continue
			}
			cands = append(cands, sweepable{o.Key, o.Size})
		}
		stage := "sweep " + strings.TrimSuffix(strings.TrimSuffix(prefix, "/default/"), "/")
		if p.cfg.DryRun {
			for _, c := range cands {
				p.noteDeleted(c)
			}
			p.cfg.Progress(stage, len(cands), len(cands))
			continue
		}
		for start := 0; start < len(cands); start += gcBatch {
			batch := cands[start:min(start+gcBatch, len(cands))]
			var doomed []string
			err := p.inLeasedTx(ctx, func(tx *sql.Tx) error {
				doomed = doomed[:0]
				now := p.s.now().Unix()
				for _, c := range batch {
					ok, err := p.doomTx(ctx, tx, c.key, now)
					if err != nil {
						return err
					}
					if ok {
						doomed = append(doomed, c.key)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			p.forgetLayouts(doomed)
			if err := p.hook("doomed"); err != nil {
				return err
			}
			if err := p.deleteObjects(ctx, doomed); err != nil {
				return err
			}
			if err := p.hook("objects deleted"); err != nil {
				return err
			}
			if err := p.finishObjects(ctx, doomed); err != nil {
				return err
			}
			for _, c := range batch {
				for _, d := range doomed {
					if d == c.key {
						p.noteDeleted(c)
					}
				}
			}
			p.cfg.Progress(stage, start+len(batch), len(cands))
		}
		if len(cands) == 0 {
			p.cfg.Progress(stage, 0, 0)
		}
	}
	return nil
}

const prefixBlobs = "blobs/"

func (p *pass) noteDeleted(c sweepable) {
	switch {
	case strings.HasPrefix(c.key, prefixXorbs):
		p.rep.DeletedXorbs++
	case strings.HasPrefix(c.key, prefixShards):
		p.rep.DeletedShards++
	default:
		p.rep.DeletedBlobs++
	}
	p.rep.DeletedBytes += c.size
}

// doomTx condemns one object after checking, in the transaction, that
// nobody owns it and nothing touched it within the grace period. Anything
// that would reference it from now on waits (ErrCollecting) until it is
// gone.
func (p *pass) doomTx(ctx context.Context, tx *sql.Tx, key string, now int64) (bool, error) {
	var touched, released int64
	var doomed sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT touched, released, doomed FROM gc_objects WHERE key = ?`, key).Scan(&touched, &released, &doomed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	if doomed.Valid {
		return false, nil
	}
	if touched > p.cutoff {
		p.rep.Deferred++ // touched since the mark read it
		return false, nil
	}
	if released > p.graceEnd() {
		// Released since the mark (only this pass releases, and it notes
		// its releases in m.released): it waits out its grace.
		return false, nil
	}
	var one int
	switch {
	case strings.HasPrefix(key, prefixXorbs):
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM xorb_owners WHERE xorb = ? LIMIT 1`, strings.TrimPrefix(key, prefixXorbs)).Scan(&one)
	case strings.HasPrefix(key, prefixShards):
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM shard_owners WHERE shard = ? LIMIT 1`, strings.TrimPrefix(key, prefixShards)).Scan(&one)
	default:
		err = sql.ErrNoRows
	}
	if err == nil {
		p.rep.Deferred++
		return false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, doomed) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET doomed = excluded.doomed`, key, now); err != nil {
		return false, err
	}
	// The index forgets it now, before the bucket does: a crash leaves
	// the index behind the bucket, and the mark makes the next pass finish.
	return true, forgetTx(ctx, tx, key)
}

// forgetTx drops an object's rows from the index.
func forgetTx(ctx context.Context, tx *sql.Tx, key string) error {
	var stmts []string
	var arg string
	switch {
	case strings.HasPrefix(key, prefixXorbs):
		// Dedup rows that offered it go; the chunks they were for are
		// recomputed from their tenants' shards (another xorb may hold
		// them), as reindex would build them.
		arg = strings.TrimPrefix(key, prefixXorbs)
		stmts = []string{`INSERT INTO gc_dedup_gaps(tenant, chunk) SELECT tenant, chunk FROM dedup WHERE xorb = ? ON CONFLICT DO NOTHING`,
			`DELETE FROM dedup WHERE xorb = ?`, `DELETE FROM shard_xorbs WHERE xorb = ?`, `DELETE FROM gc_dropped WHERE xorb = ?`,
			`DELETE FROM xorbs WHERE hash = ?`}
	case strings.HasPrefix(key, prefixShards):
		arg = strings.TrimPrefix(key, prefixShards)
		stmts = []string{`DELETE FROM shards WHERE hash = ?`, `DELETE FROM shard_xorbs WHERE shard = ?`}
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q, arg); err != nil {
			return fmt.Errorf("forget %s: %w", key, err)
		}
	}
	return nil
}

// deleteObjects deletes condemned objects from the bucket: their stale
// owner records first, then the object.
func (p *pass) deleteObjects(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := p.lease(ctx, false); err != nil {
		return err
	}
	for _, k := range keys {
		var owners string
		switch {
		case strings.HasPrefix(k, prefixXorbs):
			owners = prefixXorbOwners + strings.TrimPrefix(k, prefixXorbs) + "/"
		case strings.HasPrefix(k, prefixShards):
			owners = prefixShardOwners + strings.TrimPrefix(k, prefixShards) + "/"
		}
		if owners != "" {
			recs, err := listKeys(ctx, p.s.bucket, p.s.dir, owners)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if err := p.s.bucket.Delete(ctx, r); err != nil && !isNotFound(err) {
					return fmt.Errorf("delete %s: %w", r, err)
				}
			}
		}
		if err := p.s.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete %s: %w", k, err)
		}
	}
	return nil
}

// finishObjects ends the condemnation of deleted objects.
func (p *pass) finishObjects(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return p.s.inTx(ctx, func(tx *sql.Tx) error {
		for _, k := range keys {
			if err := forgetTx(ctx, tx, k); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM gc_objects WHERE key = ?`, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// forgetLayouts drops condemned xorbs from this process's layout cache.
func (p *pass) forgetLayouts(keys []string) {
	for _, k := range keys {
		if x, ok := strings.CutPrefix(k, prefixXorbs); ok {
			if h, err := xet.ParseHash(x); err == nil {
				p.s.layouts.drop(h)
			}
		}
	}
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

// listObjects lists the objects under prefix with their size and time,
// skipping temporary files: a file:// bucket (dir, its directory; "" for
// other buckets) by a walk of its own (filelist.go), others in large pages.
func listObjects(ctx context.Context, b *blob.Bucket, dir, prefix string) ([]*blob.ListObject, error) {
	if dir != "" {
		if objs, ok, err := listFileObjects(ctx, dir, prefix); ok || err != nil {
			return objs, err
		}
	}
	var out []*blob.ListObject
	token := blob.FirstPageToken
	for {
		page, next, err := b.ListPage(ctx, token, listPageSize, &blob.ListOptions{Prefix: prefix})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, bucketErr(err))
		}
		for _, obj := range page {
			if !obj.IsDir && !strings.HasSuffix(obj.Key, ".tmp") {
				out = append(out, obj)
			}
		}
		if len(next) == 0 {
			return out, nil
		}
		token = next
	}
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
