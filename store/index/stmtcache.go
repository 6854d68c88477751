package index

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// SQLite connections that keep the statements they ran prepared.
//
// modernc.org/sqlite parses and plans a query's text on every QueryContext
// and ExecContext and finalizes it afterwards. Under the abuse scenario that
// parsing was a tenth of the server's CPU (the runs are in commit 0f4470f;
// BENCHMARKS.md, "Scale-out"). The index runs a few dozen distinct texts, so each connection
// keeps the ones it ran prepared and binds new arguments to them: the
// callers keep writing plain db.QueryContext / tx.ExecContext.
//
// PostgreSQL needs none of this: pgx caches the statements of each
// connection itself.

// stmtCacheSize bounds the statements one connection keeps; past it, the
// idle ones are dropped and prepared again as they are used.
const stmtCacheSize = 128

// OpenSQLite is sql.Open("sqlite", dsn) (modernc.org/sqlite) with
// connections that cache their statements. Like sql.Open it opens nothing
// yet; the caller closes the *sql.DB.
func OpenSQLite(dsn string) (*sql.DB, error) {
	plain, err := sql.Open("sqlite", dsn) // only for the registered driver; opens nothing
	if err != nil {
		return nil, err
	}
	drv := plain.Driver()
	plain.Close()
	return sql.OpenDB(sqliteConnector{drv: drv, dsn: dsn}), nil
}

// sqliteConnector opens dsn with drv (modernc.org/sqlite's driver) and
// hands out connections that cache their statements.
type sqliteConnector struct {
	drv driver.Driver
	dsn string
}

func (c sqliteConnector) Driver() driver.Driver { return c.drv }

func (c sqliteConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	inner, ok := conn.(sqliteConn)
	if !ok {
		return conn, nil // a driver without these methods: no cache
	}
	return &cachingConn{sqliteConn: inner, stmts: map[string]*cachedStmt{}}, nil
}

// sqliteConn is what database/sql uses of a modernc.org/sqlite connection;
// cachingConn passes it through and takes over Exec and Query.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// stmtConn is what cachingConn needs of a prepared statement.
type stmtConn interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

type cachedStmt struct {
	stmtConn
	busy bool // rows of it are open: another query of its text prepares its own
}

// cachingConn is one SQLite connection with its prepared statements. Like
// every driver.Conn it is used by one goroutine at a time.
type cachingConn struct {
	sqliteConn
	stmts map[string]*cachedStmt
}

// stmt returns the connection's idle prepared statement of q, preparing it
// on first use; nil when the cached one is busy (a query of the same text
// is still open on this connection, as nested queries in a transaction
// may be).
func (c *cachingConn) stmt(ctx context.Context, q string) (*cachedStmt, error) {
	if st, ok := c.stmts[q]; ok {
		if st.busy {
			return nil, nil
		}
		return st, nil
	}
	if len(c.stmts) >= stmtCacheSize {
		for k, st := range c.stmts {
			if !st.busy {
				st.Close()
				delete(c.stmts, k)
			}
		}
	}
	ds, err := c.sqliteConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	sc, ok := ds.(stmtConn)
	if !ok {
		ds.Close()
		return nil, nil
	}
	st := &cachedStmt{stmtConn: sc}
	c.stmts[q] = st
	return st, nil
}

// drop forgets q's statement after it failed: a statement interrupted or
// refused mid-step is prepared afresh rather than trusted again.
func (c *cachingConn) drop(q string, st *cachedStmt) {
	if c.stmts[q] == st {
		delete(c.stmts, q)
	}
	st.Close()
}

func (c *cachingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.sqliteConn.ExecContext(ctx, q, args)
	}
	res, err := st.ExecContext(ctx, args)
	if err != nil {
		c.drop(q, st)
	}
	return res, err
}

func (c *cachingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	st, err := c.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return c.sqliteConn.QueryContext(ctx, q, args)
	}
	rows, err := st.QueryContext(ctx, args)
	if err != nil {
		c.drop(q, st)
		return nil, err
	}
	st.busy = true
	return &cachedRows{Rows: rows, release: func(failed bool) {
		st.busy = false
		if failed {
			c.drop(q, st)
		}
	}}, nil
}

// Close finalizes the cached statements, then closes the connection.
func (c *cachingConn) Close() error {
	for k, st := range c.stmts {
		st.Close()
		delete(c.stmts, k)
	}
	return c.sqliteConn.Close()
}

// cachedRows gives its statement back to the connection when closed.
type cachedRows struct {
	driver.Rows
	release func(failed bool)
	failed  bool
}

func (r *cachedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && !errors.Is(err, io.EOF) {
		r.failed = true
	}
	return err
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	if r.release != nil {
		r.release(r.failed || err != nil)
		r.release = nil
	}
	return err
}
