package store

import (
	"context"
	"testing"
	"time"
)

// A pass releases owners and condemns objects in short index
// transactions, gcBatch at a time, so that uploads queued for the write
// connection never wait behind one long transaction: 100 abandoned xorbs
// take at least 4 release transactions and 4 sweep transactions.
func TestPassTransactionsAreShort(t *testing.T) {
	l := newLC(t)
	const n = 100
	var want int64
	for i := range n {
		f := buildFile(chunksOf(uint64(7000+i), 1, 64))
		l.putXorbs(l.s, "alice", f)
		want += f.xorbs[0].StreamLen
	}
	l.clock.advance(OwnerGrace + time.Hour)
	steps := map[string]int{}
	rep, err := l.s.Collect(context.Background(), GCConfig{Grace: time.Minute, Hook: func(step string) error {
		steps[step]++
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReleasedOwners != n || rep.ReleasedBytes != want {
		t.Fatalf("released %d owners (%d bytes), want %d (%d bytes)", rep.ReleasedOwners, rep.ReleasedBytes, n, want)
	}
	if steps["owners indexed"] < 4 {
		t.Errorf("%d owners released in %d transactions, want at most 32 a transaction", n, steps["owners indexed"])
	}
	l.clock.advance(2 * time.Minute)
	steps = map[string]int{}
	rep, err = l.s.Collect(context.Background(), GCConfig{Grace: time.Minute, Hook: func(step string) error {
		steps[step]++
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.DeletedXorbs != n {
		t.Fatalf("deleted %d xorbs, want %d: %+v", rep.DeletedXorbs, n, rep)
	}
	if steps["doomed"] < 4 {
		t.Errorf("%d xorbs condemned in %d transactions, want at most 32 a transaction", n, steps["doomed"])
	}
	l.checkConsistent("alice")
}
