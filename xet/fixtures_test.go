package xet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"slices"
	"testing"
)

// TestFixtures checks everything the stock client uploaded (captured by
// testdata/capture/capture.py): every xorb validates under the hash in its
// file name; every shard parses; every CAS block matches its xorb; every
// file's terms, verification entries and file hash check out against the
// captured xorbs; SHA-256 metadata, sizes and file hashes agree with
// files.json; and every file reassembled through Reconstruct has the
// SHA-256 of its input.
func TestFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			if len(fx.xorbs) == 0 || len(fx.shards) == 0 {
				t.Fatalf("%d xorbs, %d shards captured", len(fx.xorbs), len(fx.shards))
			}
			lists := map[Hash][]XorbChunk{}
			streams := map[Hash][]byte{}
			for h, body := range fx.xorbs {
				info, err := ParseXorb(body, h)
				if err != nil {
					t.Fatalf("xorb %s: %v", h, err)
				}
				if info.HadFooter || info.StreamLen != int64(len(body)) {
					t.Errorf("xorb %s: HadFooter %v StreamLen %d of %d (%s uploads no footer)",
						h, info.HadFooter, info.StreamLen, len(body), fx.client)
				}
				if info.StreamCRC32 != crc32.ChecksumIEEE(body) {
					t.Errorf("xorb %s: StreamCRC32 %08x, CRC-32 of the body %08x", h, info.StreamCRC32, crc32.ChecksumIEEE(body))
				}
				lists[h], streams[h] = info.Chunks, body
				t.Logf("xorb %s: %d bytes, %d chunks, %d uncompressed, schemes %v",
					h, len(body), len(info.Chunks), info.UncompressedSize(), schemeCounts(body))
			}
			byHash := map[Hash]fixtureFile{}
			for _, f := range fx.files {
				byHash[mustHash(t, f.XetHash)] = f
			}
			seen := map[Hash]bool{}
			for sname, body := range fx.shards {
				s, err := ParseShard(body)
				if err != nil {
					t.Fatalf("shard %s: %v", sname, err)
				}
				if s.Footer != nil {
					t.Errorf("shard %s has a footer; %s should upload none", sname, fx.client)
				}
				// hf_xet 1.1.6 to 1.2.0 write footer_size 200 in the
				// header and send no footer; MarshalUpload writes 0.
				want := body
				if fs := binary.LittleEndian.Uint64(body[40:]); fs != 0 {
					t.Logf("shard %s: header footer_size %d, %d bytes, no footer", sname, fs, len(body))
					want = slices.Clone(body)
					binary.LittleEndian.PutUint64(want[40:], 0)
				}
				if got := s.MarshalUpload(); string(got) != string(want) {
					t.Errorf("shard %s: MarshalUpload does not reproduce the upload", sname)
				}
				for _, c := range s.Xorbs {
					cl, ok := lists[c.Xorb]
					if !ok {
						t.Fatalf("shard %s: CAS block for uncaptured xorb %s", sname, c.Xorb)
					}
					if err := CheckCASInfo(c, cl); err != nil {
						t.Errorf("shard %s: %v", sname, err)
					}
					for i, ch := range c.Chunks {
						if ch.Flags&ChunkFlagGlobalDedup != 0 && !DedupEligible(ch.Hash) {
							t.Logf("shard %s: xorb %s chunk %d flagged global-dedup but hash rule says no", sname, c.Xorb, i)
						}
					}
				}
				for _, f := range s.Files {
					if err := CheckFile(f, lookupIn(lists)); err != nil {
						t.Errorf("shard %s: %v", sname, err)
					}
					if f.Verification == nil {
						t.Errorf("file %s has no verification entries", f.Hash)
					}
					want, ok := byHash[f.Hash]
					if !ok {
						t.Errorf("shard %s: file %s not in files.json", sname, f.Hash)
						continue
					}
					seen[f.Hash] = true
					switch {
					case f.SHA256 == nil:
						t.Errorf("%s: no SHA-256 metadata ext", want.Path)
					case want.Size == 0:
						// hf_xet registers an empty file with the zero file
						// hash, no terms, and an all-zero SHA-256 (not the
						// SHA-256 of empty input).
						if !f.SHA256.IsZero() || !f.Hash.IsZero() || len(f.Terms) != 0 {
							t.Errorf("%s: empty file registered as %+v (sha256 %v)", want.Path, f, f.SHA256)
						}
					case f.SHA256.String() != want.SHA256:
						t.Errorf("%s: SHA-256 ext %s, files.json %s", want.Path, f.SHA256, want.SHA256)
					}
					if f.Size() != want.Size {
						t.Errorf("%s: terms hold %d bytes, file is %d", want.Path, f.Size(), want.Size)
					}
					rec, err := Reconstruct(f.Terms, 0, f.Size(), lookupIn(lists))
					if err != nil {
						t.Fatalf("%s: Reconstruct: %v", want.Path, err)
					}
					data := download(t, rec, streams, f.Size())
					sum := sha256.Sum256(data)
					if got := hex.EncodeToString(sum[:]); got != want.SHA256 {
						t.Errorf("%s: reassembled data has sha256 %s, want %s", want.Path, got, want.SHA256)
					}
					t.Logf("file %s (%s): %d bytes, %d terms, flags %#x", f.Hash, want.Path, f.Size(), len(f.Terms), f.Flags)
				}
			}
			for h, f := range byHash {
				if !seen[h] {
					t.Errorf("%s (%s) is in no shard", f.Path, h)
				}
			}
		})
	}
}

// schemeCounts walks a chunk stream and counts compression schemes.
func schemeCounts(body []byte) map[byte]int {
	m := map[byte]int{}
	for off := 0; off+ChunkHeaderBytes <= len(body); {
		if string(body[off:off+7]) == "XETBLOB" {
			break
		}
		m[body[off+4]]++
		off += ChunkHeaderBytes + (int(body[off+1]) | int(body[off+2])<<8 | int(body[off+3])<<16)
	}
	return m
}
