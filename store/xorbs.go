package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"

	"openxet/xet"
)

// Unlimited is the quota value meaning "no quota".
const Unlimited int64 = -1

var lockSeed = maphash.MakeSeed()

func (s *Store) xorbLock(h xet.Hash) func() {
	m := &s.xorbLocks[maphash.Bytes(lockSeed, h[:])%uint64(len(s.xorbLocks))]
	m.Lock()
	return m.Unlock
}

// OwnsXorb reports whether tenant owns the xorb.
func (s *Store) OwnsXorb(ctx context.Context, tenant string, h xet.Hash) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM xorb_owners WHERE xorb = ? AND tenant = ?`, h.String(), tenant).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("owns xorb %s: %w", h, err)
	}
	return true, nil
}

// HasXorb reports whether the xorb is stored (by any tenant).
func (s *Store) HasXorb(ctx context.Context, h xet.Hash) (bool, error) {
	_, err := s.XorbChunks(ctx, h)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// PutXorb records a validated xorb for tenant: the chunk stream as the xorb
// object (when not stored yet), the owner record, then in one index
// transaction the xorb row, the owner row and, only when the owner row is
// new, the tenant's usage counter, which must stay within the tenant's
// quota: its override in the index if it has one, else defaultQuotaBytes
// (Unlimited for none). The index, not a node's cache, decides, so a quota
// is exact across every process sharing it. It reports whether the owner
// row is new.
//
// On *OverQuotaError nothing this call wrote remains.
func (s *Store) PutXorb(ctx context.Context, tenant string, info xet.XorbInfo, stream []byte, defaultQuotaBytes int64) (inserted bool, err error) {
	if int64(len(stream)) != info.StreamLen {
		return false, fmt.Errorf("put xorb %s: stream of %d bytes, layout says %d", info.Hash, len(stream), info.StreamLen)
	}
	unlock := s.xorbLock(info.Hash)
	defer unlock()
	if err := s.touchXorb(ctx, tenant, info.Hash); err != nil { // lifecycle: see gc.go
		return false, fmt.Errorf("put xorb %s: %w", info.Hash, err)
	}
	h := info.Hash.String()
	size, chunks := info.StreamLen, info.Chunks

	// A xorb can be serialized in more than one way (compression is the
	// uploader's choice). Once the index has a row for it, that row's
	// layout describes the stored object and every owner is charged its
	// size. Without a row, any object in the bucket is a leftover of an
	// interrupted upload and this upload's bytes replace it, so the layout
	// indexed below always matches the object.
	var stored []byte
	err = s.db.QueryRowContext(ctx, `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, h).Scan(&size, &stored)
	indexed := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("put xorb %s: %w", h, err)
	}
	if indexed {
		if chunks, err = decodeChunks(stored); err != nil {
			return false, fmt.Errorf("put xorb %s: %w", h, err)
		}
	} else {
		size = info.StreamLen
	}
	createdObject := false
	if !indexed {
		existed, err := s.bucket.Exists(ctx, xorbKey(h))
		if err != nil {
			return false, fmt.Errorf("put xorb %s: %w", h, err)
		}
		if err := s.bucket.WriteAll(ctx, xorbKey(h), stream, nil); err != nil {
			return false, fmt.Errorf("put xorb %s: %w", h, err)
		}
		createdObject = !existed
	}
	createdOwner := false
	ownerKey := xorbOwnerKey(h, tenant)
	ownerExists, err := s.bucket.Exists(ctx, ownerKey)
	if err != nil {
		return false, fmt.Errorf("put xorb owner %s: %w", h, err)
	}
	if !ownerExists {
		rec, _ := json.Marshal(xorbOwnerRecord{Tenant: tenant, SizeBytes: size, Created: s.now().Unix()})
		if err := s.bucket.WriteAll(ctx, ownerKey, rec, nil); err != nil {
			return false, fmt.Errorf("put xorb owner %s: %w", h, err)
		}
		createdOwner = true
	}

	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var e error
		inserted, e = recordXorbOwner(ctx, tx, tenant, h, chunks, size, defaultQuotaBytes, s.now().Unix())
		return e
	})
	if err != nil {
		// Undo what this call put in the bucket, so a refused upload leaves
		// nothing behind.
		if createdOwner {
			s.bucket.Delete(context.WithoutCancel(ctx), ownerKey)
		}
		if createdObject {
			if owned, _ := s.hasAnyOwner(context.WithoutCancel(ctx), h); !owned {
				s.bucket.Delete(context.WithoutCancel(ctx), xorbKey(h))
			}
		}
		return false, err
	}
	s.layouts.put(info.Hash, chunks)
	return inserted, nil
}

// recordXorbOwner is the one place that changes a usage counter.
func recordXorbOwner(ctx context.Context, tx *sql.Tx, tenant, h string, chunks []xet.XorbChunk, size, defaultQuotaBytes, now int64) (bool, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO xorbs(hash, stream_len, chunks) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, h, size, encodeChunks(chunks)); err != nil {
		return false, fmt.Errorf("insert xorb %s: %w", h, err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO xorb_owners(xorb, tenant, size, created) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, h, tenant, size, now)
	if err != nil {
		return false, fmt.Errorf("insert owner %s: %w", h, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, tenant); err != nil {
		return false, fmt.Errorf("insert tenant: %w", err)
	}
	res, err = tx.ExecContext(ctx, `UPDATE tenants SET usage_bytes = usage_bytes + ?1
		WHERE name = ?2 AND (COALESCE(quota_bytes, ?3) < 0 OR usage_bytes + ?1 <= COALESCE(quota_bytes, ?3))`, size, tenant, defaultQuotaBytes)
	if err != nil {
		return false, fmt.Errorf("update usage: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var usage, quota int64
		tx.QueryRowContext(ctx, `SELECT usage_bytes, COALESCE(quota_bytes, ?) FROM tenants WHERE name = ?`, defaultQuotaBytes, tenant).Scan(&usage, &quota)
		return false, &OverQuotaError{Tenant: tenant, QuotaBytes: quota, UsageBytes: usage, SizeBytes: size}
	}
	return true, nil
}

func (s *Store) hasAnyOwner(ctx context.Context, h string) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM xorb_owners WHERE xorb = ? LIMIT 1`, h).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// XorbChunks returns the chunk layout of a stored xorb, or ErrNotFound.
func (s *Store) XorbChunks(ctx context.Context, h xet.Hash) ([]xet.XorbChunk, error) {
	if v, ok := s.layouts.get(h); ok {
		return v, nil
	}
	var blob []byte
	err := s.db.QueryRowContext(ctx, `SELECT chunks FROM xorbs WHERE hash = ?`, h.String()).Scan(&blob)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("xorb %s: %w", h, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("xorb %s: %w", h, err)
	}
	chunks, err := decodeChunks(blob)
	if err != nil {
		return nil, fmt.Errorf("xorb %s: %w", h, err)
	}
	s.layouts.put(h, chunks)
	return chunks, nil
}

// OpenXorbRange returns a reader of length bytes of the stored chunk stream
// from offset. The caller closes it.
func (s *Store) OpenXorbRange(ctx context.Context, h xet.Hash, offset, length int64) (io.ReadCloser, error) {
	r, err := s.bucket.NewRangeReader(ctx, xorbKey(h.String()), offset, length, nil)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("xorb %s: %w", h, ErrNotFound)
		}
		return nil, fmt.Errorf("read xorb %s: %w", h, err)
	}
	return r, nil
}

// Usage returns a tenant's stored bytes (0 for an unknown tenant).
func (s *Store) Usage(ctx context.Context, tenant string) (int64, error) {
	var usage int64
	err := s.db.QueryRowContext(ctx, `SELECT usage_bytes FROM tenants WHERE name = ?`, tenant).Scan(&usage)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("usage of %s: %w", tenant, err)
	}
	return usage, nil
}
