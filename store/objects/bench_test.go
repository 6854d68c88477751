package objects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"gocloud.dev/blob"
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
	s := mustOpen(b, FileBucketURL(filepath.Join(dir, "bucket")), lockBeside(dir))
	b.Run("WriteAll", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.WriteAll(ctx, "xorbs/default/bench", data, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writeObject", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Write(ctx, "xorbs/default/bench", data, typeBinary, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListKeys lists n owner records (xorb-owners/{xorb}/{tenant},
// one directory per xorb) of a file:// bucket: with listKeys (one walk of
// its own, list.go), and through fileblob with gocloud's
// iterator (pages of 1,000) and with pages of 100,000. fileblob walks the
// whole tree again for every page, so the iterator's time per key grows
// with n.
//
//	go test -run '^$' -bench ListKeys -benchtime 3x ./store/objects/
func BenchmarkListKeys(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{5_000, 20_000} {
		dir := b.TempDir()
		bucket, err := Open(ctx, FileBucketURL(dir), "")
		if err != nil {
			b.Fatal(err)
		}
		defer bucket.Close()
		for i := range n {
			if err := bucket.WriteAll(ctx, prefixXorbOwners+fmt.Sprintf("%064x", i)+"/bench", []byte("{}"), nil); err != nil {
				b.Fatal(err)
			}
		}
		list := map[string]func() (int, error){
			"listKeys": func() (int, error) {
				keys, err := bucket.ListKeys(ctx, prefixXorbOwners)
				return len(keys), err
			},
			"fileblob-pages=100000": func() (int, error) {
				keys, err := (&Bucket{b: bucket.b}).ListKeys(ctx, prefixXorbOwners) // no dir: through fileblob
				return len(keys), err
			},
			"fileblob-iterator": func() (int, error) {
				it := bucket.List(&blob.ListOptions{Prefix: prefixXorbOwners})
				for k := 0; ; k++ {
					if _, err := it.Next(ctx); err != nil {
						if errors.Is(err, io.EOF) {
							return k, nil
						}
						return k, err
					}
				}
			},
		}
		for _, name := range []string{"fileblob-iterator", "fileblob-pages=100000", "listKeys"} {
			b.Run(fmt.Sprintf("%s/keys=%d", name, n), func(b *testing.B) {
				for b.Loop() {
					got, err := list[name]()
					if err != nil || got != n {
						b.Fatalf("listed %d keys (%v), want %d", got, err, n)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			})
		}
	}
}
