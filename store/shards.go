package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"openxet/xet"
)

// File is a file a tenant registered with a shard, as the index describes
// it; FileWindow reads the part of its term list a request needs.
type File struct {
	Hash      xet.Hash
	SizeBytes uint64
	SHA256    string // lowercase hex, "" when the shard carried none
	TermCount int    // terms in the file's term list

	// terms is the stored term list of a file of at most inlineTerms
	// terms, read with the file's row; nil for a longer list, which
	// FileWindow reads in a statement of its own.
	terms []byte
}

// inlineTerms is the longest term list File reads with the file's row, so
// that a reconstruction of a small file runs one index statement instead
// of two. It is read before the caller reserves memory for the list
// (docs/design.md §6), which its bound makes harmless: FileTermListBytes of it is
// a few KiB. A longer list is read only after the reservation.
const inlineTerms = 32

// selectFile is the start of File's statement. The CASE leaves a long list
// unread: the engine fetches a column only when the statement uses it.
var selectFile = `SELECT hash, size, sha256, nterms, CASE WHEN nterms <= ` + strconv.Itoa(inlineTerms) + ` THEN terms END FROM files WHERE `

// ShardHash is the key a shard body is stored under: the hex SHA-256 of the body.
func ShardHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// maxShardChunkRefs bounds the chunk references one shard may make its
// files check (a hostile shard can name the same large range many times).
const maxShardChunkRefs = 1 << 25

// VerifyShard checks a parsed shard against the stored xorbs (docs/protocol.md §6.7 of the
// protocol reference): every xorb it names is stored, CAS blocks agree
// with the stored layouts, every term's chunk range and size agree, every
// verification hash matches, and each file hash matches its chunks.
// It is the check for a shard the server built itself from bytes it holds
// (ingestion, copies); a shard a client uploads goes through VerifyUpload.
// Errors are *ShardError (ErrMissingXorb or ErrInvalidShard) or I/O errors.
func (s *Store) VerifyShard(ctx context.Context, sh *xet.Shard) error {
	return s.verifyShard(ctx, sh, func(xet.Hash) bool { return true })
}

// VerifyUpload is VerifyShard for a shard a client uploads for tenant, with
// the possession rule (docs/design.md §2): naming a xorb proves nothing, so
//
//   - with global false (server.dedup_scope tenant) every xorb the shard
//     names must be one tenant owns; another tenant's is answered as not
//     stored, so that a refusal does not tell that someone holds the bytes;
//   - with global true, a file whose terms name a xorb tenant does not own
//     must carry verification entries, the range hashes over the stored
//     chunk hashes that only a holder of the chunks can compute; a CAS
//     block of such a xorb must list every chunk hash, which is the same
//     proof.
//
// A tenant owns a xorb it uploaded whole (PutXorb read and hashed its
// body), so its own xorbs need no further proof. A refusal of a term or a
// CAS block that names another tenant's xorb is one sentence whatever
// field is wrong, and no refusal carries a value computed from stored data:
// nothing a probe learns brings it closer to a right answer.
func (s *Store) VerifyUpload(ctx context.Context, tenant string, sh *xet.Shard, global bool) error {
	owned := map[xet.Hash]bool{}
	check := func(h xet.Hash) error {
		if _, seen := owned[h]; seen {
			return nil
		}
		ok, err := s.OwnsXorb(ctx, tenant, h)
		if err != nil {
			return err
		}
		if !ok && !global {
			return missingXorb(h)
		}
		owned[h] = ok
		return nil
	}
	for _, x := range sh.Xorbs {
		if err := check(x.Xorb); err != nil {
			return err
		}
	}
	for _, f := range sh.Files {
		for i, t := range f.Terms {
			if err := check(t.Xorb); err != nil {
				return err
			}
			if !owned[t.Xorb] && f.Verification == nil {
				return invalidShard("file %s term %d names xorb %s, which this tenant did not upload: a file that "+
					"references chunks another upload stored must carry verification entries (docs/protocol.md §6.7), "+
					"which prove that the uploader holds them; every stock client sends them", f.Hash, i, t.Xorb)
			}
		}
	}
	return s.verifyShard(ctx, sh, func(h xet.Hash) bool { return owned[h] })
}

// verifyShard is VerifyShard; own reports whether the uploader owns a
// xorb, which decides how a refusal about it is worded.
func (s *Store) verifyShard(ctx context.Context, sh *xet.Shard, own func(xet.Hash) bool) error {
	layout := func(h xet.Hash) ([]xet.XorbChunk, error) {
		chunks, err := s.XorbChunks(ctx, h)
		if errors.Is(err, ErrNotFound) {
			return nil, missingXorb(h)
		}
		return chunks, err
	}
	// asShardError keeps lookup errors as they are and turns a verdict of
	// xet into an invalid-shard refusal: the field it names when the xorb
	// is the uploader's own, one sentence for any field when it is not.
	asShardError := func(err error, file xet.Hash) error {
		var ce *xet.CheckError
		if !errors.As(err, &ce) {
			return err
		}
		switch {
		case ce.Xorb == (xet.Hash{}) || own(ce.Xorb):
			return &ShardError{Kind: ErrInvalidShard, Reason: ce.Error()}
		case ce.Term < 0:
			return invalidShard("CAS block for xorb %s does not match the stored xorb", ce.Xorb)
		default:
			return invalidShard("file %s term %d does not match the chunks it names: its chunk range, "+
				"unpacked_segment_bytes and verification hash must all agree with xorb %s", file, ce.Term, ce.Xorb)
		}
	}
	for _, c := range sh.Xorbs {
		chunks, err := layout(c.Xorb)
		if err != nil {
			return err
		}
		if err := xet.CheckCASInfo(c, chunks); err != nil {
			return asShardError(err, xet.Hash{})
		}
	}
	var refs uint64
	for _, f := range sh.Files {
		refs += xet.FileChunkCount(f.Terms)
	}
	if refs > maxShardChunkRefs {
		return invalidShard("the shard's files reference %d chunks, more than the %d one shard may", refs, maxShardChunkRefs)
	}
	for _, f := range sh.Files {
		if err := xet.CheckFile(f, layout); err != nil {
			return asShardError(err, f.Hash)
		}
	}
	return nil
}

func missingXorb(h xet.Hash) error {
	return &ShardError{Kind: ErrMissingXorb, Reason: fmt.Sprintf("xorb %s is not stored; upload it before the shard", h)}
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
	prep, err := s.prepareShard(ctx, tenant, h, sh)
	if err != nil {
		return false, fmt.Errorf("put shard %s: %w", h, err)
	}
	now := s.now().Unix()
	if _, err := s.writeShardObjects(ctx, tenant, h, body, now); err != nil {
		return false, fmt.Errorf("put shard %s: %w", h, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := prep.apply(ctx, tx, now); err != nil {
			return err
		}
		var e error
		inserted, e = recordShard(ctx, tx, tenant, h, int64(len(body)), sh, now)
		return e
	})
	return inserted, err
}

// writeShardObjects stores shard h's object (when not stored yet) and
// tenant's owner record of it (when it has none), created at now: what
// the index will say is there, before it says so. It reports whether it
// wrote the owner record.
func (s *Store) writeShardObjects(ctx context.Context, tenant, h string, body []byte, now int64) (wroteOwner bool, err error) {
	exists, err := s.bucket.Exists(ctx, shardKey(h))
	if err != nil {
		return false, bucketErr(err)
	}
	if !exists {
		if _, err := s.writeObject(ctx, shardKey(h), body, typeBinary, false); err != nil {
			return false, err
		}
	}
	ownerKey := shardOwnerKey(h, tenant)
	if ok, err := s.bucket.Exists(ctx, ownerKey); err != nil {
		return false, fmt.Errorf("owner record: %w", bucketErr(err))
	} else if ok {
		return false, nil
	}
	rec, _ := json.Marshal(shardOwnerRecord{Tenant: tenant, Created: now})
	if _, err := s.writeObject(ctx, ownerKey, rec, typeJSON, false); err != nil {
		return false, fmt.Errorf("owner record: %w", err)
	}
	return true, nil
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
	// shard_xorbs lists every xorb the shard names, in its CAS blocks and in
	// its files' terms, so a dedup answer built from any shard that
	// registered a file offers all of that file's xorbs.
	named := map[xet.Hash]bool{}
	for _, c := range sh.Xorbs {
		named[c.Xorb] = true
	}
	for _, f := range sh.Files {
		for _, t := range f.Terms {
			named[t.Xorb] = true
		}
	}
	for x := range named {
		if _, err := tx.ExecContext(ctx, `INSERT INTO shard_xorbs(shard, xorb) VALUES (?, ?) ON CONFLICT DO NOTHING`, h, x.String()); err != nil {
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
			ON CONFLICT(tenant, hash) DO UPDATE SET
				sha256 = COALESCE(files.sha256, excluded.sha256),
				terms  = CASE WHEN excluded.shard < files.shard THEN excluded.terms ELSE files.terms END,
				nterms = CASE WHEN excluded.shard < files.shard THEN excluded.nterms ELSE files.nterms END,
				shard  = CASE WHEN excluded.shard < files.shard THEN excluded.shard ELSE files.shard END`,
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
	// When a chunk is in several xorbs the smallest (xorb, shard) wins, so
	// the row does not depend on the order shards arrive in (reindex
	// replays them in key order).
	_, err := tx.ExecContext(ctx, `INSERT INTO dedup(chunk, tenant, xorb, shard) VALUES (?, ?, ?, ?)
		ON CONFLICT(chunk, tenant) DO UPDATE SET xorb = excluded.xorb, shard = excluded.shard
		WHERE excluded.xorb < dedup.xorb OR (excluded.xorb = dedup.xorb AND excluded.shard < dedup.shard)`,
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

func (s *Store) fileWhere(ctx context.Context, where string, args ...any) (File, error) {
	var (
		f    File
		hash string
		size int64
		sha  sql.NullString
	)
	err := s.queryRow(s.lookupCtx(ctx), selectFile+where+` LIMIT 1`, args...).Scan(&hash, &size, &sha, &f.TermCount, &f.terms)
	if errors.Is(err, sql.ErrNoRows) {
		return File{}, fmt.Errorf("file: %w", ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("file: %w", err)
	}
	if f.Hash, err = xet.ParseHash(hash); err != nil {
		return File{}, fmt.Errorf("file: %w", err)
	}
	f.SizeBytes = uint64(size)
	f.SHA256 = sha.String
	return f, nil
}

// FileTermListBytes is the most memory FileTerms holds while it reads the
// term list of a file of n terms (File.TermCount): the stored list as the
// index reads it, the copy the driver hands over, and the decoded terms.
// Reserve it before calling FileTerms.
func FileTermListBytes(n int) int64 { return int64(n) * 3 * termRecordBytes }

// FileWindow is FileTerms for a file File returned: a short term list read
// with the file's row is decoded without another statement.
func (s *Store) FileWindow(ctx context.Context, tenant string, f File, start, end uint64) (terms []xet.Term, offset uint64, err error) {
	if f.terms == nil {
		return s.FileTerms(ctx, tenant, f.Hash, start, end)
	}
	if terms, offset, err = decodeTermWindow(f.terms, start, end); err != nil {
		return nil, 0, fmt.Errorf("file %s: %w", f.Hash, err)
	}
	return terms, offset, nil
}

// FileTerms returns the terms of a file tenant registered that overlap the
// byte window [start, end) of the file, from the first that ends after start
// to the last that starts before end, and the file offset at which the first
// of them starts; only those terms are decoded. An empty window gives no
// terms. ErrNotFound when tenant did not register the file.
func (s *Store) FileTerms(ctx context.Context, tenant string, h xet.Hash, start, end uint64) (terms []xet.Term, offset uint64, err error) {
	rows, err := s.query(s.lookupCtx(ctx), `SELECT terms FROM files WHERE tenant = ? AND hash = ?`, tenant, h.String())
	if err != nil {
		return nil, 0, fmt.Errorf("file %s terms: %w", h, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, 0, fmt.Errorf("file %s terms: %w", h, err)
		}
		return nil, 0, fmt.Errorf("file %s: %w", h, ErrNotFound)
	}
	// RawBytes: the driver's copy, read in place rather than copied again.
	var raw sql.RawBytes
	if err := rows.Scan(&raw); err != nil {
		return nil, 0, fmt.Errorf("file %s terms: %w", h, err)
	}
	if terms, offset, err = decodeTermWindow(raw, start, end); err != nil {
		return nil, 0, fmt.Errorf("file %s: %w", h, err)
	}
	return terms, offset, rows.Close()
}

// DedupAnswer returns the CAS blocks to offer for a chunk: the xorb that
// holds it first, then, when the entry is tenant's own, other xorbs of the
// shard that registered it (at most max in all); another tenant's entry
// offers the one xorb that holds the chunk. When global is false only
// tenant's own entries count.
// ErrNotFound when the chunk is not in the dedup index.
func (s *Store) DedupAnswer(ctx context.Context, tenant string, chunk xet.Hash, global bool, max int) ([]xet.CASInfo, error) {
	ctx = s.lookupCtx(ctx)
	var xorb, shard string
	c := chunk.String()
	var err error
	others := 0 // 1 when the entry is another tenant's
	if global {
		// The tenant's own entry first, else any tenant's, in one statement:
		// most queries of new data miss, and a miss used to cost two.
		err = s.queryRow(ctx, dedupGlobalQuery, c, tenant, c).Scan(&xorb, &shard, &others)
	} else {
		err = s.queryRow(ctx, `SELECT xorb, shard FROM dedup WHERE chunk = ? AND tenant = ?`, c, tenant).Scan(&xorb, &shard)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %s: %w", c, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	hashes := []string{xorb}
	if others == 1 {
		// Another tenant's upload: the xorb that holds the chunk and no
		// more (docs/design.md §2). The other xorbs of that upload would
		// tell what else it stored, and the client needs only this one to
		// deduplicate the chunk and its neighbours.
		return s.casInfos(ctx, hashes)
	}
	rows, err := s.query(ctx, `SELECT xorb FROM shard_xorbs WHERE shard = ? AND xorb != ? ORDER BY xorb LIMIT ?`, shard, xorb, max-1)
	if err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, err)
	}
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			rows.Close()
			return nil, dbErr(err)
		}
		hashes = append(hashes, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dedup %s: %w", chunk, dbErr(err))
	}
	return s.casInfos(ctx, hashes)
}

// casInfos returns the CAS blocks of the stored xorbs named in hex.
func (s *Store) casInfos(ctx context.Context, hashes []string) ([]xet.CASInfo, error) {
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

// dedupGlobalQuery finds a chunk's dedup entry for a tenant that may use
// any tenant's: its own (one key probe) if it has one, else the first of
// another's. The pref column orders the two, so the answer does not depend
// on how the engine runs UNION ALL.
const dedupGlobalQuery = `SELECT xorb, shard, pref FROM (
	SELECT xorb, shard, 0 AS pref FROM dedup WHERE chunk = ? AND tenant = ?
	UNION ALL
	SELECT xorb, shard, 1 AS pref FROM (SELECT xorb, shard FROM dedup WHERE chunk = ? LIMIT 1) AS anyone
) AS found ORDER BY pref LIMIT 1`

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
