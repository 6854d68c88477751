package store

// The index lock and the swap of a rebuilt index, on each engine: the
// rest of what differs between SQLite and PostgreSQL is in engine.go.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// indexLock is a server's shared hold on an index, or reindex's exclusive
// one.
type indexLock interface{ release() }

type fileLock struct{ f *os.File }

func (l fileLock) release() {
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// pgLock holds a session advisory lock on a connection of its own. The
// lock lasts as long as that connection's session: a PostgreSQL restart, a
// proxy's idle timeout or a network failure ends the session and drops the
// lock without a word to this process, so a server checks it every
// Config.LockCheck (Store.checkIndexLock) and takes it again on a new
// connection.
type pgLock struct {
	db        *sql.DB
	index     string // redacted, for messages
	key       int64
	exclusive bool

	mu   sync.Mutex
	conn *sql.Conn // holds the lock; nil while it does not
}

// release unlocks before it closes: PostgreSQL drops a session's locks
// only once its backend has seen the connection close, which can be after
// a reindex started right behind this Close has asked for the lock.
func (l *pgLock) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l.conn.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
		cancel()
		l.conn.Close()
		l.conn = nil
	}
	l.db.Close()
}

// take asks for the lock on a new connection, without waiting: false when
// another session holds a lock that conflicts (a reindex, or servers when
// l is exclusive).
func (l *pgLock) take(ctx context.Context) (bool, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("index %s: %w", l.index, pgErr(err))
	}
	fn := "pg_try_advisory_lock_shared"
	if l.exclusive {
		fn = "pg_try_advisory_lock"
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT `+fn+`($1)`, l.key).Scan(&ok); err != nil {
		conn.Close()
		return false, fmt.Errorf("index lock: %w", pgErr(err))
	}
	if !ok {
		conn.Close()
		return false, nil
	}
	l.conn = conn
	return true, nil
}

// lockState is what a check of a server's lock found.
type lockState int

const (
	lockKept    lockState = iota // held all along, on the same session
	lockRetaken                  // its session was gone; held again on a new one
	lockRefused                  // its session was gone; another holds a conflicting lock (a reindex)
	lockFailed                   // its session was gone; PostgreSQL cannot be reached to take it again
)

// check reports whether l still holds its lock: its session answers and
// pg_locks lists the lock as granted to it. When it does not, the lock is
// taken again on a new connection if no one holds a conflicting one. Each
// query waits at most timeout (a session on a partitioned network does not
// answer at all).
func (l *pgLock) check(ctx context.Context, timeout time.Duration) (lockState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		var held bool
		err := l.conn.QueryRowContext(qctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
			AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)`,
			int64(uint64(l.key)>>32), int64(uint32(l.key))).Scan(&held)
		cancel()
		if err == nil && held {
			return lockKept, nil
		}
		if ctx.Err() != nil {
			return lockKept, ctx.Err() // stopping: nothing was learnt
		}
		l.conn.Close()
		l.conn = nil
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, err := l.take(tctx)
	switch {
	case err != nil:
		return lockFailed, err
	case !ok:
		return lockRefused, nil
	}
	return lockRetaken, nil
}

func lockPostgres(ctx context.Context, index string, exclusive bool) (indexLock, error) {
	cfg, schema, err := pgConfig(index, DefaultBusyTimeout)
	if err != nil {
		return nil, err
	}
	l := &pgLock{db: sql.OpenDB(stdlib.GetConnector(*cfg)), index: redactIndex(index), key: lockKey(schema, "index"), exclusive: exclusive}
	ok, err := l.take(ctx)
	if err != nil || !ok {
		l.db.Close()
		if err == nil {
			err = fmt.Errorf("%s: %w", redactIndex(index), ErrIndexInUse)
		}
		return nil, err
	}
	return l, nil
}

// DefaultLockCheck is Config.LockCheck's default.
const DefaultLockCheck = 2 * time.Second

// watchIndexLock checks the shared lock of a PostgreSQL index every
// interval until ctx ends, then closes done.
func (s *Store) watchIndexLock(ctx context.Context, interval time.Duration, done chan<- struct{}) {
	every(ctx, interval, done, func() { s.checkIndexLock(ctx) })
}

// every runs fn every interval until ctx ends, then closes done: the loop
// of the store's background goroutines.
func every(ctx context.Context, interval time.Duration, done chan<- struct{}, fn func()) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// checkIndexLock checks once that this process still holds its shared
// lock on a PostgreSQL index, takes it again when its session was lost,
// and records the outcome: while the lock is not held every write fails
// with ErrIndexLockLost (writable), so that a reindex that took the
// exclusive lock meanwhile never rebuilds beside a writing server. On
// SQLite it does nothing: a flock(2) lock lasts as long as its file is
// open.
func (s *Store) checkIndexLock(ctx context.Context) {
	l, ok := s.lock.(*pgLock)
	if !ok {
		return
	}
	state, err := l.check(ctx, max(s.lockCheck, time.Second))
	if ctx.Err() != nil {
		return
	}
	was := s.lockHeld.Load()
	if state != lockKept && was {
		s.lockLosses.Add(1)
		// The sessions of the pools most likely ended with the lock's (a
		// restart ends them all): drop the idle ones, so that requests
		// do not meet them one 503 at a time.
		for _, db := range []*sql.DB{s.db, s.wdb} {
			db.SetMaxIdleConns(0)
			db.SetMaxIdleConns(pgConns)
		}
	}
	switch state {
	case lockKept:
	case lockRetaken:
		if was {
			s.log.Warn("index lock: the session holding the shared lock on the index was lost (a PostgreSQL restart or a dropped connection); took it again", "index", l.index)
		} else {
			s.log.Info("index lock: holding the shared lock on the index again; writes resume", "index", l.index)
		}
		s.lockHeld.Store(true)
	case lockRefused:
		s.lockHeld.Store(false)
		if was {
			s.log.Error("index lock: lost the shared lock on the index and another process (a reindex) holds it exclusively; refusing writes (503) until this node holds it again", "index", l.index)
		}
	case lockFailed:
		s.lockHeld.Store(false)
		if was {
			s.log.Error("index lock: lost the shared lock on the index and cannot take it again; refusing writes (503) until this node holds it again", "index", l.index, "err", err)
		}
	}
	if s.lockHook != nil {
		s.lockHook(state)
	}
}

// objectLockPath is the file that serializes create-if-absent writes to
// a file:// bucket across processes: beside a SQLite index, or beside the
// bucket's directory when the index is elsewhere.
func objectLockPath(cfg Config) (string, bool) {
	u, err := url.Parse(cfg.BucketURL)
	if err != nil || u.Scheme != "file" {
		return "", false
	}
	if !IsPostgres(cfg.IndexPath) {
		return cfg.IndexPath + ".objects.lock", true
	}
	return filepath.Clean(u.Path) + ".objects.lock", true
}

// dropPostgresSchema removes a scratch schema of reindex.
func dropPostgresSchema(ctx context.Context, index string) error {
	db, schema, err := pgAdmin(index)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+quoteIdent(schema)+` CASCADE`)
	return pgErr(err)
}

// swapPostgresSchema replaces the index's schema by the rebuilt one, in
// one transaction: a node sees the old index or the new one.
func swapPostgresSchema(ctx context.Context, rebuilt, index string) error {
	db, schema, err := pgAdmin(index)
	if err != nil {
		return err
	}
	defer db.Close()
	_, fresh, err := pgLocation(rebuilt)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return pgErr(err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`DROP SCHEMA IF EXISTS ` + quoteIdent(schema) + ` CASCADE`,
		`ALTER SCHEMA ` + quoteIdent(fresh) + ` RENAME TO ` + quoteIdent(schema),
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("swap in the new index: %w", pgErr(err))
		}
	}
	return pgErr(tx.Commit())
}

// pgAdmin is a one-connection pool to the index's database, outside any
// schema, and the index's schema.
func pgAdmin(index string) (*sql.DB, string, error) {
	cfg, schema, err := pgConfig(index, DefaultBusyTimeout)
	if err != nil {
		return nil, "", err
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	db.SetMaxOpenConns(1)
	return db, schema, nil
}

// comparedSchemas are the names compareIndexes qualifies the live and the
// rebuilt tables with, and the statements that make the rebuilt ones
// visible on conn (and undo that).
func comparedSchemas(live, fresh string) (liveName, freshName string, attach, detach []string, err error) {
	if !IsPostgres(live) {
		return "main", "fresh", []string{`ATTACH DATABASE '` + strings.ReplaceAll("file:"+fresh+"?mode=ro", "'", "''") + `' AS fresh`}, []string{`DETACH DATABASE fresh`}, nil
	}
	_, ls, err := pgLocation(live)
	if err != nil {
		return "", "", nil, nil, err
	}
	_, fs, err := pgLocation(fresh)
	if err != nil {
		return "", "", nil, nil, err
	}
	return quoteIdent(ls), quoteIdent(fs), nil, nil, nil
}

// scratchIndex is where a rebuild of index goes: a file beside a SQLite
// index, a schema beside a PostgreSQL one.
func scratchIndex(index, name string) string {
	if !IsPostgres(index) {
		return index + "." + name
	}
	_, schema, err := pgLocation(index)
	if err != nil {
		return index
	}
	return withSchema(index, schema+"_"+strings.ReplaceAll(name, "-", "_"))
}

// removeIndex deletes a scratch index.
func removeIndex(ctx context.Context, index string) error {
	if IsPostgres(index) {
		return dropPostgresSchema(ctx, index)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(index + suffix)
	}
	return nil
}

// swapIndex makes the rebuilt index the index.
func swapIndex(ctx context.Context, rebuilt, index string) error {
	if IsPostgres(index) {
		return swapPostgresSchema(ctx, rebuilt, index)
	}
	removeIndex(ctx, index)
	if err := os.Rename(rebuilt, index); err != nil {
		return fmt.Errorf("swap in the new index: %w", err)
	}
	return nil
}
