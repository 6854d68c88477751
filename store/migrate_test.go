package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"openxet/store/index"
)

// rawIndex opens the index at loc without migrating it; schema is its PostgreSQL
// schema ("" for SQLite).
func rawIndex(tb testing.TB, loc string) (db *sql.DB, schema string) {
	tb.Helper()
	db, schema, err := index.OpenRaw(loc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, schema
}

// TestMigrationIndexesGCDropped (issue 34 item 5): an index at schema 5
// with gc_dropped rows, opened by this binary, gets the gc_dropped(xorb)
// and gc_objects(touched) indexes, keeps its rows, and deletes a xorb's
// rows through the index rather than by a scan.
func TestMigrationIndexesGCDropped(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		testMigrationIndexesGCDropped(t, dir, filepath.Join(dir, "index.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		dir := t.TempDir()
		testMigrationIndexesGCDropped(t, dir, pgIndexes(t)(dir))
	})
}

func testMigrationIndexesGCDropped(t *testing.T, dir, loc string) {
	ctx := context.Background()
	raw, schema := rawIndex(t, loc)
	if err := index.MigrateTo(ctx, raw, schema, 5); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO gc_dropped(tenant, xorb) VALUES ('alice', 'x1'), ('bob', 'x1'), ('alice', 'x2')`,
		`INSERT INTO gc_objects(key, touched) VALUES ('xorbs/default/x1', 7)`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()

	s, err := Open(ctx, Config{IndexPath: loc, BucketURL: fileBucket(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var version int
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&version); err != nil || version != index.SchemaVersion() {
		t.Fatalf("schema version %d (%v), want %d", version, err, index.SchemaVersion())
	}
	for _, name := range []string{"gc_dropped_xorb", "gc_objects_touched"} {
		q := `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?`
		if s.pg {
			q = `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?`
		}
		var n int
		if err := s.db.QueryRowContext(ctx, q, name).Scan(&n); err != nil || n != 1 {
			t.Fatalf("index %s: %d (%v)", name, n, err)
		}
	}
	if !s.pg {
		// The statement forgetTx runs finds its rows through the index.
		var plan string
		rows, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN DELETE FROM gc_dropped WHERE xorb = 'x1'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan += detail + "; "
		}
		rows.Close()
		if want := "USING COVERING INDEX gc_dropped_xorb"; !strings.Contains(plan, want) {
			t.Fatalf("plan %q does not use %s", plan, want)
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error { return forgetTx(ctx, tx, xorbKey("x1")) })
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	left, err = queryStrings(ctx, s.db, `SELECT tenant || '/' || xorb FROM gc_dropped ORDER BY tenant, xorb`)
	if err != nil || len(left) != 1 || left[0] != "alice/x2" {
		t.Fatalf("gc_dropped after forgetting x1: %v (%v), want [alice/x2]", left, err)
	}
	var touched int64
	if err := s.db.QueryRowContext(ctx, `SELECT touched FROM gc_objects WHERE key = ?`, xorbKey("x1")).Scan(&touched); err != nil || touched != 7 {
		t.Fatalf("gc_objects row after the migration: %d (%v)", touched, err)
	}
}
