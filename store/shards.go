package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"openxet/xet"
)

// File is a file a tenant registered with a shard.
type File struct {
	Hash      xet.Hash
	SizeBytes uint64
	SHA256    string // lowercase hex, "" when the shard carried none
	Terms     []xet.Term
}

// ShardHash is the key a shard body is stored under: the hex SHA-256 of the body.
func ShardHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// VerifyShard checks a parsed shard against the stored xorbs (design §6.7 of
// the protocol reference): every xorb it names is stored, CAS blocks agree
// with the stored layouts, every term's chunk range and size agree, every
// verification hash matches, and each file hash matches its chunks.
func (s *Store) VerifyShard(ctx context.Context, sh *xet.Shard) error {
	layout := func(h xet.Hash) ([]xet.XorbChunk, error) {
		chunks, err := s.XorbChunks(ctx, h)
		if errors.Is(err, ErrNotFound) {
			return nil, &ShardError{Kind: ErrMissingXorb, Reason: fmt.Sprintf("xorb %s is not stored", h)}
		}
		return chunks, err
	}
	for i, c := range sh.Xorbs {
		chunks, err := layout(c.Xorb)
		if err != nil {
			return err
		}
		if len(c.Chunks) != len(chunks) {
			return invalidShard("CAS block %d (xorb %s) lists %d chunks, the xorb has %d", i, c.Xorb, len(c.Chunks), len(chunks))
		}
		var total uint64
		for j, cc := range c.Chunks {
			if cc.Hash != chunks[j].Hash || cc.UnpackedBytes != chunks[j].Size || uint64(cc.ByteRangeStart) != chunks[j].UncompressedEnd-uint64(chunks[j].Size) {
				return invalidShard("CAS block %d (xorb %s) chunk %d does not match the stored xorb", i, c.Xorb, j)
			}
			total += uint64(cc.UnpackedBytes)
		}
		if uint64(c.NumBytesInXorb) != total {
			return invalidShard("CAS block %d (xorb %s) says %d bytes, its chunks add up to %d", i, c.Xorb, c.NumBytesInXorb, total)
		}
	}
	for i, f := range sh.Files {
		if len(f.Terms) == 0 {
			if !f.Hash.IsZero() {
				return invalidShard("file %d (%s) has no terms but a non-zero hash", i, f.Hash)
			}
			continue
		}
		if f.Verification != nil && len(f.Verification) != len(f.Terms) {
			return invalidShard("file %d (%s) has %d verification entries for %d terms", i, f.Hash, len(f.Verification), len(f.Terms))
		}
		var leaves []xet.Leaf
		for j, t := range f.Terms {
			chunks, err := layout(t.Xorb)
			if err != nil {
				return err
			}
			if t.ChunkStart >= t.ChunkEnd || int(t.ChunkEnd) > len(chunks) {
				return invalidShard("file %d (%s) term %d: chunk range [%d,%d) outside xorb %s of %d chunks", i, f.Hash, j, t.ChunkStart, t.ChunkEnd, t.Xorb, len(chunks))
			}
			rng := chunks[t.ChunkStart:t.ChunkEnd]
			var size uint64
			hashes := make([]xet.Hash, len(rng))
			for k, c := range rng {
				size += uint64(c.Size)
				hashes[k] = c.Hash
				leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
			}
			if uint64(t.UnpackedBytes) != size {
				return invalidShard("file %d (%s) term %d says %d bytes, chunks [%d,%d) of xorb %s hold %d", i, f.Hash, j, t.UnpackedBytes, t.ChunkStart, t.ChunkEnd, t.Xorb, size)
			}
			if f.Verification != nil && xet.RangeHash(hashes) != f.Verification[j] {
				return invalidShard("file %d (%s) term %d: verification hash does not match xorb %s chunks [%d,%d)", i, f.Hash, j, t.Xorb, t.ChunkStart, t.ChunkEnd)
			}
		}
		if got := xet.FileHash(leaves); got != f.Hash {
			return invalidShard("file %d: hash %s does not match its chunks (%s)", i, f.Hash, got)
		}
	}
	return nil
}

func invalidShard(format string, args ...any) error {
	return &ShardError{Kind: ErrInvalidShard, Reason: fmt.Sprintf(format, args...)}
}

// PutShard registers a verified shard for tenant: the shard object (when not
// stored yet), the owner record, then one index transaction that makes its
// files readable by tenant and enters its eligible chunks in the dedup index.
// It reports whether the (shard, tenant) pair is new. Call VerifyShard first.
func (s *Store) PutShard(ctx context.Context, tenant string, body []byte, sh *xet.Shard) (inserted bool, err error) {
	h := ShardHash(body)
	exists, err := s.bucket.Exists(ctx, shardKey(h))
	if err != nil {
		return false, fmt.Errorf("put shard %s: %w", h, err)
	}
	if !exists {
		if err := s.bucket.WriteAll(ctx, shardKey(h), body, nil); err != nil {
			return false, fmt.Errorf("put shard %s: %w", h, err)
		}
	}
	now := s.now().Unix()
	ownerKey := shardOwnerKey(h, tenant)
	if ok, err := s.bucket.Exists(ctx, ownerKey); err != nil {
		return false, fmt.Errorf("put shard owner %s: %w", h, err)
	} else if !ok {
		rec, _ := json.Marshal(shardOwnerRecord{Tenant: tenant, Created: now})
		if err := s.bucket.WriteAll(ctx, ownerKey, rec, nil); err != nil {
			return false, fmt.Errorf("put shard owner %s: %w", h, err)
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var e error
		inserted, e = recordShard(ctx, tx, tenant, h, int64(len(body)), sh, now)
		return e
	})
	return inserted, err
}

func recordShard(ctx context.Context, tx *sql.Tx, tenant, h string, size int64, sh *xet.Shard, now int64) (bool, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO shards(hash, size) VALUES (?, ?) ON CONFLICT DO NOTHING`, h, size); err != nil {
		return false, fmt.Errorf("insert shard: %w", err)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO shard_owners(shard, tenant, created) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, h, tenant, now)
	if err != nil {
		return false, fmt.Errorf("insert shard owner: %w", err)
	}
	n, _ := res.RowsAffected()
	for _, c := range sh.Xorbs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO shard_xorbs(shard, xorb) VALUES (?, ?) ON CONFLICT DO NOTHING`, h, c.Xorb.String()); err != nil {
			return false, fmt.Errorf("insert shard xorb: %w", err)
		}
	}
	for _, f := range sh.Files {
		var size uint64
		for _, t := range f.Terms {
			size += uint64(t.UnpackedBytes)
		}
		var sha any
		if f.SHA256 != nil {
			sha = f.SHA256.String()
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO files(tenant, hash, size, sha256, terms, nterms, shard) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(tenant, hash) DO UPDATE SET sha256 = COALESCE(excluded.sha256, files.sha256)`,
			tenant, f.Hash.String(), int64(size), sha, encodeTerms(f.Terms), len(f.Terms), h); err != nil {
			return false, fmt.Errorf("insert file %s: %w", f.Hash, err)
		}
		if len(f.Terms) > 0 {
			if err := addDedup(ctx, tx, tenant, h, f.Terms[0].Xorb, f.Terms[0].ChunkStart, nil); err != nil {
				return false, err
			}
		}
	}
	for _, c := range sh.Xorbs {
		for i, cc := range c.Chunks {
			if xet.DedupEligible(cc.Hash) || cc.Flags&(1<<31) != 0 {
				if err := addDedup(ctx, tx, tenant, h, c.Xorb, uint32(i), &cc.Hash); err != nil {
					return false, err
				}
			}
		}
	}
	return n > 0, nil
}

// addDedup enters one chunk (given by hash, or by its index in the xorb).
func addDedup(ctx context.Context, tx *sql.Tx, tenant, shard string, xorb xet.Hash, index uint32, chunk *xet.Hash) error {
	if chunk == nil {
		var blob []byte
		if err := tx.QueryRowContext(ctx, `SELECT chunks FROM xorbs WHERE hash = ?`, xorb.String()).Scan(&blob); err != nil {
			return fmt.Errorf("dedup layout of %s: %w", xorb, err)
		}
		chunks, err := decodeChunks(blob)
		if err != nil || int(index) >= len(chunks) {
			return fmt.Errorf("dedup layout of %s: chunk %d: %v", xorb, index, err)
		}
		chunk = &chunks[index].Hash
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO dedup(chunk, tenant, xorb, shard) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		chunk.String(), tenant, xorb.String(), shard)
	if err != nil {
		return fmt.Errorf("insert dedup: %w", err)
	}
	return nil
}

// File returns a file tenant registered, or ErrNotFound.
func (s *Store) File(ctx context.Context, tenant string, h xet.Hash) (File, error) {
	return s.fileWhere(ctx, `tenant = ? AND hash = ?`, tenant, h.String())
}

// FileBySHA256 returns a file tenant registered whose shard carried that
// SHA-256 (lowercase hex), or ErrNotFound.
func (s *Store) FileBySHA256(ctx context.Context, tenant, sha string) (File, error) {
	return s.fileWhere(ctx, `tenant = ? AND sha256 = ?`, tenant, sha)
}

// FileTermCount returns the number of terms of a file tenant registered.
func (s *Store) FileTermCount(ctx context.Context, tenant string, h xet.Hash) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT nterms FROM files WHERE tenant = ? AND hash = ?`, tenant, h.String()).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("file %s: %w", h, ErrNotFound)
	}
	return n, err
}

func (s *Store) fileWhere(ctx context.Context, where string, args ...any) (File, error) {
	var (
		f     File
		hash  string
		size  int64
		sha   sql.NullString
		terms []byte
	)
	err := s.db.QueryRowContext(ctx, `SELECT hash, size, sha256, terms FROM files WHERE `+where+` LIMIT 1`, args...).Scan(&hash, &size, &sha, &terms)
	if errors.Is(err, sql.ErrNoRows) {
		return File{}, fmt.Errorf("file: %w", ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("file: %w", err)
	}
	if f.Hash, err = xet.ParseHash(hash); err != nil {
		return File{}, fmt.Errorf("file: %w", err)
	}
	if f.Terms, err = decodeTerms(terms); err != nil {
		return File{}, fmt.Errorf("file %s: %w", hash, err)
	}
	f.SizeBytes = uint64(size)
	f.SHA256 = sha.String
	return f, nil
}

// DedupAnswer returns the CAS blocks to offer for a chunk: the xorb that
// holds it first, then other xorbs of the shard that registered it (at most
// max in all). When global is false only tenant's own entries count.
// ErrNotFound when the chunk is not in the dedup index.
func (s *Store) DedupAnswer(ctx context.Context, tenant string, chunk xet.Hash, global bool, max int) ([]xet.CASInfo, error) {
	var xorb, shard string
	q := `SELECT xorb, shard FROM dedup WHERE chunk = ? AND tenant = ?`
	args := []any{chunk.String(), tenant}
	err := s.db.QueryRowContext(ctx, q, args...).Scan(&xorb, &shard)
	if errors.Is(err, sql.ErrNoRows) && global {
		err = s.db.QueryRowContext(ctx, `SELECT xorb, shard FROM dedup WHERE chunk = ? LIMIT 1`, chunk.String()).Scan(&xorb, &shard)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %s: %w", chunk, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	hashes := []string{xorb}
	rows, err := s.db.QueryContext(ctx, `SELECT xorb FROM shard_xorbs WHERE shard = ? AND xorb != ? LIMIT ?`, shard, xorb, max-1)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			rows.Close()
			return nil, err
		}
		hashes = append(hashes, x)
	}
	rows.Close()
	out := make([]xet.CASInfo, 0, len(hashes))
	for _, x := range hashes {
		h, err := xet.ParseHash(x)
		if err != nil {
			return nil, err
		}
		chunks, err := s.XorbChunks(ctx, h)
		if err != nil {
			return nil, err
		}
		out = append(out, casInfo(h, chunks))
	}
	return out, nil
}

func casInfo(h xet.Hash, chunks []xet.XorbChunk) xet.CASInfo {
	ci := xet.CASInfo{Xorb: h, Chunks: make([]xet.CASChunk, len(chunks))}
	var total uint64
	for i, c := range chunks {
		ci.Chunks[i] = xet.CASChunk{Hash: c.Hash, ByteRangeStart: uint32(total), UnpackedBytes: c.Size}
		total += uint64(c.Size)
	}
	ci.NumBytesInXorb = uint32(total)
	if n := len(chunks); n > 0 {
		ci.NumBytesOnDisk = chunks[n-1].SerializedEnd
	}
	return ci
}
