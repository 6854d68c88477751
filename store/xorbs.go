package store

import (
	"bytes"
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
	err := s.queryRow(s.lookupCtx(ctx), `SELECT 1 FROM xorb_owners WHERE xorb = ? AND tenant = ?`, h.String(), tenant).Scan(&one)
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

// PutXorb records a validated xorb for tenant and reports whether the
// owner row is new. In order (docs/design.md §3):
//
//  1. The object. The index's row, when there is one, describes the object
//     in the bucket. Else the chunk stream is written only if no object is
//     there yet; when one is (a leftover of an interrupted or refused
//     upload, or another process's concurrent upload, possibly another
//     serialization of the xorb: compression is the uploader's choice),
//     that object is kept and its layout is the one indexed. An object is
//     never replaced or deleted here, so the layout indexed is always the
//     layout of the bytes stored, whatever the interleaving of processes.
//  2. The owner record in the bucket: the tenant's claim on the xorb.
//  3. One index transaction: the xorb row (if absent), the owner row and,
//     only when the owner row is new, the tenant's usage counter, which
//     must stay within the tenant's quota: its override in the index if it
//     has one, else defaultQuotaBytes (Unlimited for none). The index, not
//     a node's cache, decides, so a quota is exact across every process
//     sharing it. Every owner is charged the size the index has.
//
// An owner record without its owner row (a crash between 2 and 3) is the
// tenant's ownership as far as reindex is concerned; the tenant's next
// upload of the xorb completes it, or removes it when the quota refuses.
// When the transaction fails (*OverQuotaError, ErrUnavailable, …) the owner
// record is withdrawn and no row or counter changed; the object stays,
// owned by nobody (the next upload of the xorb adopts it; collection removes
// unowned objects after a grace period).
func (s *Store) PutXorb(ctx context.Context, tenant string, info xet.XorbInfo, stream []byte, defaultQuotaBytes int64) (inserted bool, err error) {
	if int64(len(stream)) != info.StreamLen {
		return false, fmt.Errorf("put xorb %s: stream of %d bytes, layout says %d", info.Hash, len(stream), info.StreamLen)
	}
	unlock := s.xorbLock(info.Hash)
	defer unlock()
	// The lifecycle's touch (touch.go), and the xorb's row read after it.
	x, indexed, err := s.touchXorb(ctx, tenant, info.Hash)
	if err != nil {
		return false, fmt.Errorf("put xorb %s: %w", info.Hash, err)
	}
	h := info.Hash.String()
	if !indexed {
		if err := s.step("indexed"); err != nil {
			return false, err
		}
		if x, err = s.storeXorbObject(ctx, info, stream); err != nil {
			return false, fmt.Errorf("put xorb %s: %w", h, err)
		}
	}
	if err := s.step("object"); err != nil {
		return false, err
	}
	if err := s.writeOwnerRecord(ctx, tenant, h, x.size); err != nil {
		return false, err
	}
	if err := s.step("owner"); err != nil {
		return false, err
	}
	inserted, x, err = s.recordUpload(ctx, tenant, h, x, defaultQuotaBytes)
	if err != nil {
		s.withdrawOwnerRecord(context.WithoutCancel(ctx), tenant, info.Hash, x.size)
		return false, err
	}
	if inserted {
		// A refused upload of this xorb by this tenant in another process
		// may have removed the record this ownership needs; put it back.
		if ok, err := s.bucket.Exists(ctx, xorbOwnerKey(h, tenant)); err == nil && !ok {
			s.writeOwnerRecord(context.WithoutCancel(ctx), tenant, h, x.size)
		}
	}
	chunks := info.Chunks
	if !bytes.Equal(x.chunks, encodeChunks(info.Chunks)) {
		if chunks, err = decodeChunks(x.chunks); err != nil {
			return false, fmt.Errorf("put xorb %s: %w", h, err)
		}
	}
	s.layouts.put(info.Hash, chunks)
	return inserted, nil
}

// xorbRecord is a xorb's row in the index: the length of its stored chunk
// stream and its encoded chunk layout.
type xorbRecord struct {
	size   int64
	chunks []byte
}

func (s *Store) xorbRow(ctx context.Context, h string) (xorbRecord, bool, error) {
	var x xorbRecord
	err := s.queryRow(s.lookupCtx(ctx), `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, h).Scan(&x.size, &x.chunks)
	if errors.Is(err, sql.ErrNoRows) {
		return x, false, nil
	}
	return x, err == nil, err
}

// storeXorbObject writes the xorb object unless one is there, and returns
// the layout of the object the bucket then holds.
func (s *Store) storeXorbObject(ctx context.Context, info xet.XorbInfo, stream []byte) (xorbRecord, error) {
	key := xorbKey(info.Hash.String())
	mine := xorbRecord{size: info.StreamLen, chunks: encodeChunks(info.Chunks)}
	written, err := s.writeObjectCRC(ctx, key, stream, typeBinary, true, &info.StreamCRC32)
	if err != nil || written {
		return mine, err
	}
	// Another upload stored this xorb first. Usually it is the same bytes
	// (a client retrying); compare before reading it whole.
	if same, err := s.sameObject(ctx, key, stream); err != nil || same {
		return mine, err
	}
	data, err := s.bucket.ReadAll(ctx, key)
	if err != nil {
		return xorbRecord{}, fmt.Errorf("read stored object: %w", bucketErr(err))
	}
	stored, err := xet.ParseXorb(data, info.Hash)
	if err != nil {
		return xorbRecord{}, fmt.Errorf("the object stored under %s is not this xorb (%v); remove it so that uploads can store the xorb", key, err)
	}
	return xorbRecord{size: stored.StreamLen, chunks: encodeChunks(stored.Chunks)}, nil
}

func (s *Store) writeOwnerRecord(ctx context.Context, tenant, h string, size int64) error {
	rec, _ := json.Marshal(xorbOwnerRecord{Tenant: tenant, SizeBytes: size, Created: s.now().Unix()})
	if _, err := s.writeObject(ctx, xorbOwnerKey(h, tenant), rec, typeJSON, false); err != nil {
		return fmt.Errorf("put xorb owner %s: %w", h, err)
	}
	return nil
}

// withdrawOwnerRecord removes the owner record of an upload whose index
// transaction failed (refused by the quota, or the index unavailable). If
// the index shows the ownership committed after all (an upload of the same
// xorb by the same tenant in another process), or cannot tell, the record
// is put back: a record without its row only costs a difference that
// reindex resolves as ownership, a row without its record would lose it.
func (s *Store) withdrawOwnerRecord(ctx context.Context, tenant string, h xet.Hash, size int64) {
	key := xorbOwnerKey(h.String(), tenant)
	if err := s.bucket.Delete(ctx, key); err != nil && !isNotFound(err) {
		return
	}
	if owned, err := s.OwnsXorb(ctx, tenant, h); err != nil || owned {
		s.writeOwnerRecord(ctx, tenant, h.String(), size)
	}
}

// Whether recordXorbOwner enforces the tenant's quota: an upload does; a
// rebuild from the bucket restores facts and never does (an admin may have
// lowered a quota below the usage the owner records add up to).
const (
	enforceQuota = true
	restoreFacts = false
)

// recordXorbOwner is the one place that changes a usage counter. It inserts
// the xorb row x unless the index has one, and charges the new owner the
// size of the row the index then has, which it returns. With enforce, the
// new owner row must keep the tenant within its quota: its override in the
// index if it has one, else defaultQuotaBytes.
func recordXorbOwner(ctx context.Context, tx *sql.Tx, tenant, h string, x xorbRecord, enforce bool, defaultQuotaBytes, now int64) (bool, xorbRecord, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO xorbs(hash, stream_len, chunks) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, h, x.size, x.chunks)
	if err != nil {
		return false, x, fmt.Errorf("insert xorb %s: %w", h, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if err := tx.QueryRowContext(ctx, `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, h).Scan(&x.size, &x.chunks); err != nil {
			return false, x, fmt.Errorf("xorb %s: %w", h, err)
		}
	}
	res, err = tx.ExecContext(ctx, `INSERT INTO xorb_owners(xorb, tenant, size, created) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, h, tenant, x.size, now)
	if err != nil {
		return false, x, fmt.Errorf("insert owner %s: %w", h, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, x, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tenants(name) VALUES (?) ON CONFLICT DO NOTHING`, tenant); err != nil {
		return false, x, fmt.Errorf("insert tenant: %w", err)
	}
	if !enforce {
		if _, err := tx.ExecContext(ctx, `UPDATE tenants SET usage_bytes = usage_bytes + ? WHERE name = ?`, x.size, tenant); err != nil {
			return false, x, fmt.Errorf("update usage: %w", err)
		}
		return true, x, nil
	}
	res, err = tx.ExecContext(ctx, chargeWithinQuota, x.size, tenant, defaultQuotaBytes)
	if err != nil {
		return false, x, fmt.Errorf("update usage: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var usage, quota int64
		tx.QueryRowContext(ctx, `SELECT usage_bytes, `+effectiveQuotaSQL("quota_bytes", "?1")+` FROM tenants WHERE name = ?2`, defaultQuotaBytes, tenant).Scan(&usage, &quota)
		return false, x, &OverQuotaError{Tenant: tenant, QuotaBytes: quota, UsageBytes: usage, SizeBytes: x.size}
	}
	return true, x, nil
}

// chargeWithinQuota charges ?1 bytes to tenant ?2 when they fit its quota
// (?3 the default quota).
var chargeWithinQuota = `UPDATE tenants SET usage_bytes = usage_bytes + ?1
	WHERE name = ?2 AND ` + fitsQuotaSQL(effectiveQuotaSQL("quota_bytes", "?3"), "usage_bytes", "?1")

// recordUpload is the owner transaction of an upload: recordXorbOwner
// with enforceQuota at the time now, in a transaction of its own; on
// PostgreSQL one statement that is its own transaction (xorbs_pg.go:
// pgRecordUpload).
func (s *Store) recordUpload(ctx context.Context, tenant, h string, x xorbRecord, defaultQuotaBytes int64) (inserted bool, rec xorbRecord, err error) {
	if s.pg {
		return s.pgRecordUpload(ctx, tenant, h, x, defaultQuotaBytes)
	}
	rec = x
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var e error
		inserted, rec, e = recordXorbOwner(ctx, tx, tenant, h, x, enforceQuota, defaultQuotaBytes, s.now().Unix())
		return e
	})
	return inserted, rec, err
}

// XorbChunks returns the chunk layout of a stored xorb, or ErrNotFound.
func (s *Store) XorbChunks(ctx context.Context, h xet.Hash) ([]xet.XorbChunk, error) {
	if v, ok := s.layouts.get(h); ok {
		return v, nil
	}
	var blob []byte
	err := s.queryRow(s.lookupCtx(ctx), `SELECT chunks FROM xorbs WHERE hash = ?`, h.String()).Scan(&blob)
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
// from offset. The caller closes it. A file:// bucket's object is read
// from its file directly (objects.Bucket.OpenFileRange).
func (s *Store) OpenXorbRange(ctx context.Context, h xet.Hash, offset, length int64) (io.ReadCloser, error) {
	if r, ok, err := s.bucket.OpenFileRange(xorbKey(h.String()), offset, length); ok {
		if err != nil {
			return nil, fmt.Errorf("xorb %s: %w", h, err)
		}
		return r, nil
	}
	r, err := s.bucket.NewRangeReader(ctx, xorbKey(h.String()), offset, length, nil)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("xorb %s: %w", h, ErrNotFound)
		}
		return nil, fmt.Errorf("read xorb %s: %w", h, bucketErr(err))
	}
	return r, nil
}

// usageAndQuota is tenant's usage and its effective quota (its override,
// else defaultQuotaBytes), for the sentence of an *OverQuotaError.
func (s *Store) usageAndQuota(ctx context.Context, tenant string, defaultQuotaBytes int64) (usage, quota int64, err error) {
	err = s.queryRow(ctx, `SELECT COALESCE((SELECT usage_bytes FROM tenants WHERE name = ?1), 0),
		`+effectiveQuotaSQL("(SELECT quota_bytes FROM tenants WHERE name = ?1)", "?2"), tenant, defaultQuotaBytes).Scan(&usage, &quota)
	return usage, quota, err
}

// Usage returns a tenant's stored bytes (0 for an unknown tenant).
func (s *Store) Usage(ctx context.Context, tenant string) (int64, error) {
	var usage int64
	err := s.queryRow(ctx, `SELECT usage_bytes FROM tenants WHERE name = ?`, tenant).Scan(&usage)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("usage of %s: %w", tenant, err)
	}
	return usage, nil
}
