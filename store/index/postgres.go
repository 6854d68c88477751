package index

// What is PostgreSQL's own. The SQL of the callers is one text for both
// engines: SQLite's placeholders (`?`, `?N`), ON CONFLICT upserts,
// RETURNING, CAST and COALESCE, and no function that only one engine has
// except hex(), which the PostgreSQL schema defines (migrate.go). On
// PostgreSQL:
//   - queries are rewritten to `$N` placeholders by the driver wrapper below;
//   - the tables live in one schema (URL parameter schema, default openxet),
//     so that reindex can build a new one beside it and swap it in (swap.go);
//   - every write runs SERIALIZABLE and is retried on a serialization
//     failure (DB.Tx): the outcome is that of SQLite's one writer at a time;
//   - servers hold a shared advisory lock and reindex an exclusive one,
//     as they hold flock(2) locks on SQLite's lock file (lock.go).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"openxet/store/fault"
)

// PostgresConns is the size of each PostgreSQL connection pool of a DB
// (one for reads, one for writes).
const PostgresConns = 8

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
	db.SetMaxOpenConns(PostgresConns)
	db.SetMaxIdleConns(PostgresConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if !writes {
		return db, nil
	}
	if err := Migrate(ctx, db, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate index %s: %w", Redact(loc), Err(err))
	}
	return db, nil
}

// Rebind rewrites SQLite placeholders to PostgreSQL's: `?N` to `$N`, and a
// bare `?` to one more than the placeholder before it. Text in single
// quotes is left alone. A DB's PostgreSQL connections rebind every query;
// a caller that talks to PostgreSQL through pgx directly calls it.
func Rebind(q string) string {
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

func (c pgConn) Prepare(q string) (driver.Stmt, error) { return c.Conn.Prepare(Rebind(q)) }

func (c pgConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, Rebind(q))
}

func (c pgConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, Rebind(q), args)
}

func (c pgConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, Rebind(q), args)
}

// retrying runs once, a transaction, again while PostgreSQL refuses it as
// a serialization failure or a deadlock (another node's transaction won),
// within the busy timeout.
func (d *DB) retrying(ctx context.Context, once func() error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := once()
		if err == nil || !pgRetry(err) || ctx.Err() != nil {
			return err
		}
		if time.Since(start) > d.busy {
			return fmt.Errorf("index busy: %d attempts in %v: %w", attempt+1, d.busy, err) // ErrUnavailable (pgErr)
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

// pgDiskFull reports whether err is PostgreSQL's disk_full (53100).
func pgDiskFull(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "53100"
}

// PostgresCode is the SQLSTATE of a PostgreSQL error in err's chain, or "".
func PostgresCode(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// pgErr marks a PostgreSQL error with ErrUnavailable when a retry may cure
// it: the server unreachable, shutting down, out of resources, a lock not
// granted within the busy timeout, a transaction that kept losing.
func pgErr(err error) error {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources
			strings.HasPrefix(pe.Code, "57"), // operator intervention (shutdown, cancel)
			strings.HasPrefix(pe.Code, "58"), // system error (I/O)
			pe.Code == "55P03",               // lock_not_available (lock_timeout)
			pe.Code == "40001", pe.Code == "40P01":
			return fmt.Errorf("%w: index: %w", fault.ErrUnavailable, err)
		}
		return err
	}
	_, connect := errors.AsType[*pgconn.ConnectError](err)
	_, network := errors.AsType[net.Error](err)
	if connect || network || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || pgconn.Timeout(err) {
		return fmt.Errorf("%w: index: %w", fault.ErrUnavailable, err)
	}
	return err
}
