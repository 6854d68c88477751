package server

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"openxet/store"
	"openxet/xet"
)

// TestIndexBusyAnswers503: while another process holds the index's write
// lock past the store's busy timeout, a xorb upload answers 503
// unavailable with Retry-After (and changes no row or counter), and reads
// still answer.
func TestIndexBusyAnswers503(t *testing.T) {
	dir := t.TempDir()
	cfg := store.DirConfig(dir)
	cfg.BusyTimeout = time.Millisecond
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(testConfig(), st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	e := &testEnv{t: t, st: st, srv: srv, http: hs}
	e.admin = e.credential("admin", "admin")
	alice := e.credential("alice", "write")
	stored, storedInfo := xet.BuildXorb(randomChunks(31, 2, 20_000), false)
	if r := e.postXorb(alice, stored, storedInfo.Hash); r.Status != 200 {
		t.Fatalf("upload before the lock: %d %s", r.Status, r.Body)
	}
	before := e.snapshot()

	// Another process's writer holds the write lock.
	unlock := holdIndexWriteLock(t, dir)

	body, info := xet.BuildXorb(randomChunks(32, 2, 20_000), false)
	r := e.postXorb(alice, body, info.Hash)
	wantError(t, r, 503, "unavailable")
	if got := r.Header.Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After %q, want 2", got)
	}
	if m := r.json(t); m["hint"] == nil || m["hint"] == "" {
		t.Fatalf("no hint: %s", r.Body)
	}

	// Reads answer.
	if r := e.do("HEAD", "/v1/xorbs/default/"+storedInfo.Hash.String(), alice, nil); r.Status != 200 {
		t.Fatalf("HEAD of a stored xorb while the index is busy: %d", r.Status)
	}
	if r := e.do("GET", "/api/openxet/v1/admin/tenants/alice/limits", e.admin, nil); r.Status != 200 {
		t.Fatalf("limits of alice while the index is busy: %d %s", r.Status, r.Body)
	}

	unlock()
	after := e.snapshot()
	if diff := cmp.Diff(before.Rows, after.Rows); diff != "" {
		t.Fatalf("a 503 upload changed index rows (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before.Usage, after.Usage); diff != "" {
		t.Fatalf("a 503 upload changed usage (-before +after):\n%s", diff)
	}
	// The retry succeeds.
	if r := e.postXorb(alice, body, info.Hash); r.Status != 200 {
		t.Fatalf("retry after the lock: %d %s", r.Status, r.Body)
	}
}

// holdIndexWriteLock takes the write lock of the index in dir from a
// connection of its own, as another process's writer would, until unlock
// (or the end of the test) rolls it back.
func holdIndexWriteLock(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return func() { conn.ExecContext(context.Background(), "ROLLBACK") }
}
