package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"openxet/xet"
)

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
