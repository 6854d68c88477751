package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"openxet/xet"
)

// The lifecycle's hooks in the write paths (docs/design.md §9).
//
// Every object an upload, a shard registration or a commit names is
// "touched" in the index (gc_objects.touched) before it is written or
// relied on. A collection pass picks its start T0 in the index (startTx):
// T0 is at least every touch committed before, and it becomes the floor
// every later touch reads, so any write that commits after the pass
// started touches with a time of at least T0+1, whatever the clocks'
// resolution. The pass re-checks touched <= T0 - grace in the transaction
// that condemns an object: whatever a pass did not see, it does not
// delete. That holds for what a write adds; what a commit keeps from its
// parent it does not touch, and the pass keeps it because its mark reads
// every revision in one snapshot taken after T0 (gc.go, mark). A commit
// adding a regular file whose blob row is gone (collected since PutBlob
// stored it) is refused with ErrCollecting. An object a collector is deleting (gc_objects.doomed) and an
// owner record whose release is under way (gc_pending) make the request
// wait with ErrCollecting; they last milliseconds, or until the next pass
// after a crash.

const prefixFileRegistrations = "file-registrations/"

// fileRegistrationKey is the record a shard writes when it registers a
// file its tenant had released: it supersedes the release record written
// earlier (reindex compares their times).
func fileRegistrationKey(tenant, file string) string {
	return prefixFileRegistrations + HashName(tenant) + "/" + file
}

type fileRegistrationRecord struct {
	Tenant     string `json:"tenant"`
	File       string `json:"file"`
	Registered int64  `json:"registered"`
}

// openLifecycle notes when this index first served: objects whose touches
// it never saw (an index rebuilt by reindex, or one made before the
// lifecycle existed) get a whole grace period from then.
func (s *Store) openLifecycle(ctx context.Context) error {
	err := s.exec(ctx, `INSERT INTO gc_state(name, value) VALUES ('epoch', ?) ON CONFLICT DO NOTHING`, s.now().Unix())
	if err != nil {
		return fmt.Errorf("index lifecycle state: %w", err)
	}
	return nil
}

// touchTx marks keys as used now, or at one more than the last pass's start
// when that is later; ErrCollecting when one is being deleted.
func touchTx(ctx context.Context, tx *sql.Tx, now int64, keys ...string) error {
	for _, k := range keys {
		var doomed sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT doomed FROM gc_objects WHERE key = ?`, k).Scan(&doomed)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("touch %s: %w", k, err)
		}
		if doomed.Valid {
			return fmt.Errorf("%s: %w", k, ErrCollecting)
		}
		// The touch time is now, or one more than the last pass's start
		// when that is later (startTx, gc.go): a touch that commits after
		// a pass started is after its T0 whatever the clocks say.
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_objects(key, touched)
			SELECT ?, CASE WHEN f.v + 1 > ? THEN f.v + 1 ELSE ? END
			FROM (SELECT COALESCE(MAX(value), 0) AS v FROM gc_state WHERE name = 'touch_floor') f WHERE true
			ON CONFLICT(key) DO UPDATE SET touched = CASE WHEN excluded.touched > gc_objects.touched THEN excluded.touched ELSE gc_objects.touched END`, k, now, now); err != nil {
			return fmt.Errorf("touch %s: %w", k, err)
		}
	}
	return nil
}

// pendingTx returns ErrCollecting when a release is deleting one of keys
// (owner records) from the bucket.
func pendingTx(ctx context.Context, tx *sql.Tx, keys ...string) error {
	for _, k := range keys {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM gc_pending WHERE key = ?`, k).Scan(&one)
		if err == nil {
			return fmt.Errorf("%s: %w", k, ErrCollecting)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("pending %s: %w", k, err)
		}
	}
	return nil
}

// touch marks bucket keys as used now.
func (s *Store) touch(ctx context.Context, keys ...string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return touchTx(ctx, tx, s.now().Unix(), keys...) })
}

// touchXorb is PutXorb's hook: it runs before the xorb object or owner
// record is written, and refuses with ErrCollecting while the tenant's
// owner record of the xorb is being released or the xorb deleted. It
// returns the xorb's row in the index after the touch (xorbRow), and
// whether there is one. On PostgreSQL the checks, the touch and the read
// are one statement (xorbs_pg.go: pgTouchXorb), one round trip instead of
// six.
func (s *Store) touchXorb(ctx context.Context, tenant string, h xet.Hash) (xorbRecord, bool, error) {
	if s.pg {
		return s.pgTouchXorb(ctx, tenant, h)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := pendingTx(ctx, tx, xorbOwnerKey(h.String(), tenant)); err != nil {
			return err
		}
		return touchTx(ctx, tx, s.now().Unix(), xorbKey(h.String()))
	})
	if err != nil {
		return xorbRecord{}, false, err
	}
	return s.xorbRow(ctx, h.String())
}

// shardPrep is what PutShard's lifecycle hook prepared before the shard's
// index transaction.
type shardPrep struct {
	tenant, shard string
	named         []string         // every xorb the shard names
	termXorbs     []string         // the xorbs its files' terms reference
	files         []string         // the files it registers
	again         map[string]int64 // released files it registers again → the registration time written
	adopt         map[string]int64 // xorbs no tenant owned, adopted by tenant → size
}

// prepareShard runs before a shard is written: it touches the shard and
// every xorb it names, writes a registration record for each file the
// tenant had released, and writes the tenant's owner record for each xorb
// its files reference that no tenant owns (the shard's tenant adopts it:
// a retained file's bytes always have an owner who pays for them, unless
// the file is another tenant's, registered by dedup; see docs/operations.md).
func (s *Store) prepareShard(ctx context.Context, tenant, h string, sh *xet.Shard) (*shardPrep, error) {
	p := &shardPrep{tenant: tenant, shard: h, again: map[string]int64{}, adopt: map[string]int64{}}
	named, terms, files := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, c := range sh.Xorbs {
		named[c.Xorb.String()] = true
	}
	for _, f := range sh.Files {
		files[f.Hash.String()] = true
		for _, t := range f.Terms {
			named[t.Xorb.String()] = true
			terms[t.Xorb.String()] = true
		}
	}
	p.named, p.termXorbs, p.files = sortedKeys(named), sortedKeys(terms), sortedKeys(files)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		clear(p.again)
		clear(p.adopt)
		if err := pendingTx(ctx, tx, shardOwnerKey(h, tenant)); err != nil {
			return err
		}
		keys := []string{shardKey(h)}
		for _, x := range p.named {
			keys = append(keys, xorbKey(x))
		}
		if err := touchTx(ctx, tx, s.now().Unix(), keys...); err != nil {
			return err
		}
		for _, x := range p.termXorbs {
			if err := pendingTx(ctx, tx, xorbOwnerKey(x, tenant)); err != nil {
				return err
			}
			var size int64
			err := tx.QueryRowContext(ctx, `SELECT stream_len FROM xorbs WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM xorb_owners WHERE xorb = ?1)`, x).Scan(&size)
			if err == nil {
				p.adopt[x] = size
			} else if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		at := s.now().UnixNano()
		for _, f := range p.files {
			var released int64
			err := tx.QueryRowContext(ctx, `SELECT released FROM file_releases WHERE tenant = ? AND hash = ?`, tenant, f).Scan(&released)
			if err == nil {
				p.again[f] = max(at, released+1)
			} else if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range sortedKeys(p.again) {
		rec, _ := json.Marshal(fileRegistrationRecord{Tenant: tenant, File: f, Registered: p.again[f]})
		if err := s.bucket.WriteAll(ctx, fileRegistrationKey(tenant, f), rec, nil); err != nil {
			return nil, fmt.Errorf("write registration of %s: %w", f, err)
		}
	}
	for _, x := range sortedKeys(p.adopt) {
		key := xorbOwnerKey(x, tenant)
		ok, err := s.bucket.Exists(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("adopt xorb %s: %w", x, err)
		}
		if !ok {
			rec, _ := json.Marshal(xorbOwnerRecord{Tenant: tenant, SizeBytes: p.adopt[x], Created: s.now().Unix()})
			if err := s.bucket.WriteAll(ctx, key, rec, nil); err != nil {
				return nil, fmt.Errorf("adopt xorb %s: %w", x, err)
			}
		}
	}
	return p, nil
}

// apply runs in the shard's index transaction, before its rows go in: it
// checks again what the collector may have changed since prepareShard,
// supersedes the tenant's releases of the files it registers, and records
// the adopted owners.
func (p *shardPrep) apply(ctx context.Context, tx *sql.Tx, now int64) error {
	if err := pendingTx(ctx, tx, shardOwnerKey(p.shard, p.tenant)); err != nil {
		return err
	}
	keys := []string{shardKey(p.shard)}
	for _, x := range p.named {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM xorbs WHERE hash = ?`, x).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return &ShardError{Kind: ErrMissingXorb, Reason: fmt.Sprintf("xorb %s is not stored (it was collected after it was released); upload it again before the shard; "+
				"a client that remembers it from its local cache must clear that cache (HF_XET_CACHE) first", x)}
		}
		if err != nil {
			return err
		}
		keys = append(keys, xorbKey(x))
	}
	if err := touchTx(ctx, tx, now, keys...); err != nil {
		return err
	}
	for _, x := range p.termXorbs {
		if err := pendingTx(ctx, tx, xorbOwnerKey(x, p.tenant)); err != nil {
			return err
		}
		if _, ok := p.adopt[x]; ok {
			continue
		}
		// Owned when prepared; if a release took the last owner since,
		// prepare again so this tenant adopts it.
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM xorb_owners WHERE xorb = ? LIMIT 1`, x).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("xorb %s lost its last owner while this shard was registered: %w", x, ErrCollecting)
		}
		if err != nil {
			return err
		}
	}
	for _, f := range p.files {
		var released int64
		err := tx.QueryRowContext(ctx, `SELECT released FROM file_releases WHERE tenant = ? AND hash = ?`, p.tenant, f).Scan(&released)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		if at, ok := p.again[f]; !ok || at < released {
			return fmt.Errorf("file %s: a release started while this shard was registered: %w", f, ErrCollecting)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM file_releases WHERE tenant = ? AND hash = ?`, p.tenant, f); err != nil {
			return err
		}
	}
	for _, x := range sortedKeys(p.adopt) {
		// The shard was verified against the index, so the xorb has a row:
		// the new owner is charged that row's size, as any owner is.
		var rec xorbRecord
		if err := tx.QueryRowContext(ctx, `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, x).Scan(&rec.size, &rec.chunks); err != nil {
			return fmt.Errorf("adopt xorb %s: %w", x, err)
		}
		if _, _, err := recordXorbOwner(ctx, tx, p.tenant, x, rec, restoreFacts, Unlimited, now); err != nil {
			return fmt.Errorf("adopt xorb %s: %w", x, err)
		}
	}
	return nil
}

// commitExists is createRef's hook: the commit a new ref points at must
// still be in the index (a squash may have dropped it).
func commitExists(ctx context.Context, tx *sql.Tx, id RepoID, sha string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM commits WHERE tenant = ? AND type = ? AND name = ? AND sha = ?`, id.Tenant, id.Type, id.Name, sha).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("commit %s of %s: %w", sha, id, ErrNotFound)
	}
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
