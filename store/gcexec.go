package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"openxet/xet"

	"openxet/store/keep"
)

// A pass executes its plan (gcplan.go) in batches of gcBatch: each batch's
// index transaction renews the lease, applies the plan's rule again to
// what it reads (package store/keep) and acts on what the rule still allows, then the
// bucket follows. What a batch does not act on (a write raced the pass)
// stays for the next pass, and so does whatever the plan kept only for it:
// an object whose owner was not released is not swept.

// releaseOwners releases the planned xorb owners.
func (p *pass) releaseOwners(ctx context.Context) error {
	if p.cfg.DryRun {
		return nil
	}
	cands := p.plan.owners
	for start := 0; start < len(cands); start += gcBatch {
		batch := cands[start:min(start+gcBatch, len(cands))]
		var released []ownerRow
		var deferred int
		err := p.inLeasedTx(ctx, func(tx *sql.Tx) error {
			released, deferred = released[:0], 0
			for _, o := range batch {
				v, err := p.ownerTx(ctx, tx, o)
				if err != nil {
					return err
				}
				if v == keep.Touched {
					deferred++ // touched since the mark read it
				}
				if v != keep.Act {
					continue
				}
				ok, err := releaseOwner(ctx, tx, o.xorb, o.tenant, p.t0)
				if err != nil {
					return err
				}
				if ok {
					released = append(released, o)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.rep.Deferred += deferred
		done := gcPlan{owners: released}
		p.noteDone(done)
		p.done.owners = append(p.done.owners, released...)
		keys := make([]string, 0, len(released))
		for _, o := range released {
			keys = append(keys, xorbOwnerKey(o.xorb, o.tenant))
		}
		p.keepUnreleased(batch, released)
		if err := p.hook("owners indexed"); err != nil {
			return err
		}
		if err := p.deletePending(ctx, keys); err != nil {
			return err
		}
		p.cfg.Progress("release owners", start+len(batch), len(cands))
	}
	if len(cands) == 0 {
		p.cfg.Progress("release owners", 0, 0)
	}
	return p.dropSettledHints(ctx)
}

// ownerTx applies the owner rule to a planned owner, with its touch as the
// transaction reads it.
func (p *pass) ownerTx(ctx context.Context, tx *sql.Tx, o ownerRow) (keep.Verdict, error) {
	f := p.m.ownerFacts(o)
	err := tx.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, xorbKey(o.xorb)).Scan(&f.Touched)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	return p.time.Owner(f), nil
}

// keepUnreleased notes the xorbs of planned owners a batch did not release:
// the sweep keeps them (they are owned).
func (p *pass) keepUnreleased(batch, released []ownerRow) {
	done := make(map[[2]string]bool, len(released))
	for _, o := range released {
		done[[2]string{o.xorb, o.tenant}] = true
	}
	for _, o := range batch {
		if !done[[2]string{o.xorb, o.tenant}] {
			p.kept[xorbKey(o.xorb)] = true
		}
	}
}

// dropSettledHints forgets the "dropped" hints the pass found nothing to
// do for: the tenant owns no such xorb, or a retained file of it still
// references the xorb. (A hint whose owner was released went with it; one
// deferred by a race stays for the next pass.)
func (p *pass) dropSettledHints(ctx context.Context) error {
	if len(p.plan.settled) == 0 {
		return nil
	}
	return p.s.inTx(ctx, func(tx *sql.Tx) error {
		for _, k := range p.plan.settled {
			if _, err := tx.ExecContext(ctx, `DELETE FROM gc_dropped WHERE tenant = ? AND xorb = ?`, k[0], k[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// releaseOwner drops an owner row, subtracts its size from the tenant's
// usage (never below zero: an index where it would is refused as
// inconsistent) and queues the owner record's deletion; at is the
// release's time.
func releaseOwner(ctx context.Context, tx *sql.Tx, xorb, tenant string, at int64) (bool, error) {
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
	if err := queueRelease(ctx, tx, xorbOwnerKey(xorb, tenant), xorbKey(xorb), at); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM gc_dropped WHERE tenant = ? AND xorb = ?`, tenant, xorb); err != nil {
		return false, err
	}
	return true, tidyTenantTx(ctx, tx, tenant)
}

// queueRelease queues an owner record's deletion and notes the object's
// release time (its grace starts again).
func queueRelease(ctx context.Context, tx *sql.Tx, record, object string, at int64) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_pending(key, since) VALUES (?, ?) ON CONFLICT DO NOTHING`, record, at); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, released) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET released = CASE WHEN excluded.released > gc_objects.released THEN excluded.released ELSE gc_objects.released END`, object, at)
	return err
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

// releaseShardOwners releases the planned shard owners. The tenant's dedup
// rows from the shard go; those another shard of the tenant also provides
// are recomputed (so the index stays what reindex would build).
func (p *pass) releaseShardOwners(ctx context.Context) error {
	if p.cfg.DryRun {
		return nil
	}
	cands := p.plan.shardOwners
	for start := 0; start < len(cands); start += gcBatch {
		batch := cands[start:min(start+gcBatch, len(cands))]
		var released []shardOwnerRow
		err := p.inLeasedTx(ctx, func(tx *sql.Tx) error {
			released = released[:0]
			for _, o := range batch {
				ok, err := p.shardOwnerTx(ctx, tx, o)
				if err != nil {
					return err
				}
				if ok {
					released = append(released, o)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.noteDone(gcPlan{shardOwners: released})
		p.done.shardOwners = append(p.done.shardOwners, released...)
		done := make(map[shardOwnerRow]bool, len(released))
		keys := make([]string, 0, len(released))
		for _, o := range released {
			done[o] = true
			keys = append(keys, shardOwnerKey(o.shard, o.tenant))
		}
		for _, o := range batch {
			if !done[o] {
				p.kept[shardKey(o.shard)] = true
			}
		}
		if err := p.hook("shard owners indexed"); err != nil {
			return err
		}
		if err := p.deletePending(ctx, keys); err != nil {
			return err
		}
		p.cfg.Progress("release shards", start+len(batch), len(cands))
	}
	return nil
}

// shardOwnerTx applies the shard owner rule to a planned owner, with what
// the transaction reads (each fact read only while the rule may still
// release it), and releases it when the rule says so.
func (p *pass) shardOwnerTx(ctx context.Context, tx *sql.Tx, o shardOwnerRow) (bool, error) {
	f := keep.ShardOwnerFacts{Epoch: p.m.epoch}
	err := tx.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, shardKey(o.shard)).Scan(&f.Touched)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	reads := []struct {
		fact  *bool
		query string
	}{
		{&f.HasFile, `SELECT 1 FROM files WHERE tenant = ? AND shard = ? LIMIT 1`},
		{&f.OwnsXorb, `SELECT 1 FROM shard_xorbs sx JOIN xorb_owners o ON o.xorb = sx.xorb WHERE o.tenant = ? AND sx.shard = ? LIMIT 1`},
	}
	for _, r := range reads {
		if p.time.ShardOwner(f) != keep.Act {
			return false, nil
		}
		var one int
		err := tx.QueryRowContext(ctx, r.query, o.tenant, o.shard).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		*r.fact = err == nil
	}
	if p.time.ShardOwner(f) != keep.Act {
		return false, nil
	}
	return releaseShardOwner(ctx, tx, o.shard, o.tenant, p.t0)
}

// releaseShardOwner drops a (shard, tenant) row and the tenant's dedup rows
// from the shard (noting their chunks for recomputation), and queues the
// owner record's deletion; at is the release's time.
func releaseShardOwner(ctx context.Context, tx *sql.Tx, shard, tenant string, at int64) (bool, error) {
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
	return true, queueRelease(ctx, tx, shardOwnerKey(shard, tenant), shardKey(shard), at)
}

// sweep deletes the planned objects, kind by kind.
func (p *pass) sweep(ctx context.Context) error {
	for _, k := range objectKinds {
		stage := "sweep " + k.String()
		var cands []sweepable
		for _, c := range p.plan.objects[k] {
			if !p.kept[c.key] {
				cands = append(cands, c)
			}
		}
		if p.cfg.DryRun {
			p.cfg.Progress(stage, len(cands), len(cands))
			continue
		}
		for start := 0; start < len(cands); start += gcBatch {
			if err := p.sweepBatch(ctx, k, cands[start:min(start+gcBatch, len(cands))]); err != nil {
				return err
			}
			p.cfg.Progress(stage, start+min(gcBatch, len(cands)-start), len(cands))
		}
		if len(cands) == 0 {
			p.cfg.Progress(stage, 0, 0)
		}
	}
	return nil
}

// sweepBatch condemns a batch of objects the rule still allows deleting
// (the index forgets them in the same transaction), deletes them from the
// bucket, then ends their condemnation.
func (p *pass) sweepBatch(ctx context.Context, k objectKind, batch []sweepable) error {
	var doomed []sweepable
	var deferred int
	err := p.inLeasedTx(ctx, func(tx *sql.Tx) error {
		doomed, deferred = doomed[:0], 0
		for _, c := range batch {
			v, err := p.doomTx(ctx, tx, k, c)
			if err != nil {
				return err
			}
			switch v {
			case keep.Act:
				doomed = append(doomed, c)
			case keep.Touched, keep.Needed:
				deferred++ // touched or owned since the mark read it
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.rep.Deferred += deferred
	keys := make([]string, len(doomed))
	for i, c := range doomed {
		keys[i] = c.key
	}
	p.forgetLayouts(keys)
	if err := p.hook("doomed"); err != nil {
		return err
	}
	if err := p.deleteObjects(ctx, keys); err != nil {
		return err
	}
	if err := p.hook("objects deleted"); err != nil {
		return err
	}
	if err := p.finishObjects(ctx, keys); err != nil {
		return err
	}
	var done gcPlan
	done.objects[k] = doomed
	p.noteDone(done)
	p.done.objects[k] = append(p.done.objects[k], doomed...)
	return nil
}

// doomTx applies the object rule to a planned object, with what the
// transaction reads of its touches, release and owners, and condemns it
// when the rule says so. Anything that would reference it from now on
// waits (ErrCollecting) until it is gone. (A retained file or a revision
// that came to reference it since the mark touched it.)
func (p *pass) doomTx(ctx context.Context, tx *sql.Tx, k objectKind, c sweepable) (keep.Verdict, error) {
	var released int64
	var doomed sql.NullInt64
	f := keep.ObjectFacts{Settled: c.settled}
	err := tx.QueryRowContext(ctx, `SELECT touched, released, doomed FROM gc_objects WHERE key = ?`, c.key).Scan(&f.Touched, &released, &doomed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	f.Doomed, f.Settled = doomed.Valid, max(f.Settled, released)
	if v := p.time.Object(f); v != keep.Act {
		return v, nil
	}
	if q := kindInfo[k].ownedQuery; q != "" {
		var one int
		err := tx.QueryRowContext(ctx, q, c.key[len(k.prefix()):]).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, err
		}
		f.Needed = err == nil
	}
	v := p.time.Object(f)
	if v != keep.Act {
		return v, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, doomed) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET doomed = excluded.doomed`, c.key, p.s.now().Unix()); err != nil {
		return 0, err
	}
	// The index forgets it now, before the bucket does: a crash leaves
	// the index behind the bucket, and the mark makes the next pass finish.
	return keep.Act, forgetTx(ctx, tx, c.key)
}

// forgetTx drops an object's rows from the index.
func forgetTx(ctx context.Context, tx *sql.Tx, key string) error {
	k, name, ok := objectOf(key)
	if !ok {
		return nil
	}
	for _, q := range kindInfo[k].forget {
		if _, err := tx.ExecContext(ctx, q, name); err != nil {
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
	for _, key := range keys {
		if k, name, ok := objectOf(key); ok && k.ownersPrefix(name) != "" {
			recs, err := p.s.bucket.ListKeys(ctx, k.ownersPrefix(name))
			if err != nil {
				return err
			}
			for _, r := range recs {
				if err := p.s.bucket.Delete(ctx, r); err != nil && !isNotFound(err) {
					return fmt.Errorf("delete %s: %w", r, err)
				}
			}
		}
		if err := p.s.bucket.Delete(ctx, key); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete %s: %w", key, err)
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
	for _, key := range keys {
		if k, name, ok := objectOf(key); ok && k == kindXorb {
			if h, err := xet.ParseHash(name); err == nil {
				p.s.layouts.drop(h)
			}
		}
	}
}
