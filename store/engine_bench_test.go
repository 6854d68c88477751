package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	indexpkg "openxet/store/index"
	"openxet/store/pgtest"
	"openxet/xet"
)

// BenchmarkIndex measures the index's share of three requests on each
// engine in one run, so that the ratios compare like with like:
//   - put_xorb: PutXorb of a new one-chunk xorb (the owner transaction:
//     xorb row, owner row, the tenant's usage conditional on its quota;
//     the bucket is mem:// so that the index dominates);
//   - owner_tx: the owner transaction of put_xorb alone (recordUpload):
//     one statement, its own transaction, on PostgreSQL; owner_tx_statements,
//     PostgreSQL only, is the same transaction as SQLite's four to six
//     statements (recordXorbOwner), as it was before issue 34 item 3;
//   - dedup: DedupAnswer for a chunk of a registered file;
//   - reconstruction: File and FileTerms of a registered file (the reads a
//     reconstruction makes; xorb layouts come from the cache);
//   - reconstruction_after_write: the same reads, each after a PutXorb of
//     another tenant that is not timed, as on a node where uploads go on
//     beside the reads: on SQLite a commit makes every other connection
//     drop its page cache at its next read;
//   - reconstruction_after_pause: its control, the same untimed work but
//     the xorb not written. Stopping the timer costs the next read its
//     CPU caches (StartTimer reads the memory statistics), so compare
//     after_write with after_pause, not with reconstruction.
//
// SQLite runs in WAL mode with synchronous=NORMAL, as serve opens it: a
// commit survives a crash of the process, not always one of the machine.
// PostgreSQL runs durably (fsync on) on 127.0.0.1, twice: as deployed by
// default (postgres: every commit waits for its WAL flush) and with
// synchronous_commit=off in the index URL (postgres_async: the durability
// of SQLite's NORMAL).
//
//	go test -run '^$' -bench 'Index/' -benchtime 2s -count 3 ./store/
//	go test -run '^$' -bench 'Index/.*/(put_xorb|owner_tx)' -benchtime 2s -count 3 ./store/
func BenchmarkIndex(b *testing.B) {
	parent := b
	var srv *pgtest.Server
	for _, engine := range []string{"sqlite", "postgres", "postgres_async"} {
		b.Run(engine, func(b *testing.B) {
			newIndex := func(dir string) string { return filepath.Join(dir, "index.db") }
			if engine != "sqlite" {
				if srv == nil {
					srv = pgtest.StartDurable(parent) // one server for both runs
				}
				newIndex = func(string) string {
					u := srv.NewIndex(b)
					if engine == "postgres_async" {
						u += "&synchronous_commit=off"
					}
					return u
				}
			}
			benchIndexOn(b, engine, newIndex)
		})
	}
}

// benchIndexOn runs BenchmarkIndex's requests on engine, where newIndex
// makes a new index (in dir for SQLite).
func benchIndexOn(b *testing.B, engine string, newIndex func(dir string) string) {
	dir := b.TempDir()
	index := newIndex(dir)
	// A context that can end, as a request's: what the routes pass.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &lc{tb: b, dir: dir, index: index, clock: newClock()}
	l.s = l.open()
	f := buildFile(chunkSet(1), append(chunkSet(2), eligibleChunk()))
	l.upload("alice", f)
	chunk := f.xorbs[1].Chunks[3].Hash

	b.Run("put_xorb", func(b *testing.B) { benchPutXorb(b, ctx, newIndex) })
	for _, statements := range []bool{false, true} {
		if statements && engine == "sqlite" {
			continue
		}
		name := "owner_tx"
		if statements {
			name = "owner_tx_statements"
		}
		b.Run(name, func(b *testing.B) { benchOwnerTx(b, ctx, newIndex, statements) })
	}
	b.Run("dedup", func(b *testing.B) {
		for b.Loop() {
			if got, err := l.s.DedupAnswer(ctx, "alice", chunk, false, 8); err != nil || len(got) == 0 {
				b.Fatalf("%v %v", got, err)
			}
		}
	})
	reconstruct := func(b *testing.B) {
		file, err := l.s.File(ctx, "alice", f.hash())
		if err != nil {
			b.Fatal(err)
		}
		if terms, _, err := l.s.FileTerms(ctx, "alice", file.Hash, 0, uint64(file.SizeBytes)); err != nil || len(terms) != 2 {
			b.Fatalf("%v %v", terms, err)
		}
	}
	b.Run("reconstruction", func(b *testing.B) {
		for b.Loop() {
			reconstruct(b)
		}
	})
	for _, write := range []bool{false, true} {
		name := "reconstruction_after_pause"
		if write {
			name = "reconstruction_after_write"
		}
		b.Run(name, func(b *testing.B) { benchReadAfter(b, ctx, l.s, write, reconstruct) })
	}
}

// benchPutXorb is BenchmarkIndex's put_xorb, on a new index of newIndex.
func benchPutXorb(b *testing.B, ctx context.Context, newIndex func(dir string) string) {
	s := mustOpenIndex(b, newIndex(b.TempDir()), "mem://")
	xorbs := make([]xet.XorbInfo, b.N)
	bodies := make([][]byte, b.N)
	for i := range b.N {
		body, info := xet.BuildXorb([][]byte{fmt.Appendf(nil, "bench %s %d", b.Name(), i)}, false)
		xorbs[i], bodies[i] = info, body[:info.StreamLen]
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.PutXorb(ctx, "bench", xorbs[i], bodies[i], Unlimited); err != nil {
			b.Fatal(err)
		}
	}
}

// benchOwnerTx is BenchmarkIndex's owner_tx, or with statements its
// owner_tx_statements, on a new index of newIndex.
func benchOwnerTx(b *testing.B, ctx context.Context, newIndex func(dir string) string, statements bool) {
	s := mustOpenIndex(b, newIndex(b.TempDir()), "mem://")
	recs := make([]xorbRecord, b.N)
	hashes := make([]string, b.N)
	for i := range b.N {
		_, info := xet.BuildXorb([][]byte{fmt.Appendf(nil, "bench %s %d", b.Name(), i)}, false)
		recs[i], hashes[i] = xorbRecord{size: info.StreamLen, chunks: encodeChunks(info.Chunks)}, info.Hash.String()
	}
	b.ResetTimer()
	for i := range b.N {
		var err error
		if statements {
			err = s.inTx(ctx, func(tx *sql.Tx) error {
				_, _, err := recordXorbOwner(ctx, tx, "bench", hashes[i], recs[i], enforceQuota, Unlimited, 1)
				return err
			})
		} else {
			_, _, err = s.recordUpload(ctx, "bench", hashes[i], recs[i], Unlimited)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchReadAfter is BenchmarkIndex's reconstruction_after_write, or
// without write its reconstruction_after_pause: reconstruct on s, timed,
// after untimed work that with write puts a xorb of another tenant.
func benchReadAfter(b *testing.B, ctx context.Context, s *Store, write bool, reconstruct func(b *testing.B)) {
	i := 0
	for b.Loop() {
		b.StopTimer()
		body, info := xet.BuildXorb([][]byte{fmt.Appendf(nil, "write %s %d", b.Name(), i)}, false)
		i++
		if write {
			if _, err := s.PutXorb(ctx, "bob", info, body[:info.StreamLen], Unlimited); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		reconstruct(b)
	}
}

// eligibleChunk is a chunk the dedup index keeps (xet.DedupEligible).
func eligibleChunk() []byte {
	for seed := uint64(1); ; seed++ {
		c := chunksOf(seed, 1, 3000)
		if _, info := xet.BuildXorb(c, false); xet.DedupEligible(info.Chunks[0].Hash) {
			return c[0]
		}
	}
}

// BenchmarkPgxDriver compares the two ways to use pgx for the index: through
// database/sql (what the store does, so that one package and one set of
// transactions serve both engines) and natively (pgx.Conn), on the same
// query the dedup route runs, against one server in one run.
//
//	go test -run '^$' -bench 'PgxDriver' -benchtime 2s -count 3 ./store/
func BenchmarkPgxDriver(b *testing.B) {
	srv := pgtest.Start(b)
	index := srv.NewIndex(b)
	s := mustOpenIndex(b, index, fileBucket(b.TempDir()))
	ctx := context.Background()
	if _, err := s.wdb.ExecContext(ctx, `INSERT INTO dedup(chunk, tenant, xorb, shard) VALUES ('c', 't', 'x', 's')`); err != nil {
		b.Fatal(err)
	}
	const q = `SELECT xorb, shard FROM dedup WHERE chunk = ? AND tenant = ?`
	b.Run("database_sql", func(b *testing.B) {
		var x, sh string
		for b.Loop() {
			if err := s.db.QueryRowContext(ctx, q, "c", "t").Scan(&x, &sh); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("native", func(b *testing.B) {
		cfg, schema, err := indexpkg.PostgresConfig(index)
		if err != nil {
			b.Fatal(err)
		}
		cfg.RuntimeParams["search_path"] = schema
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		var x, sh string
		for b.Loop() {
			if err := conn.QueryRow(ctx, indexpkg.Rebind(q), "c", "t").Scan(&x, &sh); err != nil {
				b.Fatal(err)
			}
		}
	})
}
