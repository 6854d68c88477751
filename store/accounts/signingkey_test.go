package accounts

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
)

func TestSigningKeyInBucket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	if _, _, err := s.SigningKey(ctx, []byte("short")); err == nil {
		t.Fatal("a 5-byte candidate was accepted")
	}
	if ok, _ := s.bucket.Exists(ctx, SigningKeyKey); ok {
		t.Fatal("a refused candidate left a key in the bucket")
	}
	key, stored, err := s.SigningKey(ctx, nil)
	if err != nil || !stored || len(key) != 32 {
		t.Fatalf("first key: %x stored=%v %v", key, stored, err)
	}
	data, err := s.bucket.ReadAll(ctx, SigningKeyKey)
	if err != nil || strings.TrimSpace(string(data)) != hex.EncodeToString(key) {
		t.Fatalf("bucket holds %q (%v), want the key in hex", data, err)
	}
	// A key in the bucket wins over any candidate, on any store of the bucket.
	other := bytes.Repeat([]byte{9}, 32)
	s2 := mustOpen(t, t.TempDir(), fileBucket(dir))
	for _, st := range []*Accounts{s, s2} {
		got, stored, err := st.SigningKey(ctx, other)
		if err != nil || stored || !bytes.Equal(got, key) {
			t.Fatalf("later call: %x stored=%v %v, want %x", got, stored, err, key)
		}
	}
}

func TestSigningKeyCandidateStored(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	cand := bytes.Repeat([]byte{7}, 48)
	key, stored, err := s.SigningKey(context.Background(), cand)
	if err != nil || !stored || !bytes.Equal(key, cand) {
		t.Fatalf("candidate: %x stored=%v %v", key, stored, err)
	}
}

func TestSigningKeyDamaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	for _, bad := range []string{"zz", hex.EncodeToString(make([]byte, 16))} {
		if err := s.bucket.WriteAll(ctx, SigningKeyKey, []byte(bad), nil); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.SigningKey(ctx, nil)
		if err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), SigningKeyKey) {
			t.Fatalf("damaged key %q: %v", bad, err)
		}
		if data, _ := s.bucket.ReadAll(ctx, SigningKeyKey); string(data) != bad {
			t.Fatalf("damaged key replaced by %q", data)
		}
	}
}

// TestSigningKeyRacingStarts: stores starting at once on one bucket, each
// with its own candidate, end with one key, and exactly one of them stored
// its candidate.
func TestSigningKeyRacingStarts(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	keys := make([][]byte, n)
	stored := make([]bool, n)
	stores := make([]*Accounts, n)
	for i := range stores {
		stores[i] = mustOpen(t, dir, fileBucket(dir))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			keys[i], stored[i], err = stores[i].SigningKey(context.Background(), bytes.Repeat([]byte{byte(i + 1)}, 32))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	winners := 0
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("store %d got key %x, store 0 %x", i, keys[i], keys[0])
		}
		if stored[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d stores report storing their candidate, want 1", winners)
	}
}
