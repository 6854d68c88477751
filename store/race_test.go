package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/xet"
)

// pauseAt makes the next write of s that reaches step wait there: reached
// is closed when it gets there, and it goes on when resume is called.
func pauseAt(s *Store, step string) (reached <-chan struct{}, resume func()) {
	r, c := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.hook = func(got string) error {
		if got == step {
			once.Do(func() {
				close(r)
				<-c
			})
		}
		return nil
	}
	return r, func() { close(c) }
}

type putResult struct {
	inserted bool
	err      error
}

// goPut runs PutXorb in its own goroutine, as another process would.
func goPut(s *Store, tenant string, body []byte, info xet.XorbInfo, quotaBytes int64) <-chan putResult {
	out := make(chan putResult, 1)
	go func() {
		inserted, err := s.PutXorb(context.Background(), tenant, info, body[:info.StreamLen], quotaBytes)
		out <- putResult{inserted, err}
	}()
	return out
}

// twoSerializations returns one xorb serialized twice: with its chunks
// LZ4-compressed and stored raw.
func twoSerializations(t *testing.T) (compressed []byte, ci xet.XorbInfo, raw []byte, ri xet.XorbInfo) {
	t.Helper()
	var chunks [][]byte
	for i := range 3 {
		chunks = append(chunks, bytes.Repeat([]byte(fmt.Sprintf("serialization %d ", i)), 1500))
	}
	compressed, ci = xet.BuildXorb(chunks, true)
	raw, ri = xet.BuildXorb(chunks, false)
	if ci.Hash != ri.Hash || ci.StreamLen == ri.StreamLen {
		t.Fatal("want two serializations of one xorb, of different lengths")
	}
	return compressed, ci, raw, ri
}

// checkAgreement checks that the bucket and the index agree on xorb h: its
// object parses with the layout the index has for it, every store's cached
// layout is that layout, usage is the sum of owned sizes, and a rebuild
// from the bucket finds no difference.
func checkAgreement(t *testing.T, dir string, h xet.Hash, stores ...*Store) {
	t.Helper()
	ctx := context.Background()
	s := stores[0]
	var streamLen int64
	var blob []byte
	if err := s.db.QueryRow(`SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, h.String()).Scan(&streamLen, &blob); err != nil {
		t.Fatalf("index row of %s: %v", h, err)
	}
	indexed, err := decodeChunks(blob)
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.Bucket().ReadAll(ctx, xorbKey(h.String()))
	if err != nil {
		t.Fatalf("object of indexed xorb %s: %v", h, err)
	}
	stored, err := xet.ParseXorb(data, h)
	if err != nil {
		t.Fatalf("object of %s does not parse: %v", h, err)
	}
	if stored.StreamLen != streamLen {
		t.Fatalf("object of %s is a %d-byte stream, the index says %d", h, stored.StreamLen, streamLen)
	}
	if diff := cmp.Diff(stored.Chunks, indexed); diff != "" {
		t.Fatalf("indexed layout of %s is not the stored object's (-stored +indexed):\n%s", h, diff)
	}
	for i, st := range stores {
		cached, err := st.XorbChunks(ctx, h)
		if err != nil || !cmp.Equal(cached, indexed) {
			t.Fatalf("store %d serves another layout of %s than the index has (err %v)", i, h, err)
		}
	}
	rows, err := s.db.Query(`SELECT t.name, t.usage_bytes, COALESCE(SUM(o.size), 0) FROM tenants t LEFT JOIN xorb_owners o ON o.tenant = t.name GROUP BY t.name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var usage, owned int64
		rows.Scan(&name, &usage, &owned)
		if usage != owned {
			t.Errorf("tenant %s: usage %d, owned xorbs add up to %d", name, usage, owned)
		}
	}
	rows.Close()
	diffs, err := CheckIndex(ctx, ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)})
	if err != nil || len(diffs) > 0 {
		t.Fatalf("reindex --check: differences %v, error %v", diffs, err)
	}
}

// TestPutXorbAcrossProcesses forces the interleavings of two processes
// writing one xorb. Two Stores opened on one index file and one bucket
// behave as two processes: each has its own xorb locks and layout cache.
// Whatever the order, the object in the bucket is the one the index
// describes.
func TestPutXorbAcrossProcesses(t *testing.T) {
	compressed, ci, raw, ri := twoSerializations(t)

	t.Run("a refused write does not delete the object another writer commits", func(t *testing.T) {
		dir := t.TempDir()
		p1, p2 := mustOpen(t, dir, fileBucket(dir)), mustOpen(t, dir, fileBucket(dir))
		reached1, resume1 := pauseAt(p1, "object")
		reached2, resume2 := pauseAt(p2, "owner")
		r1 := goPut(p1, "alice", raw, ri, 1) // alice's quota refuses it
		<-reached1
		r2 := goPut(p2, "bob", raw, ri, Unlimited)
		<-reached2
		resume1()
		if res := <-r1; !errors.Is(res.err, ErrOverQuota) {
			t.Fatalf("alice's write: %v, want over quota", res.err)
		}
		resume2()
		if res := <-r2; res.err != nil || !res.inserted {
			t.Fatalf("bob's write: %+v", res)
		}
		checkAgreement(t, dir, ri.Hash, p1, p2)
		if ok, _ := p1.OwnsXorb(context.Background(), "alice", ri.Hash); ok {
			t.Fatal("alice owns a xorb her quota refused")
		}
	})

	t.Run("a second serialization written before the first commits", func(t *testing.T) {
		dir := t.TempDir()
		p1, p2 := mustOpen(t, dir, fileBucket(dir)), mustOpen(t, dir, fileBucket(dir))
		reached1, resume1 := pauseAt(p1, "object")
		reached2, resume2 := pauseAt(p2, "owner")
		r1 := goPut(p1, "alice", compressed, ci, Unlimited)
		<-reached1
		r2 := goPut(p2, "bob", raw, ri, Unlimited)
		<-reached2
		resume1()
		if res := <-r1; res.err != nil || !res.inserted {
			t.Fatalf("alice's write: %+v", res)
		}
		resume2()
		if res := <-r2; res.err != nil || !res.inserted {
			t.Fatalf("bob's write: %+v", res)
		}
		checkAgreement(t, dir, ci.Hash, p1, p2)
	})

	t.Run("a second serialization written after the first commits", func(t *testing.T) {
		dir := t.TempDir()
		p1, p2 := mustOpen(t, dir, fileBucket(dir)), mustOpen(t, dir, fileBucket(dir))
		reached2, resume2 := pauseAt(p2, "indexed")
		r2 := goPut(p2, "bob", raw, ri, Unlimited)
		<-reached2 // bob found no index row
		if res := <-goPut(p1, "alice", compressed, ci, Unlimited); res.err != nil || !res.inserted {
			t.Fatalf("alice's write: %+v", res)
		}
		resume2()
		if res := <-r2; res.err != nil || !res.inserted {
			t.Fatalf("bob's write: %+v", res)
		}
		checkAgreement(t, dir, ci.Hash, p1, p2)
	})
}

var errCrash = errors.New("simulated crash")

// crashAfter makes the next write of s stop after step as a crash would.
func crashAfter(s *Store, step string) {
	s.hook = func(got string) error {
		if got == step {
			return errCrash
		}
		return nil
	}
}

// TestPutXorbCrashAfterOwnerRecord: a crash between the owner record and
// the index transaction leaves an owner record the index does not have.
// The rule: such a record is the tenant's ownership as far as reindex is
// concerned (even past its quota); the tenant's next upload of the xorb
// completes it, or removes it when the quota refuses it. Either way
// reindex --check then agrees with the live index.
func TestPutXorbCrashAfterOwnerRecord(t *testing.T) {
	ctx := context.Background()
	body, info := xet.BuildXorb(chunksOf(21, 3, 4000), false)
	stream := body[:info.StreamLen]
	crash := func(t *testing.T) (string, *Store, ReindexConfig) {
		t.Helper()
		dir := t.TempDir()
		s := mustOpen(t, dir, fileBucket(dir))
		cfg := ReindexConfig{IndexPath: testIndex(t, dir), BucketURL: fileBucket(dir)}
		crashAfter(s, "owner")
		if _, err := s.PutXorb(ctx, "alice", info, stream, Unlimited); !errors.Is(err, errCrash) {
			t.Fatalf("crashed write: %v", err)
		}
		s.hook = nil
		if ok, _ := s.Bucket().Exists(ctx, xorbOwnerKey(info.Hash.String(), "alice")); !ok {
			t.Fatal("no owner record after the crash")
		}
		// The bucket is ahead of the index, never behind.
		diffs, err := CheckIndex(ctx, cfg)
		if err != nil || len(diffs) == 0 {
			t.Fatalf("check after the crash: differences %v, error %v", diffs, err)
		}
		for _, d := range diffs {
			if d.Index != "" && d.Table != "tenants" {
				t.Fatalf("check after the crash: the index has what the bucket lacks: %v", d)
			}
		}
		return dir, s, cfg
	}

	t.Run("the next upload completes it", func(t *testing.T) {
		dir, s, _ := crash(t)
		inserted, err := s.PutXorb(ctx, "alice", info, stream, Unlimited)
		if err != nil || !inserted {
			t.Fatalf("next upload: %v %v", inserted, err)
		}
		checkAgreement(t, dir, info.Hash, s)
		if u, _ := s.Usage(ctx, "alice"); u != info.StreamLen {
			t.Fatalf("usage %d, want %d", u, info.StreamLen)
		}
	})

	t.Run("the next upload is refused and removes it", func(t *testing.T) {
		_, s, cfg := crash(t)
		if _, err := s.PutXorb(ctx, "alice", info, stream, 1); !errors.Is(err, ErrOverQuota) {
			t.Fatalf("next upload: %v, want over quota", err)
		}
		if ok, _ := s.Bucket().Exists(ctx, xorbOwnerKey(info.Hash.String(), "alice")); ok {
			t.Fatal("a refused upload left the owner record")
		}
		if diffs, err := CheckIndex(ctx, cfg); err != nil || len(diffs) > 0 {
			t.Fatalf("check: differences %v, error %v", diffs, err)
		}
		if u, _ := s.Usage(ctx, "alice"); u != 0 {
			t.Fatalf("usage %d, want 0", u)
		}
	})

	t.Run("reindex counts it even past the quota", func(t *testing.T) {
		dir, s, cfg := crash(t)
		if err := s.PutTenantLimits(ctx, "alice", []byte(`{"quota_bytes":1}`), ptr(int64(1))); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := Reindex(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, dir, fileBucket(dir))
		if u, _ := s.Usage(ctx, "alice"); u != info.StreamLen {
			t.Fatalf("usage after reindex %d, want %d", u, info.StreamLen)
		}
		checkAgreement(t, dir, info.Hash, s)
		// The tenant owns it now: uploading it again costs nothing.
		if inserted, err := s.PutXorb(ctx, "alice", info, stream, 1); err != nil || inserted {
			t.Fatalf("upload of an owned xorb: %v %v", inserted, err)
		}
	})
}
