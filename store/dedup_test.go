package store

import (
	"context"
	"errors"
	"testing"

	"openxet/xet"
)

// TestDedupAnswerPrefersOwnEntry: a chunk two tenants registered, each in
// a xorb of its own, is answered from the asking tenant's xorb first; a
// third tenant gets one of theirs only when dedup is global; an unknown
// chunk is ErrNotFound either way.
func TestDedupAnswerPrefersOwnEntry(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		shared := eligibleChunk()
		a := buildFile(append([][]byte{shared}, chunksOf(101, 2, 3000)...))
		b := buildFile(append([][]byte{shared}, chunksOf(102, 2, 3000)...))
		if a.xorbs[0].Hash == b.xorbs[0].Hash {
			t.Fatal("test files share a xorb")
		}
		l.upload("alice", a)
		l.upload("bob", b)
		chunk := a.xorbs[0].Chunks[0].Hash
		first := func(tenant string, global bool) (xet.Hash, error) {
			got, err := l.s.DedupAnswer(ctx, tenant, chunk, global, 8)
			if err != nil {
				return xet.Hash{}, err
			}
			return got[0].Xorb, nil
		}
		for _, global := range []bool{true, false} {
			if got, err := first("alice", global); err != nil || got != a.xorbs[0].Hash {
				t.Errorf("alice (global %v): %v %v, want her own xorb %v", global, got, err, a.xorbs[0].Hash)
			}
			if got, err := first("bob", global); err != nil || got != b.xorbs[0].Hash {
				t.Errorf("bob (global %v): %v %v, want his own xorb %v", global, got, err, b.xorbs[0].Hash)
			}
		}
		if got, err := first("carol", true); err != nil || (got != a.xorbs[0].Hash && got != b.xorbs[0].Hash) {
			t.Errorf("carol, global: %v %v, want alice's or bob's xorb", got, err)
		}
		if _, err := first("carol", false); !errors.Is(err, ErrNotFound) {
			t.Errorf("carol, own only: %v, want ErrNotFound", err)
		}
		for _, global := range []bool{true, false} {
			if _, err := l.s.DedupAnswer(ctx, "alice", xet.Hash{7}, global, 8); !errors.Is(err, ErrNotFound) {
				t.Errorf("unknown chunk (global %v): %v, want ErrNotFound", global, err)
			}
		}
	})
}
