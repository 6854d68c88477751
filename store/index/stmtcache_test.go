package index

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// openCaching opens a one-connection SQLite database through OpenSQLite
// with a table t(k PRIMARY KEY, v) holding 1..3.
func openCaching(t *testing.T) *sql.DB {
	t.Helper()
	db, err := OpenSQLite("file:" + filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		if _, err := db.Exec(`INSERT INTO t(k, v) VALUES (?, ?)`, k, fmt.Sprint("v", k)); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// cached returns the texts the connection holds prepared.
func cached(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := map[string]bool{}
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("connection is %T, not a cachingConn", dc)
		}
		for q, st := range c.stmts {
			if st.busy {
				return fmt.Errorf("%q still busy with no query open", q)
			}
			got[q] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

const selectV = `SELECT v FROM t WHERE k = ?`

func queryV(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, k int) string {
	t.Helper()
	var v string
	if err := q.QueryRowContext(t.Context(), selectV, k).Scan(&v); err != nil {
		t.Fatalf("k=%d: %v", k, err)
	}
	return v
}

// A text run twice is prepared once and answers with each run's arguments.
func TestStatementCacheReusesStatements(t *testing.T) {
	db := openCaching(t)
	for k := 1; k <= 3; k++ {
		if got, want := queryV(t, db, k), fmt.Sprint("v", k); got != want {
			t.Fatalf("k=%d: %q, want %q", k, got, want)
		}
	}
	if got := cached(t, db); !got[selectV] || !got[`INSERT INTO t(k, v) VALUES (?, ?)`] {
		t.Fatalf("cached = %v, want the SELECT and the INSERT", got)
	}
}

// A query of a text whose statement has rows open on the same connection
// (nested in a transaction) runs on a statement of its own, and neither
// disturbs the other.
func TestStatementCacheNestedQueriesOfOneText(t *testing.T) {
	db := openCaching(t)
	queryV(t, db, 1) // cached
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	outer, err := tx.QueryContext(t.Context(), `SELECT k FROM t WHERE k >= ? ORDER BY k`, 1)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for outer.Next() {
		var k int
		if err := outer.Scan(&k); err != nil {
			t.Fatal(err)
		}
		inner, err := tx.QueryContext(t.Context(), `SELECT k FROM t WHERE k >= ? ORDER BY k`, k)
		if err != nil {
			t.Fatal(err)
		}
		for inner.Next() {
			var j int
			if err := inner.Scan(&j); err != nil {
				t.Fatal(err)
			}
			pairs = append(pairs, fmt.Sprintf("%d%d", k, j))
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		if got := queryV(t, tx, k); got != fmt.Sprint("v", k) {
			t.Fatalf("inside the outer query: %q", got)
		}
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	outer.Close()
	if fmt.Sprint(pairs) != "[11 12 13 22 23 33]" {
		t.Fatalf("pairs = %v", pairs)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	cached(t, db) // and nothing left busy
}

// A statement that failed (a constraint, a query cancelled mid-step) is
// prepared afresh; the next run of its text answers correctly.
func TestStatementCacheAfterFailures(t *testing.T) {
	db := openCaching(t)
	const insert = `INSERT INTO t(k, v) VALUES (?, ?)`
	if _, err := db.Exec(insert, 1, "dup"); err == nil {
		t.Fatal("duplicate key inserted")
	}
	if _, err := db.Exec(insert, 4, "v4"); err != nil {
		t.Fatalf("insert after a failed insert: %v", err)
	}
	if got := queryV(t, db, 4); got != "v4" {
		t.Fatalf("got %q", got)
	}

	// A long query whose context ends while it runs.
	const slow = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT count(*) FROM n`
	var count int
	if err := db.QueryRow(slow, 10).Scan(&count); err != nil || count != 10 {
		t.Fatalf("count = %d, %v", count, err)
	}
	// It cannot finish (2^40 rows); the deadline interrupts it.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := db.QueryRowContext(ctx, slow, int64(1)<<40).Scan(&count); err == nil {
		t.Fatal("a query of 2^40 rows finished")
	}
	if err := db.QueryRow(slow, 20).Scan(&count); err != nil || count != 20 {
		t.Fatalf("after a cancelled run: count = %d, %v", count, err)
	}
	cached(t, db)
}

// A cached statement follows a change of the schema under it.
func TestStatementCacheAcrossSchemaChange(t *testing.T) {
	db := openCaching(t)
	queryV(t, db, 2)
	for _, q := range []string{
		`ALTER TABLE t RENAME TO old`,
		`CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL, extra INTEGER)`,
		`INSERT INTO t(k, v) SELECT k, v || '-new' FROM old`,
		`DROP TABLE old`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got := queryV(t, db, 2); got != "v2-new" {
		t.Fatalf("after the schema changed: %q, want v2-new", got)
	}
}

// A connection keeps at most stmtCacheSize statements.
func TestStatementCacheIsBounded(t *testing.T) {
	db := openCaching(t)
	for i := range stmtCacheSize + 10 {
		var n int
		if err := db.QueryRow(fmt.Sprintf(`SELECT %d + ?`, i), 1).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("%d: %d %v", i, n, err)
		}
	}
	if got := cached(t, db); len(got) > stmtCacheSize || len(got) == 0 {
		t.Fatalf("%d statements cached, want 1..%d", len(got), stmtCacheSize)
	}
}
