package store

// What the CAS does in one statement on PostgreSQL, where every statement
// is a round trip to the server: the owner transaction of an upload and
// the touch of a xorb. What else differs between the index's two engines
// is package store/index's.

import (
	"context"
	"database/sql"
	"fmt"

	"openxet/store/index"
	"openxet/xet"
)

// DefaultPostgresSchema is the schema of the index tables when a
// postgres:// URL names none (index.DefaultPostgresSchema).
const DefaultPostgresSchema = index.DefaultPostgresSchema

// DefaultLockCheck is Config.LockCheck's default (index.DefaultLockCheck).
const DefaultLockCheck = index.DefaultLockCheck

// DefaultCheckpointEvery is Config.CheckpointEvery's default
// (index.DefaultCheckpointEvery).
const DefaultCheckpointEvery = index.DefaultCheckpointEvery

// SlowCheckpoint is how long a background checkpoint of a SQLite index
// runs before the log says so at INFO (index.SlowCheckpoint).
const SlowCheckpoint = index.SlowCheckpoint

// CheckpointStats is how many background checkpoints of a SQLite index
// ran, how many were slow, and their time (index.CheckpointStats).
type CheckpointStats = index.CheckpointStats

// IsPostgres reports whether an index location is a PostgreSQL URL rather
// than a SQLite file (index.IsPostgres).
func IsPostgres(loc string) bool { return index.IsPostgres(loc) }

// CheckIndexLocation reports what is wrong with an index location before
// anything is opened (index.CheckLocation).
func CheckIndexLocation(loc string) error { return index.CheckLocation(loc) }

// pgOverQuota is the SQLSTATE of over_quota() (index.OverQuotaCode), which
// pgRecordUpload's statement calls to abort itself.
const pgOverQuota = index.OverQuotaCode

// pgRecordUploadSQL is pgRecordUpload's statement: $1 the xorb's hash,
// $2 its stream length, $3 its chunk layout, $4 the tenant, $5 the default
// quota, $6 the time (Unix seconds).
var pgRecordUploadSQL = `WITH ins AS (
		INSERT INTO xorbs(hash, stream_len, chunks) VALUES ($1::text, $2::bigint, $3::bytea)
		ON CONFLICT DO NOTHING RETURNING stream_len, chunks
	), x AS (
		SELECT stream_len, chunks FROM ins
		UNION ALL
		SELECT stream_len, chunks FROM xorbs WHERE hash = $1::text AND NOT EXISTS (SELECT 1 FROM ins)
	), own AS (
		INSERT INTO xorb_owners(xorb, tenant, size, created) SELECT $1::text, $4::text, stream_len, $6::bigint FROM x
		ON CONFLICT DO NOTHING RETURNING size
	), charge AS (
		INSERT INTO tenants AS t (name, usage_bytes) SELECT $4::text, size FROM own
		WHERE EXISTS (SELECT 1 FROM tenants WHERE name = $4::text) OR ` + fitsQuotaSQL("$5::bigint", "0", "size") + `
		ON CONFLICT (name) DO UPDATE SET usage_bytes = t.usage_bytes + excluded.usage_bytes
		WHERE ` + fitsQuotaSQL(effectiveQuotaSQL("t.quota_bytes", "$5::bigint"), "t.usage_bytes", "excluded.usage_bytes") + `
		RETURNING 1
	)
	SELECT x.stream_len, x.chunks, EXISTS (SELECT 1 FROM own)
	FROM x
	WHERE CASE WHEN NOT EXISTS (SELECT 1 FROM own) OR EXISTS (SELECT 1 FROM charge) THEN true ELSE over_quota() END`

// pgRecordUpload is the owner transaction of an upload on PostgreSQL
// (recordUpload), where every statement is a round trip to the server:
// the xorb row (if absent), the owner row and, only when the owner row is
// new, the tenant's usage within its quota, in one statement that is its
// own (SERIALIZABLE) transaction, instead of BEGIN, four to six statements
// and COMMIT. Its parts see one snapshot, so the tenant's charge is an
// upsert: a tenant without a row is inserted only when the size fits the
// default quota, an existing one is charged only within its own. An owner
// row it would insert without a charge makes it call over_quota(), which
// aborts it, so nothing is written; the *OverQuotaError then reports the
// usage and quota read after. It runs again, as index.DB.Tx does, while a
// concurrent transaction wins (pgStatement).
func (s *Store) pgRecordUpload(ctx context.Context, tenant, h string, x xorbRecord, defaultQuotaBytes int64) (bool, xorbRecord, error) {
	rec := x
	var ownerNew bool
	err := s.pgStatement(ctx, func(conn *sql.Conn) error {
		rec = x
		return conn.QueryRowContext(ctx, pgRecordUploadSQL,
			h, x.size, x.chunks, tenant, defaultQuotaBytes, s.now().Unix()).Scan(&rec.size, &rec.chunks, &ownerNew)
	})
	if index.PostgresCode(err) == pgOverQuota {
		usage, quota, err := s.usageAndQuota(ctx, tenant, defaultQuotaBytes)
		if err != nil {
			usage, quota = 0, defaultQuotaBytes
		}
		return false, rec, &OverQuotaError{Tenant: tenant, QuotaBytes: quota, UsageBytes: usage, SizeBytes: rec.size}
	}
	if err != nil {
		return false, x, fmt.Errorf("record owner of xorb %s: %w", h, err)
	}
	return ownerNew, rec, nil
}

// pgStatement runs fn, one statement that is its own SERIALIZABLE
// transaction, on the write pool (index.DB.Statement): one round trip where
// inTx makes at least three.
func (s *Store) pgStatement(ctx context.Context, fn func(conn *sql.Conn) error) error {
	return dbErr(s.idx.Statement(ctx, fn))
}

// pgTouchXorb is touchXorb on PostgreSQL, in one statement that is its own
// transaction (pgStatement) instead of BEGIN, two reads, an upsert and
// COMMIT: the same checks and touch as pendingTx and touchTx, in the same
// order and with the same outcome. When the tenant's owner record of the
// xorb is being released (gc_pending) or the xorb is being deleted
// (gc_objects.doomed), nothing is written and the error is ErrCollecting;
// else the xorb's key is touched at now, or at one more than the touch
// floor when that is later, as touchTx does. The statement reads the
// floor and the doomed mark in the snapshot it writes in, so a pass
// starting (startTx) or condemning the xorb (doomTx) concurrently makes
// one of the two transactions fail to serialize and run again, as with
// touchTx. It also returns the xorb's row, read in the same snapshot: what
// xorbRow would read just before the touch commits.
func (s *Store) pgTouchXorb(ctx context.Context, tenant string, h xet.Hash) (xorbRecord, bool, error) {
	owner, key := xorbOwnerKey(h.String(), tenant), xorbKey(h.String())
	var (
		pending, doomed bool
		size            sql.NullInt64
		x               xorbRecord
	)
	err := s.pgStatement(ctx, func(conn *sql.Conn) error {
		x.chunks = nil
		return conn.QueryRowContext(ctx, `WITH state AS (
			SELECT EXISTS (SELECT 1 FROM gc_pending WHERE key = $1::text) AS pending,
				EXISTS (SELECT 1 FROM gc_objects WHERE key = $2::text AND doomed IS NOT NULL) AS doomed,
				(SELECT COALESCE(MAX(value), 0) FROM gc_state WHERE name = 'touch_floor') AS touch_floor
		), touch AS (
			INSERT INTO gc_objects(key, touched)
			SELECT $2::text, CASE WHEN touch_floor + 1 > $3::bigint THEN touch_floor + 1 ELSE $3::bigint END FROM state
			WHERE NOT pending AND NOT doomed
			ON CONFLICT (key) DO UPDATE SET touched = CASE WHEN excluded.touched > gc_objects.touched THEN excluded.touched ELSE gc_objects.touched END
		)
		SELECT st.pending, st.doomed, x.stream_len, x.chunks FROM state st LEFT JOIN xorbs x ON x.hash = $4::text`,
			owner, key, s.now().Unix(), h.String()).Scan(&pending, &doomed, &size, &x.chunks)
	})
	switch {
	case err != nil:
		return xorbRecord{}, false, fmt.Errorf("touch %s: %w", key, err)
	case pending:
		return xorbRecord{}, false, fmt.Errorf("%s: %w", owner, ErrCollecting)
	case doomed:
		return xorbRecord{}, false, fmt.Errorf("%s: %w", key, ErrCollecting)
	case !size.Valid:
		return xorbRecord{}, false, nil
	}
	x.size = size.Int64
	return x, true, nil
}
