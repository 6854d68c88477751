package index

// The index lock: servers hold a shared one and reindex an exclusive one,
// on SQLite's lock file (flock(2)) or as a PostgreSQL session advisory
// lock, so that reindex can tell that a server is using the index and a
// server never writes beside a rebuild.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// Lock is a hold on an index: a server's shared one, or reindex's
// exclusive one (LockExclusive).
type Lock interface{ Release() }

// LockExclusive takes reindex's exclusive hold on the index at loc, without
// waiting: ErrInUse while any process holds it open.
func LockExclusive(ctx context.Context, loc string) (Lock, error) {
	return lock(ctx, loc, true)
}

// lock takes a shared (servers) or exclusive (reindex) advisory lock on
// the index: on SQLite's lock file, or in PostgreSQL.
func lock(ctx context.Context, loc string, exclusive bool) (Lock, error) {
	if IsPostgres(loc) {
		return lockPostgres(ctx, loc, exclusive)
	}
	if err := os.MkdirAll(filepath.Dir(loc), 0o755); err != nil {
		return nil, fmt.Errorf("index directory: %w", err)
	}
	f, err := os.OpenFile(loc+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("index lock: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", loc, ErrInUse)
		}
		return nil, fmt.Errorf("index lock: %w", err)
	}
	return fileLock{f}, nil
}

type fileLock struct{ f *os.File }

func (l fileLock) Release() {
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// pgLock holds a session advisory lock on a connection of its own. The
// lock lasts as long as that connection's session: a PostgreSQL restart, a
// proxy's idle timeout or a network failure ends the session and drops the
// lock without a word to this process, so a server checks it every
// Config.LockCheck (DB.CheckLock) and takes it again on a new connection.
type pgLock struct {
	db        *sql.DB
	loc       string // redacted, for messages
	key       int64
	exclusive bool

	mu   sync.Mutex
	conn *sql.Conn // holds the lock; nil while it does not
	// probe is the answer to the check query in flight on conn, nil when
	// none is: a check that finds no answer within its timeout leaves the
	// query running (cancelling it would end the session, and the lock
	// with it) and the next check waits for the same answer.
	probe chan probeAnswer
	// stopProbe ends the probe's query (and the session with it): Release
	// calls it, so that closing does not wait for a PostgreSQL that hangs.
	stopProbe context.CancelFunc
	limit     time.Duration // how long a probe may go unanswered: probeLimit
}

// probeAnswer is what the check query on the lock's session found.
type probeAnswer struct {
	held bool
	err  error
}

// probeLimit bounds how long a check query may go unanswered before the
// session is given up (closed) and the lock taken again on a new one: a
// PostgreSQL that hangs for longer loses this process's lock session.
const probeLimit = 30 * time.Second

// Release unlocks before it closes: PostgreSQL drops a session's locks
// only once its backend has seen the connection close, which can be after
// a reindex started right behind this Close has asked for the lock.
func (l *pgLock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopProbe != nil {
		l.stopProbe()
	}
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
		return false, fmt.Errorf("index %s: %w", l.loc, pgErr(err))
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

// LockState is what a check of a server's lock found (DB.CheckLock).
type LockState int

const (
	LockKept    LockState = iota // held all along, on the same session
	LockRetaken                  // its session was gone; held again on a new one
	LockRefused                  // its session was gone; another holds a conflicting lock (a reindex)
	LockFailed                   // its session was gone; PostgreSQL cannot be reached to take it again
	// LockUnanswered: its session did not answer within the check's
	// timeout (PostgreSQL hangs, or the network to it); the check query
	// stays in flight, and the next check waits for its answer: a session
	// that answers again still holds the lock, with nothing lost.
	LockUnanswered
)

// check reports whether l still holds its lock: its session answers and
// pg_locks lists the lock as granted to it. When it does not, the lock is
// taken again on a new connection if no one holds a conflicting one. Each
// query waits at most timeout (a session on a partitioned network does not
// answer at all).
func (l *pgLock) check(ctx context.Context, timeout time.Duration) (LockState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		if l.probe == nil {
			pctx, stop := context.WithTimeout(context.Background(), l.limit)
			l.probe, l.stopProbe = make(chan probeAnswer, 1), stop
			go l.ask(pctx, l.conn, l.probe)
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		var a probeAnswer
		select {
		case a = <-l.probe:
			l.stopProbe()
			l.probe, l.stopProbe = nil, nil
		case <-t.C:
			return LockUnanswered, nil // the query stays in flight: the session may be fine
		case <-ctx.Done():
			return LockKept, ctx.Err() // stopping: nothing was learnt
		}
		if a.err == nil && a.held {
			return LockKept, nil
		}
		l.conn.Close()
		l.conn = nil
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ok, err := l.take(tctx)
	switch {
	case err != nil:
		return LockFailed, err
	case !ok:
		return LockRefused, nil
	}
	return LockRetaken, nil
}

// ask runs the check query on conn under ctx (probeLimit, or until
// Release stops it) and sends its answer on out: whether the session
// still holds the lock, as pg_locks lists it granted to the session's own
// backend.
func (l *pgLock) ask(ctx context.Context, conn *sql.Conn, out chan<- probeAnswer) {
	var a probeAnswer
	a.err = conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
		AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)`,
		int64(uint64(l.key)>>32), int64(uint32(l.key))).Scan(&a.held)
	out <- a
}

func lockPostgres(ctx context.Context, loc string, exclusive bool) (Lock, error) {
	cfg, schema, err := pgConfig(loc, DefaultBusyTimeout)
	if err != nil {
		return nil, err
	}
	l := &pgLock{db: sql.OpenDB(stdlib.GetConnector(*cfg)), loc: Redact(loc), key: LockKey(schema, "index"), exclusive: exclusive, limit: probeLimit}
	ok, err := l.take(ctx)
	if err != nil || !ok {
		l.db.Close()
		if err == nil {
			err = fmt.Errorf("%s: %w", Redact(loc), ErrInUse)
		}
		return nil, err
	}
	return l, nil
}

// DefaultLockCheck is Config.LockCheck's default.
const DefaultLockCheck = 2 * time.Second

// every runs fn every interval until ctx ends, then closes done: the loop
// of a DB's background goroutines.
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

// CheckLock checks once that this process still holds its shared lock on
// a PostgreSQL index, takes it again when its session was lost, and
// records the outcome: while the lock is not held every write fails with
// ErrLockLost (Writable), so that a reindex that took the exclusive lock
// meanwhile never rebuilds beside a writing server. The loop of
// Config.LockCheck calls it; tests call it by hand. On SQLite it does
// nothing: a flock(2) lock lasts as long as its file is open.
func (d *DB) CheckLock(ctx context.Context) {
	l, ok := d.lock.(*pgLock)
	if !ok {
		return
	}
	state, err := l.check(ctx, max(d.lockCheck, time.Second))
	if ctx.Err() != nil {
		return
	}
	was := d.lockHeld.Load()
	// A session that went unanswered and then turned out gone is a loss
	// too: held until it stopped answering.
	held := was || d.unanswered.Load()
	d.unanswered.Store(state == LockUnanswered)
	if state != LockKept && state != LockUnanswered && held {
		d.lockLosses.Add(1)
		// The sessions of the pools most likely ended with the lock's (a
		// restart ends them all): drop the idle ones, so that requests
		// do not meet them one 503 at a time.
		for _, db := range []*sql.DB{d.read, d.write} {
			db.SetMaxIdleConns(0)
			db.SetMaxIdleConns(PostgresConns)
		}
	}
	switch state {
	case LockKept:
		if !was {
			d.log.Info("index lock: the session holding the shared lock on the index answers again, with the lock; writes resume", "index", l.loc)
			d.lockHeld.Store(true)
		}
	case LockUnanswered:
		// Writes would wait for a PostgreSQL that does not answer anyway;
		// refused at once, they cannot commit beside a reindex that took
		// the lock if the session did end. Its answer resumes them.
		d.lockHeld.Store(false)
		if was {
			d.log.Warn("index lock: the session holding the shared lock on the index does not answer (PostgreSQL hangs, or the network to it); refusing writes (503) until it does", "index", l.loc)
		}
	case LockRetaken:
		if was {
			d.log.Warn("index lock: the session holding the shared lock on the index was lost (a PostgreSQL restart or a dropped connection); took it again", "index", l.loc)
		} else {
			d.log.Info("index lock: holding the shared lock on the index again; writes resume", "index", l.loc)
		}
		d.lockHeld.Store(true)
	case LockRefused:
		d.lockHeld.Store(false)
		if was {
			d.log.Error("index lock: lost the shared lock on the index and another process (a reindex) holds it exclusively; refusing writes (503) until this node holds it again", "index", l.loc)
		}
	case LockFailed:
		d.lockHeld.Store(false)
		if was {
			d.log.Error("index lock: lost the shared lock on the index and cannot take it again; refusing writes (503) until this node holds it again", "index", l.loc, "err", err)
		}
	}
	if d.cfg.LockHook != nil {
		d.cfg.LockHook(state)
	}
}
