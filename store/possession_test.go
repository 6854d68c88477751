package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"openxet/xet"
)

// TestVerifyUploadPossession: a shard naming another tenant's xorb is
// accepted only with verification entries that match the stored chunks
// (global dedup) or not at all (tenant dedup); the uploader's own xorbs
// need none; a refusal about another tenant's xorb is one sentence that
// names no stored value, and a dedup answer from another tenant's entry
// offers only the xorb holding the chunk.
func TestVerifyUploadPossession(t *testing.T) {
	onEngines(t, func(t *testing.T, newLC func(testing.TB) *lc) {
		l := newLC(t)
		ctx := context.Background()
		f := buildFile(append([][]byte{eligibleChunk()}, chunksOf(451, 2, 3000)...), chunksOf(452, 2, 4000))
		l.upload("alice", f)
		stripped := func() *xet.Shard {
			fi := f.info
			fi.Verification, fi.Flags = nil, 0
			return &xet.Shard{Files: []xet.FileInfo{fi}}
		}
		verified := &xet.Shard{Files: []xet.FileInfo{f.info}}
		wrong := func() *xet.Shard {
			fi := f.info
			fi.Verification = append([]xet.Hash(nil), fi.Verification...)
			fi.Verification[1][0] ^= 1
			return &xet.Shard{Files: []xet.FileInfo{fi}}
		}()
		for _, tc := range []struct {
			name   string
			tenant string
			sh     *xet.Shard
			global bool
			want   error
		}{
			{"own xorbs, no verification", "alice", stripped(), true, nil},
			{"own xorbs, no verification, tenant scope", "alice", stripped(), false, nil},
			{"another's xorbs, no verification", "bob", stripped(), true, ErrInvalidShard},
			{"another's xorbs, verified", "bob", verified, true, nil},
			{"another's xorbs, wrong verification", "bob", wrong, true, ErrInvalidShard},
			{"another's xorbs, tenant scope", "bob", verified, false, ErrMissingXorb},
		} {
			err := l.s.VerifyUpload(ctx, tc.tenant, tc.sh, tc.global)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
				continue
			}
			if err == nil {
				continue
			}
			for _, x := range f.xorbs {
				for _, c := range x.Chunks {
					if strings.Contains(err.Error(), c.Hash.String()) {
						t.Errorf("%s: %q names a stored chunk hash", tc.name, err)
					}
				}
			}
			if tc.name == "another's xorbs, wrong verification" && !strings.Contains(err.Error(), "must all agree") {
				t.Errorf("%s: %q, want the one sentence for another's xorb", tc.name, err)
			}
		}
		chunk := f.xorbs[0].Chunks[0].Hash
		own, err := l.s.DedupAnswer(ctx, "alice", chunk, true, 8)
		if err != nil || len(own) != 2 {
			t.Fatalf("alice's own dedup answer: %d xorbs, %v; want both of her upload", len(own), err)
		}
		other, err := l.s.DedupAnswer(ctx, "bob", chunk, true, 8)
		if err != nil || len(other) != 1 || other[0].Xorb != f.xorbs[0].Hash {
			t.Fatalf("bob's dedup answer from alice's entry: %d xorbs, %v; want the one holding the chunk", len(other), err)
		}
	})
}
