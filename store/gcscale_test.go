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

// The size of TestGCScaleData's data set.
const (
	scaleXorbs     = 100_000
	scaleChunksPer = 10
	scaleFiles     = scaleXorbs / 2
	scaleFilesPer  = 10
	scaleShards    = scaleFiles / scaleFilesPer
	scaleTenants   = 10
	scaleLeftovers = 1_000
	scaleChunkLen  = 64
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
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour)
	cfg := DirConfig(dir)
	cfg.Now = func() time.Time { return old }
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := &scaleGen{t: t, ctx: ctx, s: s, old: old}
	start := time.Now()
	// Xorbs with their layouts and owners (the tenant of the file's shard).
	g.batch(scaleXorbs, g.putXorb)
	t.Logf("xorbs written in %s", time.Since(start))
	// Shards (real ones: a pass may parse them), registered as PutShard
	// does: files, the xorbs they name, dedup rows, owners.
	g.batch(scaleShards, g.putShard)
	// One file in five released (as a repo deletion would): its xorbs
	// become releasable at once.
	g.batch(scaleFiles/5, g.releaseFile)
	g.putLeftovers()
	// Every object is older than any grace period.
	if _, err := s.db.ExecContext(ctx, `UPDATE gc_state SET value = ? WHERE name = 'epoch'`, old.Unix()); err != nil {
		t.Fatal(err)
	}
	var n [4]int64
	s.db.QueryRow(`SELECT (SELECT COUNT(*) FROM xorbs), (SELECT COUNT(*) FROM files), (SELECT COUNT(*) FROM shards), (SELECT COUNT(*) FROM xorb_owners)`).Scan(&n[0], &n[1], &n[2], &n[3])
	t.Logf("generated in %s: %d xorbs (%d chunks), %d files, %d shards, %d owners, %d leftover objects", time.Since(start), n[0], n[0]*scaleChunksPer, n[1], n[2], n[3], scaleLeftovers)
}

// scaleHash is the hash of the i-th object of a kind ("file").
func scaleHash(kind string, i int) xet.Hash {
	return xet.Hash(sha256.Sum256([]byte(fmt.Sprintf("%s/%d", kind, i))))
}

// scaleTenant is the tenant of shard number shard.
func scaleTenant(shard int) string { return fmt.Sprintf("tenant%02d", shard%scaleTenants) }

// scaleXorb is xorb i: chunks no other xorb has.
func scaleXorb(i int) ([]byte, xet.XorbInfo) {
	chunks := make([][]byte, scaleChunksPer)
	for c := range chunks {
		a := sha256.Sum256(fmt.Appendf(nil, "chunk/%d/%d", i, c))
		b := sha256.Sum256(a[:])
		chunks[c] = append(a[:], b[:scaleChunkLen-len(a)]...)
	}
	return xet.BuildXorb(chunks, false)
}

// scaleTerm is the term of the whole of xorb i, and the xorb's CAS info.
func scaleTerm(i int) (xet.Term, xet.CASInfo) {
	_, info := scaleXorb(i)
	return xet.Term{Xorb: info.Hash, ChunkEnd: scaleChunksPer, UnpackedBytes: uint32(info.UncompressedSize())}, xet.CASInfoFromXorb(info)
}

// scaleGen writes TestGCScaleData's objects into s, each created at old.
type scaleGen struct {
	t   *testing.T
	ctx context.Context
	s   *Store
	old time.Time
}

// batch runs fn for 0 to n-1, in transactions of 2000.
func (g *scaleGen) batch(n int, fn func(tx *sql.Tx, i int) error) {
	for lo := 0; lo < n; lo += 2000 {
		err := g.s.inTx(g.ctx, func(tx *sql.Tx) error {
			for i := lo; i < min(lo+2000, n); i++ {
				if err := fn(tx, i); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			g.t.Fatal(err)
		}
	}
}

// putXorb writes xorb i, its layout and its owner (the tenant of its
// file's shard).
func (g *scaleGen) putXorb(tx *sql.Tx, i int) error {
	ctx, s, old := g.ctx, g.s, g.old
	body, info := scaleXorb(i)
	x := info.Hash.String()
	tn := scaleTenant(i / 2 / scaleFilesPer)
	if _, _, err := recordXorbOwner(ctx, tx, tn, x, xorbRecord{size: info.StreamLen, chunks: encodeChunks(info.Chunks)}, restoreFacts, Unlimited, old.Unix()); err != nil {
		return err
	}
	if err := s.bucket.WriteAll(ctx, xorbKey(x), body, nil); err != nil {
		return err
	}
	rec, _ := json.Marshal(xorbOwnerRecord{Tenant: tn, SizeBytes: info.StreamLen, Created: old.Unix()})
	return s.bucket.WriteAll(ctx, xorbOwnerKey(x, tn), rec, nil)
}

// putShard writes shard k, of files of two xorbs each, with its owner,
// and registers it.
func (g *scaleGen) putShard(tx *sql.Tx, k int) error {
	ctx, s, old := g.ctx, g.s, g.old
	tn := scaleTenant(k)
	sh := &xet.Shard{}
	for j := k * scaleFilesPer; j < (k+1)*scaleFilesPer; j++ {
		t0, c0 := scaleTerm(2 * j)
		t1, c1 := scaleTerm(2*j + 1)
		sh.Files = append(sh.Files, xet.FileInfo{Hash: scaleHash("file", j), Terms: []xet.Term{t0, t1}})
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
}

// releaseFile releases file 5i, in the index and the bucket.
func (g *scaleGen) releaseFile(tx *sql.Tx, i int) error {
	ctx, s, old := g.ctx, g.s, g.old
	j := i * 5
	tn := scaleTenant(j / scaleFilesPer)
	if _, err := tx.ExecContext(ctx, `INSERT INTO file_releases(tenant, hash, released) VALUES (?, ?, ?)`, tn, scaleHash("file", j).String(), old.UnixNano()); err != nil {
		return err
	}
	rec, _ := json.Marshal(fileReleaseRecord{Tenant: tn, File: scaleHash("file", j).String(), Released: old.UnixNano()})
	if err := s.bucket.WriteAll(ctx, fileReleaseKey(tn, scaleHash("file", j).String()), rec, nil); err != nil {
		return err
	}
	_, err := releaseFileRow(ctx, tx, tn, scaleHash("file", j).String())
	return err
}

// putLeftovers writes the leftover xorbs: in the bucket, not the index.
func (g *scaleGen) putLeftovers() {
	for i := range scaleLeftovers {
		body, info := scaleXorb(scaleXorbs + i)
		if err := g.s.bucket.WriteAll(g.ctx, xorbKey(info.Hash.String()), body, nil); err != nil {
			g.t.Fatal(err)
		}
	}
}
