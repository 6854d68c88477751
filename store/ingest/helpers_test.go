package ingest

import (
	"context"
	"path/filepath"
	"testing"

	"openxet/store"
	"openxet/xet"
)

// mustOpen opens a real store (a SQLite index in dir, the bucket given),
// closed when tb ends: the CAS an ingestion stores through.
func mustOpen(tb testing.TB, dir, bucket string) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), store.Config{IndexPath: filepath.Join(dir, "index.db"), BucketURL: bucket})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func fileBucket(dir string) string { return store.FileBucketURL(filepath.Join(dir, "bucket")) }

func ptr[T any](v T) *T { return &v }

// putFile uploads a file as a Xet client would, one xorb per group of
// chunks (a grouping of the uploader's choosing), and registers it with a
// shard carrying the verification entries the store requires.
func putFile(tb testing.TB, s *store.Store, tenant string, quota int64, groups ...[][]byte) xet.FileInfo {
	tb.Helper()
	ctx := context.Background()
	f := xet.FileInfo{Flags: xet.FileFlagVerification | xet.FileFlagMetadataExt, SHA256: &xet.Hash{9}}
	var (
		leaves []xet.Leaf
		xorbs  []xet.CASInfo
	)
	for _, g := range groups {
		body, info := xet.BuildXorb(g, false)
		if _, err := s.PutXorb(ctx, tenant, info, body[:info.StreamLen], quota); err != nil {
			tb.Fatal(err)
		}
		var hashes []xet.Hash
		for _, c := range info.Chunks {
			hashes = append(hashes, c.Hash)
			leaves = append(leaves, xet.Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		f.Terms = append(f.Terms, xet.Term{Xorb: info.Hash, UnpackedBytes: uint32(info.UncompressedSize()), ChunkEnd: uint32(len(hashes))})
		f.Verification = append(f.Verification, xet.RangeHash(hashes))
		xorbs = append(xorbs, xet.CASInfoFromXorb(info))
	}
	f.Hash = xet.FileHash(leaves)
	body := (&xet.Shard{Files: []xet.FileInfo{f}, Xorbs: xorbs}).MarshalUpload()
	sh, err := xet.ParseShard(body)
	if err == nil {
		err = s.VerifyShard(ctx, sh)
	}
	if err == nil {
		_, err = s.PutShard(ctx, tenant, body, sh)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return f
}
