package store

import (
	"crypto/sha1"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"openxet/store/pgtest"
)

// With OPENXET_TEST_INDEX=postgres the whole suite runs on PostgreSQL:
// every index a test opens through testIndex (and mustOpen) is a database
// of its own on one cluster started here. The default is SQLite. Tests of
// SQLite's own file and lock behaviour skip themselves (sqliteOnly).
var (
	testPG     *pgtest.Server
	testPGDirs sync.Map // dir → index URL
)

func TestMain(m *testing.M) {
	if os.Getenv("OPENXET_TEST_INDEX") == "postgres" {
		s, err := pgtest.Launch(false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "OPENXET_TEST_INDEX=postgres:", err)
			os.Exit(2)
		}
		testPG = s
		code := m.Run()
		s.Close()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// testIndex is the index location of the data directory dir: dir/index.db,
// or (OPENXET_TEST_INDEX=postgres) a database of its own, the same one for
// every call with the same dir.
func testIndex(tb testing.TB, dir string) string {
	tb.Helper()
	if testPG == nil {
		return filepath.Join(dir, "index.db")
	}
	if u, ok := testPGDirs.Load(dir); ok {
		return u.(string)
	}
	u, err := testPG.CreateIndex()
	if err != nil {
		tb.Fatal(err)
	}
	actual, _ := testPGDirs.LoadOrStore(dir, u)
	return actual.(string)
}

// sqliteOnly skips a test of SQLite's own files and locks when the suite
// runs on PostgreSQL.
func sqliteOnly(tb testing.TB) {
	if testPG != nil {
		tb.Skip("tests SQLite's own files and locks (OPENXET_TEST_INDEX=postgres)")
	}
}

// fakeOID is a git blob id for a test's file whose content no test reads:
// the SHA-1 of s.
func fakeOID(s string) string { return fmt.Sprintf("%x", sha1.Sum([]byte(s))) }

// fakeSHA256 is a SHA-256 (hex) for a test's file: the SHA-256 of s.
func fakeSHA256(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }
