package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"openxet/store/accounts"
	"openxet/store/index"
	"openxet/store/objects"
	"openxet/xet"
)

// Progress is told how far a reindex is: stage, items done, items in the stage.
type Progress func(stage string, done, total int)

// ReindexConfig says what to rebuild.
type ReindexConfig struct {
	IndexPath string
	BucketURL string
	Progress  Progress
}

// Difference is one row that differs between the live index and one
// rebuilt from the bucket.
type Difference struct {
	Table  string
	Key    string
	Index  string // the live index's value ("" when absent)
	Bucket string // the rebuilt value ("" when absent)
	// InIndex and InBucket say whether the row is in the live index and
	// in the one rebuilt from the bucket (a value may be "" too).
	InIndex, InBucket bool
}

func (d Difference) String() string {
	return fmt.Sprintf("%s %s: index=%q bucket=%q", d.Table, d.Key, d.Index, d.Bucket)
}

// Leftover reports whether d is what an interrupted write leaves by design
// (docs/design.md §3): objects and records reach the bucket before the
// index transaction that records them, and the collector drops a row
// before it deletes the record, so a crash between the two leaves the
// bucket ahead of the index: a xorb, owner, shard or file row, dedup row
// or tenant row the rebuilt index has and the live one lacks, or a
// tenant's usage lower in the live index than the owners the bucket holds
// (with its limits the same). The next upload of the same bytes, the next
// collection pass or a reindex settles it. Any other difference (a value
// that disagrees, a row the bucket does not back) is not a leftover.
func (d Difference) Leftover() bool {
	switch d.Table {
	case "xorbs", "xorb_owners", "shard_owners", "files", "dedup":
		return !d.InIndex && d.InBucket
	case "tenants":
		if !d.InIndex || !d.InBucket {
			return !d.InIndex && d.InBucket
		}
		iu, irest, _ := strings.Cut(d.Index, " ")
		bu, brest, _ := strings.Cut(d.Bucket, " ")
		i, err1 := strconv.ParseInt(iu, 10, 64)
		b, err2 := strconv.ParseInt(bu, 10, 64)
		return err1 == nil && err2 == nil && i < b && irest == brest
	}
	return false
}

// Reindex rebuilds the whole index from the bucket beside the live one (a
// new file, or a new PostgreSQL schema) and swaps it in. It refuses
// (ErrIndexInUse) while any process holds the index open.
func Reindex(ctx context.Context, cfg ReindexConfig) error {
	lock, err := index.LockExclusive(ctx, cfg.IndexPath)
	if err != nil {
		return err
	}
	defer lock.Release()
	tmp := index.Scratch(cfg.IndexPath, "reindex")
	if err := build(ctx, cfg, tmp); err != nil {
		index.Remove(context.WithoutCancel(ctx), tmp)
		return err
	}
	return index.Swap(ctx, tmp, cfg.IndexPath)
}

// CheckIndex rebuilds the index from the bucket into a scratch index and
// returns every difference against the live index, without changing it. It
// may run while servers use the index.
func CheckIndex(ctx context.Context, cfg ReindexConfig) ([]Difference, error) {
	tmp := index.Scratch(cfg.IndexPath, fmt.Sprintf("check-%d", time.Now().UnixNano()))
	defer index.Remove(context.WithoutCancel(ctx), tmp)
	if err := build(ctx, cfg, tmp); err != nil {
		return nil, err
	}
	if !IsPostgres(cfg.IndexPath) {
		if _, err := os.Stat(cfg.IndexPath); err != nil {
			return nil, fmt.Errorf("index %s: %w", cfg.IndexPath, err)
		}
	}
	db, err := index.OpenWriter(ctx, cfg.IndexPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return compareIndexes(ctx, db, cfg.IndexPath, tmp)
}

func build(ctx context.Context, cfg ReindexConfig, path string) error {
	if err := index.Remove(ctx, path); err != nil {
		return err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string, int, int) {}
	}
	bucket, err := OpenBucket(ctx, cfg.BucketURL)
	if err != nil {
		return err
	}
	defer bucket.Close()
	db, err := index.OpenWriter(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	b := &builder{ctx: ctx, bucket: bucket, db: db, progress: progress}
	for _, step := range []func() error{b.credentials, b.limits, b.people, b.xorbs, b.xorbOwners, b.shardOwners, b.repos, b.lifecycle, b.unownedXorbs} {
		if err := step(); err != nil {
			return err
		}
	}
	if err := copyDeployment(ctx, bucket, db); err != nil {
		return err
	}
	if err := index.Fold(ctx, path, db); err != nil {
		return fmt.Errorf("checkpoint new index: %w", err)
	}
	return nil
}

type builder struct {
	ctx      context.Context
	bucket   *objects.Bucket
	db       *sql.DB
	progress Progress
}

// each lists prefix and runs fn for every key in batches of one transaction.
func (b *builder) each(stage, prefix string, fn func(tx *sql.Tx, key string) error) error {
	keys, err := b.bucket.ListKeys(b.ctx, prefix)
	if err != nil {
		return err
	}
	const batch = 256
	for start := 0; start < len(keys); start += batch {
		end := min(start+batch, len(keys))
		tx, err := b.db.BeginTx(b.ctx, nil)
		if err != nil {
			return err
		}
		for _, k := range keys[start:end] {
			if err := fn(tx, k); err != nil {
				tx.Rollback()
				return fmt.Errorf("%s %s: %w", stage, k, err)
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		b.progress(stage, end, len(keys))
	}
	if len(keys) == 0 {
		b.progress(stage, 0, 0)
	}
	return nil
}

func (b *builder) readJSON(key string, v any) error {
	data, err := b.bucket.ReadAll(b.ctx, key)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func (b *builder) credentials() error {
	return b.restore("credentials", accounts.PrefixCredentials, accounts.RestoreCredential)
}

// people restores users, organizations and memberships (store/accounts/people.go).
func (b *builder) people() error {
	for _, r := range []struct {
		stage, prefix string
		restore       func(ctx context.Context, tx *sql.Tx, data []byte) error
	}{
		{"users", accounts.PrefixUsers, accounts.RestoreUser},
		{"organizations", accounts.PrefixOrgs, accounts.RestoreOrg},
		{"memberships", accounts.PrefixMemberships, accounts.RestoreMembership},
	} {
		if err := b.restore(r.stage, r.prefix, r.restore); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) limits() error {
	return b.restore("tenant limits", accounts.PrefixTenantLimits, accounts.RestoreTenantLimits)
}

// restore indexes every record under prefix with the layer's restore.
func (b *builder) restore(stage, prefix string, restore func(ctx context.Context, tx *sql.Tx, data []byte) error) error {
	return b.each(stage, prefix, func(tx *sql.Tx, key string) error {
		data, err := b.bucket.ReadAll(b.ctx, key)
		if err != nil {
			return err
		}
		return restore(b.ctx, tx, data)
	})
}

func (b *builder) xorbs() error {
	return b.each("xorbs", prefixXorbs, func(tx *sql.Tx, key string) error {
		h, err := xet.ParseHash(strings.TrimPrefix(key, prefixXorbs))
		if err != nil {
			return err
		}
		data, err := b.bucket.ReadAll(b.ctx, key)
		if err != nil {
			return err
		}
		info, err := xet.ParseXorb(data, h)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(b.ctx, `INSERT INTO xorbs(hash, stream_len, chunks) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, h.String(), info.StreamLen, encodeChunks(info.Chunks))
		return err
	})
}

// xorbOwners replays every owner record whose xorb object is stored (and
// parsed in the xorbs step): the owner is charged the object's stream
// length, and no quota is enforced (restoreFacts). A record is counted even
// if the upload that wrote it never reached its index transaction (a
// crash): PutXorb's next upload of the xorb by that tenant completes or
// withdraws such a record, so the live index and a rebuild agree.
func (b *builder) xorbOwners() error {
	return b.each("xorb owners", prefixXorbOwners, func(tx *sql.Tx, key string) error {
		xorb, _, _ := strings.Cut(strings.TrimPrefix(key, prefixXorbOwners), "/")
		var rec xorbOwnerRecord
		if err := b.readJSON(key, &rec); err != nil {
			return err
		}
		var x xorbRecord
		err := tx.QueryRowContext(b.ctx, `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, xorb).Scan(&x.size, &x.chunks)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // an owner record whose xorb object is gone owns nothing
		}
		if err != nil {
			return err
		}
		_, _, err = recordXorbOwner(b.ctx, tx, rec.Tenant, xorb, x, restoreFacts, Unlimited, rec.Created)
		return err
	})
}

// unownedXorbs drops the rows of xorb objects that no tenant owns and no
// file of any tenant names: left by an upload refused at its index
// transaction or interrupted before its owner record (the live index has no
// row for them, and the next upload of the xorb adopts the object), or
// released and waiting for the collector. A xorb that a file still names
// keeps its row after its owners released it (the live index keeps it too).
// It runs last, once files and releases are rebuilt.
func (b *builder) unownedXorbs() error {
	g := newRefGraph()
	if err := g.readFiles(b.ctx, b.db); err != nil {
		return fmt.Errorf("unowned xorbs: %w", err)
	}
	referenced := g.referenced
	unowned, err := queryStrings(b.ctx, b.db, `SELECT hash FROM xorbs WHERE NOT EXISTS (SELECT 1 FROM xorb_owners o WHERE o.xorb = xorbs.hash)`)
	if err != nil {
		return fmt.Errorf("unowned xorbs: %w", err)
	}
	for _, h := range unowned {
		if referenced[h] {
			continue
		}
		if _, err := b.db.ExecContext(b.ctx, `DELETE FROM xorbs WHERE hash = ?`, h); err != nil {
			return fmt.Errorf("unowned xorb %s: %w", h, err)
		}
	}
	return nil
}

func (b *builder) shardOwners() error {
	return b.each("shard owners", prefixShardOwners, func(tx *sql.Tx, key string) error {
		shard, _, _ := strings.Cut(strings.TrimPrefix(key, prefixShardOwners), "/")
		var rec shardOwnerRecord
		if err := b.readJSON(key, &rec); err != nil {
			return err
		}
		body, err := b.bucket.ReadAll(b.ctx, shardKey(shard))
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		sh, err := xet.ParseShard(body)
		if err != nil {
			return err
		}
		if sh, err = b.presentOnly(tx, sh); err != nil { // lifecycle: reindex_lifecycle.go
			return err
		}
		_, err = recordShard(b.ctx, tx, rec.Tenant, shard, int64(len(body)), sh, rec.Created)
		return err
	})
}

func (b *builder) repos() error {
	keys, err := b.bucket.ListKeys(b.ctx, "repos/")
	if err != nil {
		return err
	}
	live := map[string]bool{} // repo folders that still have their repo.json
	for _, k := range keys {
		if dir, ok := strings.CutSuffix(k, "repo.json"); ok {
			live[dir] = true
		}
	}
	return b.each("repos", "repos/", func(tx *sql.Tx, key string) error {
		parts := strings.SplitN(key, "/", 5) // repos/{tenant}/{type}/{name}/…
		if len(parts) == 5 && parts[4] == movedRecord && !live[strings.Join(parts[:4], "/")+"/"] {
			var m moveRecord
			if err := b.readJSON(key, &m); err != nil {
				return err
			}
			return insertMove(b.ctx, tx, m.From, m.To)
		}
		if len(parts) < 5 || !live[strings.Join(parts[:4], "/")+"/"] {
			return nil // left behind by an interrupted delete
		}
		switch {
		case strings.HasSuffix(key, "/repo.json"):
			var r Repo
			if err := b.readJSON(key, &r); err != nil {
				return err
			}
			return insertRepo(b.ctx, tx, r)
		case strings.Contains(key, "/commits/"):
			var c commitRecord
			if err := b.readJSON(key, &c); err != nil {
				return err
			}
			return insertCommit(b.ctx, tx, c.Repo, c.Commit)
		case strings.Contains(key, "/refs/"):
			var r refRecord
			if err := b.readJSON(key, &r); err != nil {
				return err
			}
			return setRef(b.ctx, tx, r.RepoID, r.Ref, r.Commit)
		}
		return nil
	})
}

// liveXorbs is the part of the live index's xorbs table a check compares:
// rows with an owner, and rows the rebuilt index has too. A row nobody owns
// that a rebuild drops (a released xorb in its grace period, whose object
// the collector has yet to sweep) says nothing wrong.
const liveXorbs = `WHERE EXISTS (SELECT 1 FROM %[1]s.xorb_owners o WHERE o.xorb = hash) OR hash IN (SELECT hash FROM %[2]s.xorbs)`

// compared lists, per table, the key columns and the value columns that a
// check compares, and which rows of the live index take part ("" for all).
var compared = []struct{ table, key, value, liveWhere string }{
	{"tenants", "name", "usage_bytes || ' quota=' || COALESCE(CAST(quota_bytes AS TEXT), 'default') || ' limits=' || COALESCE(limits, '')", ""},
	{"xorbs", "hash", "stream_len || ' ' || hex(chunks)", liveXorbs},
	{"xorb_owners", "xorb || '/' || tenant", "CAST(size AS TEXT)", ""},
	{"shard_owners", "shard || '/' || tenant", "''", ""},
	{"files", "tenant || '/' || hash", "size || ' ' || COALESCE(sha256, '') || ' ' || hex(terms)", ""},
	{"dedup", "chunk || '/' || tenant", "xorb", ""},
	{"repos", "tenant || '/' || type || '/' || name", "CAST(private AS TEXT) || ' ' || visibility || ' ' || gated", ""},
	{"refs", "tenant || '/' || type || '/' || name || '@' || ref", "commit_sha", ""},
	{"repo_moves", "tenant || '/' || type || '/' || name", "moved_to", ""},
	{"commits", "tenant || '/' || type || '/' || name || '@' || sha", "parent || ' ' || hex(tree) || ' ' || COALESCE(hex(object), '')", ""},
	{"commit_aliases", "tenant || '/' || type || '/' || name || '@' || old_sha", "sha", ""},
	{"credentials", "id", "tenant || ' ' || scopes || ' ' || secret_sha256 || ' ' || COALESCE(CAST(revoked AS TEXT), '') || ' ' || kind || ' ' || name || ' ' || COALESCE(grants, '') || ' ' || COALESCE(CAST(expires AS TEXT), '')", ""},
	{"users", "name", "email || ' ' || CAST(admin AS TEXT) || ' ' || CAST(created AS TEXT) || ' ' || COALESCE(CAST(suspended AS TEXT), '') || ' ' || COALESCE(CAST(deleted AS TEXT), '')", ""},
	{"orgs", "name", "CAST(created AS TEXT)", ""},
	{"memberships", "org || '/' || member", "role || ' ' || CAST(created AS TEXT)", ""},
	{"deployment", "'marker'", "id", ""}, // deployment.go
}

// compareIndexes compares the live index on db (at location live) with the
// rebuilt one at fresh.
func compareIndexes(ctx context.Context, db *sql.DB, live, fresh string) ([]Difference, error) {
	liveName, freshName, attach, detach, err := index.ComparedSchemas(live, fresh)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, q := range attach {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("attach rebuilt index: %w", err)
		}
	}
	defer func() {
		for _, q := range detach {
			conn.ExecContext(context.WithoutCancel(ctx), q)
		}
	}()
	var diffs []Difference
	for _, c := range compared {
		where := c.liveWhere
		if where != "" {
			where = fmt.Sprintf(where, liveName, freshName)
		}
		q := fmt.Sprintf(`
SELECT k, MAX(a), MAX(b) FROM (
	SELECT %[2]s AS k, %[3]s AS a, NULL AS b FROM %[5]s.%[1]s %[4]s
	UNION ALL
	SELECT %[2]s AS k, NULL AS a, %[3]s AS b FROM %[6]s.%[1]s
) AS pairs GROUP BY k HAVING MAX(a) IS DISTINCT FROM MAX(b) OR COUNT(a) != COUNT(b) ORDER BY k`,
			c.table, c.key, c.value, where, liveName, freshName)
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("compare %s: %w", c.table, err)
		}
		for rows.Next() {
			var k string
			var a, b sql.NullString
			if err := rows.Scan(&k, &a, &b); err != nil {
				rows.Close()
				return nil, err
			}
			diffs = append(diffs, Difference{Table: c.table, Key: k, Index: a.String, Bucket: b.String, InIndex: a.Valid, InBucket: b.Valid})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return diffs, nil
}
