package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"openxet/xet"
)

// TestGCScaleData writes, into the data directory named by
// OPENXET_GC_SCALE_DIR, an index and bucket of 100k xorbs (1M chunks), 50k
// files in 5k shards of 10 tenants, with one file in five released and 1k
// leftover xorbs, all generated (not uploaded through HTTP). The xorbs are
// real but small (10 chunks of 64 bytes), so that reindex can run over the
// bucket. It is not a CI test; BENCHMARKS.md says how the collection pass,
// uploads beside it and reindex are measured over it.
func TestGCScaleData(t *testing.T) {
	dir := os.Getenv("OPENXET_GC_SCALE_DIR")
	if dir == "" {
		t.Skip("set OPENXET_GC_SCALE_DIR to generate the collection benchmark's data set")
	}
	const (
		nXorbs    = 100_000
		chunksPer = 10
		nFiles    = nXorbs / 2
		filesPer  = 10
		nShards   = nFiles / filesPer
		nTenants  = 10
		leftovers = 1_000
		chunkLen  = 64
	)
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour)
	cfg := DirConfig(dir)
	cfg.Now = func() time.Time { return old }
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hash := func(kind string, i int) xet.Hash {
		return xet.Hash(sha256.Sum256([]byte(fmt.Sprintf("%s/%d", kind, i))))
	}
	tenant := func(shard int) string { return fmt.Sprintf("tenant%02d", shard%nTenants) }
	// xorbOf is xorb i: chunks no other xorb has.
	xorbOf := func(i int) ([]byte, xet.XorbInfo) {
		chunks := make([][]byte, chunksPer)
		for c := range chunks {
			a := sha256.Sum256(fmt.Appendf(nil, "chunk/%d/%d", i, c))
			b := sha256.Sum256(a[:])
			chunks[c] = append(a[:], b[:chunkLen-len(a)]...)
		}
		return xet.BuildXorb(chunks, false)
	}
	start := time.Now()
	batch := func(n int, fn func(tx *sql.Tx, i int) error) {
		for lo := 0; lo < n; lo += 2000 {
			err := s.inTx(ctx, func(tx *sql.Tx) error {
				for i := lo; i < min(lo+2000, n); i++ {
					if err := fn(tx, i); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// Xorbs with their layouts and owners (the tenant of the file's shard).
	batch(nXorbs, func(tx *sql.Tx, i int) error {
		body, info := xorbOf(i)
		x := info.Hash.String()
		tn := tenant(i / 2 / filesPer)
		if _, _, err := recordXorbOwner(ctx, tx, tn, x, xorbRecord{size: info.StreamLen, chunks: encodeChunks(info.Chunks)}, restoreFacts, Unlimited, old.Unix()); err != nil {
			return err
		}
		if err := s.bucket.WriteAll(ctx, xorbKey(x), body, nil); err != nil {
			return err
		}
		rec, _ := json.Marshal(xorbOwnerRecord{Tenant: tn, SizeBytes: info.StreamLen, Created: old.Unix()})
		return s.bucket.WriteAll(ctx, xorbOwnerKey(x, tn), rec, nil)
	})
	t.Logf("xorbs written in %s", time.Since(start))
	// Shards (real ones: a pass may parse them), registered as PutShard
	// does: files, the xorbs they name, dedup rows, owners.
	term := func(i int) (xet.Term, xet.CASInfo) {
		_, info := xorbOf(i)
		return xet.Term{Xorb: info.Hash, ChunkEnd: chunksPer, UnpackedBytes: uint32(info.UncompressedSize())}, xet.CASInfoFromXorb(info)
	}
	batch(nShards, func(tx *sql.Tx, k int) error {
		tn := tenant(k)
		sh := &xet.Shard{}
		for j := k * filesPer; j < (k+1)*filesPer; j++ {
			t0, c0 := term(2 * j)
			t1, c1 := term(2*j + 1)
			sh.Files = append(sh.Files, xet.FileInfo{Hash: hash("file", j), Terms: []xet.Term{t0, t1}})
			sh.Xorbs = append(sh.Xorbs, c0, c1)
		}
		body := sh.MarshalUpload()
		parsed, err := xet.ParseShard(body)
		if err != nil {
			return err
		}
		h := ShardHash(body)
		if err := s.bucket.WriteAll(ctx, shardKey(h), body, nil); err != nil {
			return err
		}
		rec, _ := json.Marshal(shardOwnerRecord{Tenant: tn, Created: old.Unix()})
		if err := s.bucket.WriteAll(ctx, shardOwnerKey(h, tn), rec, nil); err != nil {
			return err
		}
		_, err = recordShard(ctx, tx, tn, h, int64(len(body)), parsed, old.Unix())
		return err
	})
	// One file in five released (as a repo deletion would): its xorbs
	// become releasable at once.
	batch(nFiles/5, func(tx *sql.Tx, i int) error {
		j := i * 5
		tn := tenant(j / filesPer)
		if _, err := tx.ExecContext(ctx, `INSERT INTO file_releases(tenant, hash, released) VALUES (?, ?, ?)`, tn, hash("file", j).String(), old.UnixNano()); err != nil {
			return err
		}
		rec, _ := json.Marshal(fileReleaseRecord{Tenant: tn, File: hash("file", j).String(), Released: old.UnixNano()})
		if err := s.bucket.WriteAll(ctx, fileReleaseKey(tn, hash("file", j).String()), rec, nil); err != nil {
			return err
		}
		_, err := releaseFileRow(ctx, tx, tn, hash("file", j).String())
		return err
	})
	for i := range leftovers {
		body, info := xorbOf(nXorbs + i)
		if err := s.bucket.WriteAll(ctx, xorbKey(info.Hash.String()), body, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every object is older than any grace period.
	if _, err := s.db.ExecContext(ctx, `UPDATE gc_state SET value = ? WHERE name = 'epoch'`, old.Unix()); err != nil {
		t.Fatal(err)
	}
	var n [4]int64
	s.db.QueryRow(`SELECT (SELECT COUNT(*) FROM xorbs), (SELECT COUNT(*) FROM files), (SELECT COUNT(*) FROM shards), (SELECT COUNT(*) FROM xorb_owners)`).Scan(&n[0], &n[1], &n[2], &n[3])
	t.Logf("generated in %s: %d xorbs (%d chunks), %d files, %d shards, %d owners, %d leftover objects", time.Since(start), n[0], n[0]*chunksPer, n[1], n[2], n[3], leftovers)
}
