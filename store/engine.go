package store

// This file (with engine_lock.go: the index lock and the swap of a rebuilt
// index) holds everything that differs between the index's two engines:
// SQLite (an index file; the embedded default) and PostgreSQL (a
// postgres:// URL, shared by nodes on several hosts). The rest of the
// package writes one SQL text for both: SQLite's placeholders (`?`, `?N`),
// ON CONFLICT upserts, RETURNING, CAST and COALESCE, and no function that
// only one engine has except hex(), which the PostgreSQL schema defines.
//
// On PostgreSQL:
//   - queries are rewritten to `$N` placeholders by the driver wrapper below;
//   - the migrations are the SQLite ones with the types mapped (store/index);
//   - the tables live in one schema (URL parameter schema, default openxet),
//     so that reindex can build a new one beside it and swap it in;
//   - every write runs SERIALIZABLE and is retried on a serialization
//     failure (inTx): the outcome is that of SQLite's one writer at a time;
//   - servers hold a shared advisory lock and reindex an exclusive one,
//     as they hold flock(2) locks on SQLite's lock file.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"openxet/store/index"
	"openxet/xet"
)

// DefaultPostgresSchema is the schema of the index tables when a
// postgres:// URL names none.
const DefaultPostgresSchema = "openxet"

// pgConns is the size of each PostgreSQL connection pool of a Store (one
// for reads, one for writes).
const pgConns = 8

// IsPostgres reports whether an index location is a PostgreSQL URL rather
// than a SQLite file.
func IsPostgres(index string) bool {
	return strings.HasPrefix(index, "postgres://") || strings.HasPrefix(index, "postgresql://")
}

// CheckIndexLocation reports what is wrong with an index location before
// anything is opened: for a PostgreSQL URL, its syntax, its parameters and
// its schema name. Any file path is a valid SQLite location.
func CheckIndexLocation(index string) error {
	if !IsPostgres(index) {
		return nil
	}
	_, _, err := pgConfig(index, DefaultBusyTimeout)
	return err
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// pgLocation splits a postgres:// index URL into the URL pgx connects
// with (without openxet's own parameter) and the schema of the tables.
func pgLocation(index string) (dsn, schema string, err error) {
	u, err := url.Parse(index)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only
		// what is wrong with it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", "", fmt.Errorf("index URL: not a valid URL: %w", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("index URL %s: %w", redactIndex(index), err)
	}
	schema = q.Get("schema")
	if schema == "" {
		schema = DefaultPostgresSchema
	}
	if !schemaName.MatchString(schema) {
		return "", "", fmt.Errorf("index URL: schema %q: want lower-case letters, digits and _ (at most 63), not starting with a digit", schema)
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// pgConfig is pgx's configuration of index (connecting for at most busy,
// at least DefaultBusyTimeout, unless the URL says) and the index's schema.
func pgConfig(index string, busy time.Duration) (*pgx.ConnConfig, string, error) {
	dsn, schema, err := pgLocation(index)
	if err != nil {
		return nil, "", err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("index URL %s: %w", redactIndex(index), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = max(busy, DefaultBusyTimeout)
	}
	return cfg, schema, nil
}

// withSchema is index with its schema parameter set to schema.
func withSchema(index, schema string) string {
	u, err := url.Parse(index)
	if err != nil {
		return index
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// redactIndex is an index location fit for messages: no password.
func redactIndex(index string) string {
	if !IsPostgres(index) {
		return index
	}
	if u, err := url.Parse(index); err == nil {
		return u.Redacted()
	}
	return "postgres://…"
}

// openPostgres opens a pool of connections to the index at loc. Every
// connection's search path is the index's schema. The write pool's
// transactions are SERIALIZABLE and its migrations run first, under an
// advisory lock so that nodes starting together migrate once.
func openPostgres(ctx context.Context, loc string, busy time.Duration, writes bool) (*sql.DB, error) {
	cfg, schema, err := pgConfig(loc, busy)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["search_path"] = schema
	// A row lock held by another node's transaction is waited for at
	// most the busy timeout, like SQLite's busy_timeout.
	cfg.RuntimeParams["lock_timeout"] = fmt.Sprint(max(busy.Milliseconds(), 1))
	if writes {
		cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	}
	db := sql.OpenDB(pgConnector{stdlib.GetConnector(*cfg)})
	db.SetMaxOpenConns(pgConns)
	db.SetMaxIdleConns(pgConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if !writes {
		return db, nil
	}
	if err := index.Migrate(ctx, db, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate index %s: %w", redactIndex(loc), dbErr(err))
	}
	return db, nil
}

// quoteIdent and lockKey are index.QuoteIdent and index.LockKey under
// names that the functions here, whose index locations are called index,
// can reach.
func quoteIdent(s string) string { return index.QuoteIdent(s) }

func lockKey(schema, purpose string) int64 { return index.LockKey(schema, purpose) }

// rebind rewrites SQLite placeholders to PostgreSQL's: `?N` to `$N`, and a
// bare `?` to one more than the placeholder before it. Text in single
// quotes is left alone.
func rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			if j > i+1 {
				fmt.Sscan(q[i+1:j], &n)
				b.WriteString("$" + q[i+1:j])
			} else {
				n++
				fmt.Fprintf(&b, "$%d", n)
			}
			i = j - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// pgConnector hands out connections that rebind every query.
type pgConnector struct{ driver.Connector }

func (c pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return pgConn{conn.(*stdlib.Conn)}, nil
}

type pgConn struct{ *stdlib.Conn }

func (c pgConn) Prepare(q string) (driver.Stmt, error) { return c.Conn.Prepare(rebind(q)) }

func (c pgConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, rebind(q))
}

func (c pgConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, rebind(q), args)
}

func (c pgConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, rebind(q), args)
}

// pgTx runs fn in a SERIALIZABLE transaction on the write pool, again
// while PostgreSQL refuses it as a serialization failure or a deadlock
// (another node's transaction won), within the busy timeout.
func (s *Store) pgTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.pgRetrying(ctx, func() error { return s.txOnce(ctx, fn) })
}

// pgRetrying runs once, a transaction, again while PostgreSQL refuses it
// as a serialization failure or a deadlock, within the busy timeout.
func (s *Store) pgRetrying(ctx context.Context, once func() error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := once()
		if err == nil || !pgRetry(err) || ctx.Err() != nil {
			return err
		}
		if time.Since(start) > s.busy {
			return fmt.Errorf("index busy: %d attempts in %v: %w", attempt+1, s.busy, err) // ErrUnavailable (pgErr)
		}
		if err := backOff(ctx, attempt); err != nil {
			return err
		}
	}
}

// backOff waits before attempt+1 of something a concurrent writer made
// fail: a random time up to 1 ms doubled with each attempt (at most 64 ms),
// so that the writers that lost do not meet again. It returns ctx's error
// if ctx ends first.
func backOff(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pgRetry reports whether a transaction failed only because a concurrent
// one won: running it again may succeed.
func pgRetry(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pe.Code == "40001" || pe.Code == "40P01")
}

// pgErr marks a PostgreSQL error with ErrUnavailable when a retry may cure
// it: the server unreachable, shutting down, out of resources, a lock not
// granted within the busy timeout, a transaction that kept losing.
// pgDiskFull reports whether err is PostgreSQL's disk_full (53100).
func pgDiskFull(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "53100"
}

func pgErr(err error) error {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources
			strings.HasPrefix(pe.Code, "57"), // operator intervention (shutdown, cancel)
			strings.HasPrefix(pe.Code, "58"), // system error (I/O)
			pe.Code == "55P03",               // lock_not_available (lock_timeout)
			pe.Code == "40001", pe.Code == "40P01":
			return fmt.Errorf("%w: index: %w", ErrUnavailable, err)
		}
		return err
	}
	_, connect := errors.AsType[*pgconn.ConnectError](err)
	_, network := errors.AsType[net.Error](err)
	if connect || network || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || pgconn.Timeout(err) {
		return fmt.Errorf("%w: index: %w", ErrUnavailable, err)
	}
	return err
}

// DefaultCheckpointEvery is Config.CheckpointEvery's default.
const DefaultCheckpointEvery = 100 * time.Millisecond

// walBackstopPages is the wal_autocheckpoint of a SQLite index whose
// checkpoints run in the background (64 MiB of log at 4 KiB pages): a
// commit checkpoints only when the background ones fell that far behind,
// which bounds the log.
const walBackstopPages = 16384

// startCheckpoints opens the connection of a SQLite index's background
// checkpoints and starts their loop (engine.go: checkpointLoop), unless
// Config.CheckpointEvery turned them off. A checkpoint on a connection of
// its own waits for no writer and makes none wait: SQLite's checkpoint
// copies the log's pages into the file while commits go on appending to
// it (PASSIVE); a commit only restarts the log from its start once a
// checkpoint has copied all of it.
func (s *Store) startCheckpoints(ctx context.Context) error {
	if s.pg || s.checkpointEvery <= 0 {
		return nil
	}
	db, err := openDB(ctx, s.cfg.IndexPath, s.busy, false, walBackstopPages)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	s.cdb = db
	if s.checkpointsByHand {
		return nil
	}
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopCheckpoints, s.checkpointsDone = stop, make(chan struct{})
	go s.checkpointLoop(cctx, s.checkpointEvery, s.checkpointsDone)
	return nil
}

// checkpointLoop checkpoints every interval until ctx ends, then closes
// done. A checkpoint that finds nothing new to copy costs a read of the
// log's header.
func (s *Store) checkpointLoop(ctx context.Context, interval time.Duration, done chan<- struct{}) {
	every(ctx, interval, done, func() {
		from := time.Now()
		c, err := s.checkpointIndex(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("index checkpoint", "err", err)
			}
			return
		}
		s.checkpointed(ctx, from, time.Since(from), c)
	})
}

// SlowCheckpoint is how long a background checkpoint of a SQLite index
// runs before the log says so at INFO and openxet_index_checkpoints_slow_total
// counts it (docs/operations.md, "SQLite checkpoints").
const SlowCheckpoint = 100 * time.Millisecond

// checkpointLogged is the shortest checkpoint logged at DEBUG, with its
// start, so that a run's upload pauses can be laid beside its checkpoints
// (compat/bench_checkpoints.py).
const checkpointLogged = 5 * time.Millisecond

// checkpointCounts is what CheckpointStats reports.
type checkpointCounts struct {
	n, slow atomic.Uint64
	nanos   atomic.Int64
}

// CheckpointStats is how many background checkpoints of a SQLite index
// ran, how many of them took SlowCheckpoint or longer, and their time.
type CheckpointStats struct {
	Checkpoints, Slow uint64
	Time              time.Duration
}

// CheckpointStats reports the background checkpoints so far (none on
// PostgreSQL, or with Config.CheckpointEvery negative).
func (s *Store) CheckpointStats() CheckpointStats {
	c := &s.checkpoints
	return CheckpointStats{Checkpoints: c.n.Load(), Slow: c.slow.Load(), Time: time.Duration(c.nanos.Load())}
}

// checkpointed records a background checkpoint that began at from and
// took d: counted, and logged when it took long enough to matter.
func (s *Store) checkpointed(ctx context.Context, from time.Time, d time.Duration, c walCheckpoint) {
	s.checkpoints.n.Add(1)
	s.checkpoints.nanos.Add(int64(d))
	level := slog.LevelDebug
	switch {
	case d >= SlowCheckpoint:
		s.checkpoints.slow.Add(1)
		level = slog.LevelInfo
	case d < checkpointLogged:
		return
	}
	s.log.LogAttrs(ctx, level, "index checkpoint", slog.Time("start", from),
		slog.Float64("ms", float64(d.Microseconds())/1000),
		slog.Int("log_pages", c.LogPages), slog.Int("copied_pages", c.CopiedPages))
}

// checkpointIndex runs one PASSIVE checkpoint of a SQLite index on the
// checkpoint connection: it copies every page of the log that no reader
// still needs into the index file. It returns the pages the log held and
// those copied so far.
func (s *Store) checkpointIndex(ctx context.Context) (walCheckpoint, error) {
	var c walCheckpoint
	var busy int
	err := s.cdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &c.LogPages, &c.CopiedPages)
	return c, dbErr(err)
}

// walCheckpoint is what a checkpoint reports: the pages of the log and
// those of them copied into the index file.
type walCheckpoint struct{ LogPages, CopiedPages int }

// checkpoint folds SQLite's write-ahead log into the index file, so the
// file is complete on its own; PostgreSQL has nothing to do.
func checkpoint(ctx context.Context, index string, db *sql.DB) error {
	if IsPostgres(index) {
		return nil
	}
	_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

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
// usage and quota read after. It runs again, as pgTx does, while a
// concurrent transaction wins (pgStatement).
func (s *Store) pgRecordUpload(ctx context.Context, tenant, h string, x xorbRecord, defaultQuotaBytes int64) (bool, xorbRecord, error) {
	rec := x
	var ownerNew bool
	err := s.pgStatement(ctx, func(conn *sql.Conn) error {
		rec = x
		return conn.QueryRowContext(ctx, pgRecordUploadSQL,
			h, x.size, x.chunks, tenant, defaultQuotaBytes, s.now().Unix()).Scan(&rec.size, &rec.chunks, &ownerNew)
	})
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == pgOverQuota {
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
// transaction, on a connection of the write pool (waiting for one at most
// the busy timeout), and again while a concurrent transaction wins, as pgTx
// does: one round trip where pgTx makes at least three (BEGIN, the
// statements, COMMIT). fn's error comes back through dbErr.
func (s *Store) pgStatement(ctx context.Context, fn func(conn *sql.Conn) error) error {
	if err := s.writable(); err != nil {
		return err
	}
	return s.pgRetrying(ctx, func() error {
		wait, cancel := context.WithTimeout(ctx, s.busy)
		conn, err := s.wdb.Conn(wait)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: index busy: no write connection within %v", ErrUnavailable, s.busy)
			}
			return dbErr(err)
		}
		defer conn.Close()
		return dbErr(fn(conn))
	})
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
