package store

import (
	"context"
	"errors"
	"testing"

	"openxet/xet"
)

// storedXorb puts one xorb of n random chunks and returns its hash and
// stored bytes.
func storedXorb(tb testing.TB, s *Store, n int) (xet.Hash, []byte) {
	tb.Helper()
	body, info := xet.BuildXorb(chunksOf(7, n, 64<<10), false)
	if _, err := s.PutXorb(context.Background(), "t", info, body[:info.StreamLen], 1<<40); err != nil {
		tb.Fatal(err)
	}
	return info.Hash, body[:info.StreamLen]
}

// The lookups on a request's path run without the request's cancellation
// on SQLite (lookupCtx), but a request that has already ended reads
// nothing: each lookup returns its context's error.
func TestLookupsStopForAnEndedRequest(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	h, _ := storedXorb(t, s, 2)
	live := context.Background()
	if _, err := s.XorbChunks(live, h); err != nil {
		t.Fatal(err)
	}
	s.layouts = newLayoutCache(4096) // so that XorbChunks reads the index again
	ended, cancel := context.WithCancel(live)
	cancel()
	for name, read := range map[string]func(context.Context) error{
		"XorbChunks": func(ctx context.Context) error { _, err := s.XorbChunks(ctx, h); return err },
		"OwnsXorb":   func(ctx context.Context) error { _, err := s.OwnsXorb(ctx, "t", h); return err },
		"File":       func(ctx context.Context) error { _, err := s.File(ctx, "t", h); return err },
		"FileTerms":  func(ctx context.Context) error { _, _, err := s.FileTerms(ctx, "t", h, 0, 1); return err },
		"DedupAnswer": func(ctx context.Context) error {
			_, err := s.DedupAnswer(ctx, "t", h, true, 8)
			return err
		},
	} {
		if err := read(ended); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want context.Canceled", name, err)
		}
	}
	if _, err := s.XorbChunks(live, h); err != nil {
		t.Fatalf("the store reads no more after the ended lookups: %v", err)
	}
}
