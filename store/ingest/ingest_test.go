package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"openxet/store"
	"openxet/xet"
)

// seeded is the "random" input rule of testdata/capture/chunks.py:
// SHA-256(seed + ":" + block index) blocks.
func seeded(seed string, size int) []byte {
	out := make([]byte, 0, size+32)
	for i := 0; len(out) < size; i++ {
		s := sha256.Sum256(fmt.Appendf(nil, "%s:%d", seed, i))
		out = append(out, s[:]...)
	}
	return out[:size]
}

func ingest(tb testing.TB, s *store.Store, tenant string, data []byte, opt Options) Stored {
	tb.Helper()
	if opt.SizeBytes == 0 {
		opt.SizeBytes = int64(len(data))
	}
	if opt.DefaultQuotaBytes == 0 {
		opt.DefaultQuotaBytes = store.Unlimited
	}
	f, err := File(context.Background(), s, tenant, bytes.NewReader(data), opt)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestIngestFileHashIsHFXets ingests inputs whose hf_xet file hashes are in
// testdata/vectors/chunks.json and checks the registered file.
func TestIngestFileHashIsHFXets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors", "chunks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cases []struct {
			Name, Kind, Seed string
			FileHash         string `json:"file_hash"`
			Size             int
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	n := 0
	for _, tc := range v.Cases {
		if tc.Kind != "random" || tc.Size == 0 {
			continue
		}
		n++
		data := seeded(tc.Seed, tc.Size)
		sum := sha256.Sum256(data)
		got := ingest(t, s, "alice", data, Options{SHA256: &sum})
		if got.Hash.String() != tc.FileHash || got.SizeBytes != int64(tc.Size) || got.SHA256 != sum {
			t.Fatalf("%s: ingested %s (%d bytes, sha256 %x), hf_xet %s (%d bytes, %x)", tc.Name, got.Hash, got.SizeBytes, got.SHA256, tc.FileHash, tc.Size, sum)
		}
		f, err := s.FileBySHA256(ctx, "alice", fmt.Sprintf("%x", sum))
		if err != nil || f.Hash != got.Hash || f.SizeBytes != uint64(tc.Size) {
			t.Fatalf("%s: FileBySHA256 = %+v, %v; want file %s of %d bytes", tc.Name, f, err, got.Hash, tc.Size)
		}
	}
	if n < 5 {
		t.Fatalf("only %d random cases in chunks.json", n)
	}
}

// TestIngestDedups stores the same bytes again (nothing new), for another
// tenant (nothing new with global dedup, its own copy without), and bytes
// a Xet upload stored first with another xorb grouping (nothing new).
func TestIngestDedups(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	data := seeded("dedup", 3<<20+5)
	first := ingest(t, s, "alice", data, Options{})
	if first.NewXorbs != 1 || first.NewBytes < int64(len(data)) {
		t.Fatalf("first ingest: %+v, want one new xorb holding the %d bytes", first, len(data))
	}
	usage, _ := s.Usage(ctx, "alice")
	again := ingest(t, s, "alice", data, Options{})
	if again.Hash != first.Hash || again.NewBytes != 0 {
		t.Fatalf("second ingest: %+v, want the same file and no new bytes", again)
	}
	if u, _ := s.Usage(ctx, "alice"); u != usage {
		t.Fatalf("usage after the second ingest %d, want %d", u, usage)
	}
	if bob := ingest(t, s, "bob", data, Options{DedupGlobal: true}); bob.NewBytes != 0 {
		t.Fatalf("bob with global dedup: %+v, want no new bytes", bob)
	}
	if carol := ingest(t, s, "carol", data, Options{}); carol.NewBytes != first.NewBytes {
		t.Fatalf("carol with tenant dedup: %+v, want her own %d bytes", carol, first.NewBytes)
	}

	// A Xet upload of other bytes in two xorbs split where hf_xet would not,
	// then the same bytes through IngestFile.
	other := append(seeded("xet-first", 2<<20), data[:1<<20]...)
	cr := xet.NewChunkReader(bytes.NewReader(other), nil)
	var chunks [][]byte
	for {
		c, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, bytes.Clone(c))
	}
	f := putFile(t, s, "dave", store.Unlimited, chunks[:5], chunks[5:])
	got := ingest(t, s, "dave", other, Options{})
	if got.Hash != f.Hash || got.NewBytes != 0 {
		t.Fatalf("ingest after the Xet upload: %+v, want file %s and no new bytes", got, f.Hash)
	}
}

// TestIngestRefusals: a stream that is not what the options say, or over
// the quota, registers no file.
func TestIngestRefusals(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	data := seeded("refuse", 200_000)
	sum := sha256.Sum256(data)
	wrong := sha256.Sum256(data[1:])
	for _, tc := range []struct {
		name string
		opt  Options
		want error
	}{
		{"sha256", Options{SizeBytes: int64(len(data)), SHA256: &wrong}, xet.ErrHashMismatch},
		{"shorter", Options{SizeBytes: int64(len(data)) + 1}, xet.ErrHashMismatch},
		{"longer", Options{SizeBytes: int64(len(data)) - 1}, xet.ErrHashMismatch},
	} {
		tc.opt.DefaultQuotaBytes = store.Unlimited
		_, err := File(ctx, s, "alice", bytes.NewReader(data), tc.opt)
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := s.FileBySHA256(ctx, "alice", fmt.Sprintf("%x", sum)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused stream registered a file: %v", err)
	}
	// Within one xorb, the checks come before anything is stored.
	if u, _ := s.Usage(ctx, "alice"); u != 0 {
		t.Fatalf("alice's usage after the refused streams: %d, want 0", u)
	}
	if err := s.PutTenantLimits(ctx, "bob", []byte(`{"quota_bytes":1000}`), ptr(int64(1000))); err != nil {
		t.Fatal(err)
	}
	_, err := File(ctx, s, "bob", bytes.NewReader(data), Options{SizeBytes: -1, DefaultQuotaBytes: store.Unlimited})
	if oq, ok := errors.AsType[*store.OverQuotaError](err); !ok || oq.Tenant != "bob" {
		t.Fatalf("over quota: %v, want *store.OverQuotaError", err)
	}
	if u, _ := s.Usage(ctx, "bob"); u != 0 {
		t.Fatalf("bob's usage after the refusal: %d", u)
	}
	boom := errors.New("boom")
	_, err = File(ctx, s, "alice", io.MultiReader(bytes.NewReader(data), &failing{boom}), Options{SizeBytes: -1, DefaultQuotaBytes: store.Unlimited})
	if !errors.Is(err, boom) {
		t.Fatalf("a failing reader: %v, want its error", err)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// TestIngestBufferFitsOneXorbShare: what an ingestion holds never passes
// xet.MaxXorbBytes, the most a credential's memory share is sure to hold,
// and shrinks with the stream.
func TestIngestBufferFitsOneXorbShare(t *testing.T) {
	for _, size := range []int64{-1, 0, 1, 100_000, 1 << 20, 64 << 20, 1 << 30, 1 << 40} {
		n := BufferBytes(size)
		if n > xet.MaxXorbBytes || n < xet.ChunkReaderBufBytes {
			t.Errorf("BufferBytes(%d) = %d, want within [%d, %d]", size, n, xet.ChunkReaderBufBytes, xet.MaxXorbBytes)
		}
		if size >= 0 && size < 1<<20 && n > size+2<<20 {
			t.Errorf("BufferBytes(%d) = %d, more than a small stream needs", size, n)
		}
	}
}

// BenchmarkIngestFile ingests 64 MiB of new random bytes into a file://
// bucket: the server's work per byte of an LFS basic upload.
func BenchmarkIngestFile(b *testing.B) {
	dir := b.TempDir()
	s := mustOpen(b, dir, fileBucket(dir))
	buf := make([]byte, BufferBytes(64<<20))
	b.SetBytes(64 << 20)
	b.ReportAllocs()
	data := seeded("bench", 64<<20)
	for i := 0; b.Loop(); i++ {
		for j := 0; j < len(data); j += 4096 {
			data[j] = byte(i) // new bytes each round, in a fraction of the time
		}
		if _, err := File(context.Background(), s, "alice", bytes.NewReader(data), Options{SizeBytes: -1, DefaultQuotaBytes: store.Unlimited, Buffer: buf}); err != nil {
			b.Fatal(err)
		}
	}
}

// watchedReader fails the test when it is read while work is held.
type watchedReader struct {
	t    *testing.T
	r    io.Reader
	held *int
}

func (w *watchedReader) Read(p []byte) (int, error) {
	if *w.held != 0 {
		w.t.Errorf("the stream was read while %d work sections were held", *w.held)
	}
	return w.r.Read(p[:min(len(p), 50_000)])
}

// TestIngestHoldsWorkOnlyBetweenReads: Options.Work is held while
// chunks already read are processed, never across a read, and given back
// at the end, also when the work is refused.
func TestIngestHoldsWorkOnlyBetweenReads(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	data := seeded("work", 3<<20)
	held, calls := 0, 0
	work := func() (func(), error) {
		held++
		calls++
		return func() { held-- }, nil
	}
	_, err := File(context.Background(), s, "alice", &watchedReader{t: t, r: bytes.NewReader(data), held: &held},
		Options{SizeBytes: int64(len(data)), DefaultQuotaBytes: store.Unlimited, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 2 || held != 0 {
		t.Fatalf("work taken %d times, %d still held; want several, none left", calls, held)
	}
	busy := errors.New("busy")
	_, err = File(context.Background(), s, "bob", bytes.NewReader(data), Options{SizeBytes: -1, DefaultQuotaBytes: store.Unlimited,
		Work: func() (func(), error) { return nil, busy }})
	if !errors.Is(err, busy) {
		t.Fatalf("refused work: %v, want its error", err)
	}
	if u, _ := s.Usage(context.Background(), "bob"); u != 0 {
		t.Fatalf("bob's usage after refused work: %d", u)
	}
}

// TestIngestRefusesAnotherXetHash: a stream whose Xet hash is not the one
// asked for is refused with xet.ErrHashMismatch and registers nothing; with
// the right hash it registers the file under that hash.
func TestIngestRefusesAnotherXetHash(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, fileBucket(dir))
	ctx := context.Background()
	data := seeded("xet-hash", 120_000)
	probe := mustOpen(t, t.TempDir(), fileBucket(t.TempDir()))
	want, err := File(ctx, probe, "x", bytes.NewReader(data), Options{SizeBytes: int64(len(data)), DefaultQuotaBytes: store.Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	wrong := want.Hash
	wrong[0] ^= 1
	_, err = File(ctx, s, "mirror", bytes.NewReader(data), Options{SizeBytes: int64(len(data)), XetHash: &wrong, DefaultQuotaBytes: store.Unlimited})
	if !errors.Is(err, xet.ErrHashMismatch) {
		t.Fatalf("ingest with another Xet hash: %v, want ErrHashMismatch", err)
	}
	for _, h := range []xet.Hash{want.Hash, wrong} {
		if _, err := s.File(ctx, "mirror", h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("file %s after the refusal: %v, want ErrNotFound", h, err)
		}
	}
	got, err := File(ctx, s, "mirror", bytes.NewReader(data), Options{SizeBytes: int64(len(data)), XetHash: &want.Hash, DefaultQuotaBytes: store.Unlimited})
	if err != nil || got.Hash != want.Hash {
		t.Fatalf("ingest with its own Xet hash: %v %s", err, got.Hash)
	}
}
