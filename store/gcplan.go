package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"openxet/store/keep"
)

// A pass's plan (gc.go): what it means to release and delete, decided by
// the rules of package store/keep over what its mark read. A dry run reports the plan
// and stops; a pass executes it, applying each rule again, in each
// batch's transaction, to what that transaction reads.

// mark is what a pass reads once, after T0, in one snapshot of the index:
// the reference graph and what the index knows of touches and releases.
type mark struct {
	*refGraph
	touched  map[string]int64   // object key → its last touch
	released map[string]int64   // object key → its last release
	doomed   map[string]bool    // object keys a pass condemned
	dropped  map[[2]string]bool // (tenant, xorb) a released file referenced
	epoch    int64              // when the index first served
	// shardXorbs are the xorbs each shard names, read for the shard
	// owners whose release depends on them.
	shardXorbs map[string][]string
}

// gcPlan is what a pass releases and deletes, and what it found it must
// wait for.
type gcPlan struct {
	owners      []ownerRow      // xorb owners to release, by tenant then xorb
	shardOwners []shardOwnerRow // shard owners to release, in mark order
	objects     [len(objectKinds)][]sweepable
	// settled are the "dropped" hints with nothing to do: the tenant owns
	// no such xorb, or a retained file of it still references the xorb.
	settled [][2]string
	// deferred counts the owners touched since T0; waiting the objects
	// nobody needs that are within their grace period.
	deferred     int
	waiting      int
	waitingBytes int64
}

// sweepable is an object of the bucket a sweep may delete.
type sweepable struct {
	key     string
	size    int64
	settled int64 // as keep.ObjectFacts.Settled, from the mark and the plan
}

// markAndPlan reads the mark (one snapshot), lists the bucket and plans.
func (p *pass) markAndPlan(ctx context.Context) error {
	if err := p.mark(ctx); err != nil {
		return err
	}
	var listed [len(objectKinds)][]sweepable
	for _, k := range objectKinds {
		objs, err := p.s.bucket.ListObjects(ctx, k.prefix())
		if err != nil {
			return err
		}
		for _, o := range objs {
			listed[k] = append(listed[k], sweepable{key: o.Key, size: o.Size, settled: o.ModTime.Unix()})
		}
	}
	p.plan = p.m.plan(p.time, listed)
	p.rep.Deferred += p.plan.deferred
	p.rep.Waiting += p.plan.waiting
	p.rep.WaitingBytes += p.plan.waitingBytes
	if p.cfg.DryRun {
		p.noteDone(p.plan)
	}
	return nil
}

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
	g, err := loadRefGraph(ctx, db, p.hook)
	if err != nil {
		return err
	}
	m := &mark{refGraph: g, touched: map[string]int64{}, released: map[string]int64{}, doomed: map[string]bool{},
		dropped: map[[2]string]bool{}, shardXorbs: map[string][]string{}}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE((SELECT value FROM gc_state WHERE name = 'epoch'), 0)`).Scan(&m.epoch); err != nil {
		return fmt.Errorf("mark: %w", err)
	}
	err = eachRow(ctx, db, `SELECT key, touched, released, doomed FROM gc_objects`, func(r *sql.Rows) error {
		var k string
		var t, rel int64
		var doomed sql.NullInt64
		if err := r.Scan(&k, &t, &rel, &doomed); err != nil {
			return err
		}
		m.touched[k], m.released[k] = t, rel
		if doomed.Valid {
			m.doomed[k] = true
		}
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
	if err := m.readShardXorbs(ctx, db, p.time); err != nil {
		return err
	}
	p.m = m
	files := 0
	for _, fs := range g.files {
		files += len(fs)
	}
	p.cfg.Progress("mark", files, files)
	return nil
}

// readShardXorbs reads the xorbs of the shards whose owners only they can
// keep: those past their grace with an owner no retained file came
// through.
func (m *mark) readShardXorbs(ctx context.Context, db queryer, pt keep.Time) error {
	for _, o := range m.shardOwners {
		if _, ok := m.shardXorbs[o.shard]; ok {
			continue
		}
		if pt.ShardOwner(m.shardOwnerFacts(o, nil)) != keep.Act {
			continue // kept whatever it names
		}
		xs, err := queryStrings(ctx, db, `SELECT xorb FROM shard_xorbs WHERE shard = ?`, o.shard)
		if err != nil {
			return err
		}
		if xs == nil {
			xs = []string{} // read, and names none
		}
		m.shardXorbs[o.shard] = xs
	}
	return nil
}

// ownerFacts is what the mark knows of a xorb owner.
func (m *mark) ownerFacts(o ownerRow) keep.OwnerFacts {
	return keep.OwnerFacts{Needed: m.need[o.tenant][o.xorb], Dropped: m.dropped[[2]string{o.tenant, o.xorb}],
		Created: o.created, Touched: m.touched[xorbKey(o.xorb)]}
}

// shardOwnerFacts is what the mark knows of a shard owner, once the owners
// in released are gone.
func (m *mark) shardOwnerFacts(o shardOwnerRow, released map[[2]string]bool) keep.ShardOwnerFacts {
	f := keep.ShardOwnerFacts{Touched: m.touched[shardKey(o.shard)], Epoch: m.epoch, HasFile: m.shardFiles[[2]string{o.tenant, o.shard}]}
	for _, x := range m.shardXorbs[o.shard] {
		if m.owns(o.tenant, x) && !released[[2]string{o.tenant, x}] {
			f.OwnsXorb = true
			break
		}
	}
	return f
}

// plan applies the rules to the mark and the listed objects: the owners it
// releases, then the shard owners and the objects nobody needs once those
// are released.
func (m *mark) plan(pt keep.Time, listed [len(objectKinds)][]sweepable) gcPlan {
	var pl gcPlan
	for _, o := range m.owners {
		switch pt.Owner(m.ownerFacts(o)) {
		case keep.Touched:
			pl.deferred++ // a candidate an upload or registration touched since T0
		case keep.Act:
			pl.owners = append(pl.owners, o)
		}
	}
	sort.Slice(pl.owners, func(i, j int) bool {
		if pl.owners[i].tenant != pl.owners[j].tenant {
			return pl.owners[i].tenant < pl.owners[j].tenant
		}
		return pl.owners[i].xorb < pl.owners[j].xorb
	})
	released := map[[2]string]bool{}
	xorbsLeft := map[string]int{}
	for x, os := range m.owned {
		xorbsLeft[x] = len(os)
	}
	for _, o := range pl.owners {
		released[[2]string{o.tenant, o.xorb}] = true
		xorbsLeft[o.xorb]--
	}
	for k := range m.dropped {
		if !m.owns(k[0], k[1]) || m.need[k[0]][k[1]] {
			pl.settled = append(pl.settled, k)
		}
	}
	shardsLeft := map[string]int{}
	for s, n := range m.shardOwned {
		shardsLeft[s] = n
	}
	for _, o := range m.shardOwners {
		if pt.ShardOwner(m.shardOwnerFacts(o, released)) == keep.Act {
			pl.shardOwners = append(pl.shardOwners, o)
			shardsLeft[o.shard]--
		}
	}
	// What this pass releases waits out its grace from T0 (the time its
	// releases record).
	for _, o := range pl.owners {
		m.released[xorbKey(o.xorb)] = max(m.released[xorbKey(o.xorb)], pt.T0)
	}
	for _, o := range pl.shardOwners {
		m.released[shardKey(o.shard)] = max(m.released[shardKey(o.shard)], pt.T0)
	}
	for _, k := range objectKinds {
		for _, c := range listed[k] {
			name := strings.TrimPrefix(c.key, k.prefix())
			var needed bool
			switch k {
			case kindXorb:
				needed = xorbsLeft[name] > 0 || m.referenced[name]
			case kindShard:
				needed = shardsLeft[name] > 0
			case kindBlob:
				needed = m.blobs[name]
			}
			c.settled = max(m.released[c.key], c.settled, m.epoch)
			switch pt.Object(keep.ObjectFacts{Doomed: m.doomed[c.key], Needed: needed, Touched: m.touched[c.key], Settled: c.settled}) {
			case keep.Touched, keep.Grace:
				pl.waiting++
				pl.waitingBytes += c.size
			case keep.Act:
				pl.objects[k] = append(pl.objects[k], c)
			}
		}
	}
	return pl
}

// noteDone adds what a plan (or the part of it a pass did) released and
// deleted to the report.
func (p *pass) noteDone(pl gcPlan) {
	for _, o := range pl.owners {
		p.rep.ReleasedOwners++
		p.rep.ReleasedBytes += o.size
		if p.rep.ReleasedByTenant == nil {
			p.rep.ReleasedByTenant = map[string]int64{}
		}
		p.rep.ReleasedByTenant[o.tenant] += o.size
	}
	p.rep.ReleasedShardOwners += len(pl.shardOwners)
	for k, objs := range pl.objects {
		for _, c := range objs {
			switch objectKind(k) {
			case kindXorb:
				p.rep.DeletedXorbs++
			case kindShard:
				p.rep.DeletedShards++
			case kindBlob:
				p.rep.DeletedBlobs++
			}
			p.rep.DeletedBytes += c.size
		}
	}
}
