package store

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// BenchmarkObjectWrite writes a 64 MiB object to a file:// bucket (the
// store's own URL: no metadata sidecar, temporary file beside the target).
// "WriteAll" is gocloud's one-call write, which MD5-hashes the body to set
// ContentMD5 and hashes it again in the Writer to verify it; "writeObject"
// is the store's write path.
func BenchmarkObjectWrite(b *testing.B) {
	const size = 64 << 20
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	ctx := context.Background()
	dir := b.TempDir()
	s := mustOpen(b, dir, FileBucketURL(filepath.Join(dir, "bucket")))
	b.Run("WriteAll", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.bucket.WriteAll(ctx, "xorbs/default/bench", data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writeObject", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.writeObject(ctx, "xorbs/default/bench", data, typeBinary, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}
