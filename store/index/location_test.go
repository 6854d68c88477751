package index

import (
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`UPDATE t SET u = u + ?1 WHERE n = ?2 AND (COALESCE(q, ?3) < 0 OR u + ?1 <= COALESCE(q, ?3))`,
			`UPDATE t SET u = u + $1 WHERE n = $2 AND (COALESCE(q, $3) < 0 OR u + $1 <= COALESCE(q, $3))`},
		{`SELECT '?', x FROM t WHERE y = ? AND z = 'it''s ?'`, `SELECT '?', x FROM t WHERE y = $1 AND z = 'it''s ?'`},
		{`ORDER BY ref = ?4 DESC LIMIT ?`, `ORDER BY ref = $4 DESC LIMIT $5`},
	} {
		if got := Rebind(tc.in); got != tc.want {
			t.Errorf("Rebind(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func FuzzRebind(f *testing.F) {
	f.Add(`SELECT a FROM t WHERE b = ?1 AND c = ? AND d = '?'`)
	f.Add(`?99999999999999999999`)
	f.Fuzz(func(t *testing.T, q string) {
		out := Rebind(q)
		// Nothing but placeholders outside quotes changes.
		if !contains(q, '?') && out != q {
			t.Fatalf("rebind changed a query without placeholders: %q → %q", q, out)
		}
	})
}

func contains(s string, c byte) bool {
	for i := range len(s) {
		if s[i] == c {
			return true
		}
	}
	return false
}

func TestPostgresLocation(t *testing.T) {
	dsn, schema, err := pgLocation("postgres://u:secret@db.example:5432/openxet?sslmode=require&schema=tenant_a")
	if err != nil || schema != "tenant_a" || dsn != "postgres://u:secret@db.example:5432/openxet?sslmode=require" {
		t.Fatalf("got %q %q %v", dsn, schema, err)
	}
	if _, schema, _ := pgLocation("postgresql://h/db"); schema != DefaultPostgresSchema {
		t.Fatalf("default schema %q", schema)
	}
	for _, bad := range []string{"postgres://h/db?schema=Bad", "postgres://h/db?schema=a;drop", "postgres://h/db?schema=1a"} {
		if _, _, err := pgLocation(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if _, _, err := pgLocation("postgres://u:secret@h:port/db"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("an unparsable URL: %v", err)
	}
	if r := Redact("postgres://u:secret@h/db"); r != "postgres://u:xxxxx@h/db" {
		t.Fatalf("redacted %q", r)
	}
}
