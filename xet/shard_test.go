package xet

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// testShard returns a shard with two files over two built xorbs, with
// verification entries and SHA-256 ext, as hf_xet would upload it.
func testShard(t testing.TB) (*Shard, map[Hash][]XorbChunk) {
	_, x1 := BuildXorb([][]byte{randBytes(1, 5000), randBytes(2, 7000), randBytes(3, 100)}, false)
	_, x2 := BuildXorb([][]byte{textBytes(4, 9000), randBytes(5, 3000)}, true)
	lists := map[Hash][]XorbChunk{x1.Hash: x1.Chunks, x2.Hash: x2.Chunks}
	mkFile := func(terms []Term, sha byte) FileInfo {
		f := FileInfo{Terms: terms, Flags: FileFlagVerification | FileFlagMetadataExt}
		var a AggregatedHasher
		for _, tm := range terms {
			cl := lists[tm.Xorb][tm.ChunkStart:tm.ChunkEnd]
			var hs []Hash
			for _, c := range cl {
				a.Add(Leaf{c.Hash, uint64(c.Size)})
				hs = append(hs, c.Hash)
			}
			f.Verification = append(f.Verification, RangeHash(hs))
		}
		f.Hash = a.FileHash()
		f.SHA256 = &Hash{sha, 1, 2, 3}
		return f
	}
	s := &Shard{
		Files: []FileInfo{
			mkFile([]Term{{Xorb: x1.Hash, UnpackedBytes: 12000, ChunkStart: 0, ChunkEnd: 2}}, 1),
			mkFile([]Term{
				{Xorb: x2.Hash, UnpackedBytes: 12000, ChunkStart: 0, ChunkEnd: 2},
				{Xorb: x1.Hash, UnpackedBytes: 7100, ChunkStart: 1, ChunkEnd: 3},
			}, 2),
		},
		Xorbs: []CASInfo{CASInfoFromXorb(x1), CASInfoFromXorb(x2)},
	}
	for i := range s.Xorbs {
		s.Xorbs[i].NumBytesOnDisk = 0 // as hf_xet writes it
	}
	return s, lists
}

func TestShardRoundTrip(t *testing.T) {
	full, _ := testShard(t)
	noVerif := &Shard{Files: slices.Clone(full.Files), Xorbs: full.Xorbs}
	for i := range noVerif.Files {
		noVerif.Files[i].Verification = nil
		noVerif.Files[i].SHA256 = nil
		noVerif.Files[i].Flags = 0
	}
	tests := []struct {
		name  string
		shard *Shard
	}{
		{"empty", &Shard{}},
		{"files and xorbs", full},
		{"no verification, no sha256", noVerif},
		{"xorbs only", &Shard{Xorbs: full.Xorbs}},
		{"empty file", &Shard{Files: []FileInfo{{Flags: FileFlagVerification | FileFlagMetadataExt, Terms: []Term{}, Verification: []Hash{}, SHA256: &Hash{}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.shard.MarshalUpload()
			if len(body)%ShardEntryBytes != 0 {
				t.Fatalf("body is %d bytes", len(body))
			}
			got, err := ParseShard(body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.shard, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if again := got.MarshalUpload(); string(again) != string(body) {
				t.Error("MarshalUpload(ParseShard(b)) != b")
			}
		})
	}
}

func TestMarshalUploadFlags(t *testing.T) {
	// Flag bits follow Verification/SHA256, whatever Flags says; other bits stay.
	s := &Shard{Files: []FileInfo{{Flags: FileFlagVerification | 5, Terms: []Term{{ChunkStart: 0, ChunkEnd: 1}}, SHA256: &Hash{9}}}}
	got, err := ParseShard(s.MarshalUpload())
	if err != nil {
		t.Fatal(err)
	}
	f := got.Files[0]
	if f.Flags != FileFlagMetadataExt|5 || f.Verification != nil || f.SHA256 == nil || *f.SHA256 != (Hash{9}) {
		t.Errorf("got flags %#x verification %v sha %v", f.Flags, f.Verification, f.SHA256)
	}
	// A short Verification list is padded to one entry per term.
	s = &Shard{Files: []FileInfo{{Terms: []Term{{ChunkEnd: 1}, {ChunkEnd: 2}}, Verification: []Hash{{1}}}}}
	got, err = ParseShard(s.MarshalUpload())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Hash{{1}, {}}, got.Files[0].Verification); diff != "" {
		t.Errorf("verification (-want +got):\n%s", diff)
	}
}

func TestParseShardErrors(t *testing.T) {
	full, _ := testShard(t)
	good := full.MarshalUpload()
	mixed := &Shard{Files: slices.Clone(full.Files)}
	mixed.Files[1].Verification = nil
	// Offsets into good: header 48; file 0 header at 48 (1 term, 1 verif, 1 ext).
	const file0 = 48
	put32 := func(b []byte, off int, v uint32) []byte {
		b = slices.Clone(b)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	dedup := BuildDedupShard(full.Xorbs, [32]byte{}, time.Unix(1000, 0), time.Unix(2000, 0))
	fo := len(dedup) - ShardFooterBytes
	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"empty", nil, ErrInvalidShard},
		{"too large", make([]byte, MaxShardBytes+1), ErrTooLarge},
		{"truncated header", good[:47], ErrInvalidShard},
		{"bad tag", func() []byte { b := slices.Clone(good); b[3] ^= 1; return b }(), ErrInvalidShard},
		{"version 1", put32(good, 32, 1), ErrInvalidShard},
		{"version 3", put32(good, 32, 3), ErrInvalidShard},
		{"footer size 100", put32(good, 40, 100), ErrInvalidShard},
		{"footer size 0 with a footer", put32(dedup, 40, 0), ErrInvalidShard},
		{"footer size 200, one entry after the bookend", append(put32(good, 40, 200), make([]byte, 48)...), ErrInvalidShard},
		{"footer size 200, 199 bytes after the bookend", append(put32(good, 40, 200), make([]byte, 199)...), ErrInvalidShard},
		{"footer size 200, zeros for a footer", append(put32(good, 40, 200), make([]byte, 200)...), ErrInvalidShard},
		{"footer size 200, truncated in CAS section", put32(good, 40, 200)[:len(good)-48], ErrInvalidShard},
		{"header only", good[:48], ErrInvalidShard},
		{"truncated in file section", good[:48+48*2], ErrInvalidShard},
		{"truncated mid entry", good[:48+48*2+20], ErrInvalidShard},
		{"truncated before CAS bookend", good[:len(good)-48], ErrInvalidShard},
		{"trailing bytes", append(slices.Clone(good), 0), ErrInvalidShard},
		{"trailing entry", append(slices.Clone(good), make([]byte, 48)...), ErrInvalidShard},
		{"file count larger than body", put32(good, file0+36, 0xFFFFFFFF), ErrInvalidShard},
		{"file count one too many", put32(good, file0+36, 2), ErrInvalidShard},
		{"CAS count larger than body", func() []byte {
			s := &Shard{Xorbs: full.Xorbs}
			return put32(s.MarshalUpload(), 48+48+36, 0xFFFFFFFF)
		}(), ErrInvalidShard},
		{"mixed verification", mixed.MarshalUpload(), ErrInvalidShard},
		{"empty term range", (&Shard{Files: []FileInfo{{Terms: []Term{{ChunkStart: 3, ChunkEnd: 3}}}}}).MarshalUpload(), ErrInvalidShard},
		{"reversed term range", (&Shard{Files: []FileInfo{{Terms: []Term{{ChunkStart: 4, ChunkEnd: 3}}}}}).MarshalUpload(), ErrInvalidShard},
		{"footer version", put32(dedup, fo, 2), ErrInvalidShard},
		{"footer offset", put32(dedup, fo+192, uint32(fo-1)), ErrInvalidShard},
		{"footer file_info_offset", put32(dedup, fo+8, 0), ErrInvalidShard},
		{"footer cas_info_offset", put32(dedup, fo+16, 48), ErrInvalidShard},
		{"chunk lookup count past footer", put32(dedup, fo+64, 0xFFFFFFFF), ErrInvalidShard},
		{"xorb lookup offset before CAS end", put32(dedup, fo+40, 96), ErrInvalidShard},
		{"file lookup offset past footer", put32(put32(dedup, fo+24, uint32(len(dedup))), fo+32, 1), ErrInvalidShard},
		{"dedup shard without its footer", dedup[:fo], ErrInvalidShard},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseShard(tt.body)
			wantKind(t, err, tt.want)
			if s != nil {
				t.Errorf("shard returned with error: %+v", s)
			}
		})
	}
}

// hf_xet 1.1.6 to 1.2.0 write footer_size 200 in the header and end the
// shard at the CAS bookend: it parses as the same shard without footer
// (captured: testdata/small-hf_xet-1.1.6, small-hf_xet-1.2.0).
func TestParseShardFooterSizeWithoutFooter(t *testing.T) {
	full, _ := testShard(t)
	good := full.MarshalUpload()
	want, err := ParseShard(good)
	if err != nil {
		t.Fatal(err)
	}
	body := slices.Clone(good)
	binary.LittleEndian.PutUint64(body[40:], ShardFooterBytes)
	got, err := ParseShard(body)
	if err != nil {
		t.Fatal(err)
	}
	if got.Footer != nil {
		t.Errorf("footer %+v parsed from a shard that has none", got.Footer)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shard (-footer_size 0 +footer_size 200):\n%s", diff)
	}
	// Empty sections too: header, two bookends.
	empty := (&Shard{}).MarshalUpload()
	binary.LittleEndian.PutUint64(empty[40:], ShardFooterBytes)
	if s, err := ParseShard(empty); err != nil || len(s.Files)+len(s.Xorbs) != 0 || s.Footer != nil {
		t.Errorf("empty shard with footer_size 200: %+v, %v", s, err)
	}
}

// Huge entry counts are refused before anything is allocated for them.
func TestParseShardCountAllocations(t *testing.T) {
	body := (&Shard{Files: []FileInfo{{Terms: []Term{{ChunkEnd: 1}}}}}).MarshalUpload()
	binary.LittleEndian.PutUint32(body[48+36:], 0xFFFFFFFF)
	binary.LittleEndian.PutUint32(body[48+32:], FileFlagVerification)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseShard(body)
	runtime.ReadMemStats(&after)
	wantKind(t, err, ErrInvalidShard)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("ParseShard allocated %d bytes", n)
	}
}

func TestDedupShard(t *testing.T) {
	full, _ := testShard(t)
	now, expiry := time.Unix(1_760_000_000, 0), time.Unix(1_760_000_000+14*24*3600, 0)
	for _, key := range [][32]byte{{}, {7, 7, 7}} {
		name := "unkeyed"
		if key != ([32]byte{}) {
			name = "keyed"
		}
		t.Run(name, func(t *testing.T) {
			body := BuildDedupShard(full.Xorbs, key, now, expiry)
			s, err := ParseShard(body)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Files) != 0 || s.Footer == nil {
				t.Fatalf("files %d, footer %v", len(s.Files), s.Footer)
			}
			want := slices.Clone(full.Xorbs)
			for i := range want {
				want[i].Chunks = slices.Clone(want[i].Chunks)
				for j := range want[i].Chunks {
					if key != ([32]byte{}) {
						want[i].Chunks[j].Hash = KeyedChunkHash(key, want[i].Chunks[j].Hash)
					}
				}
			}
			if diff := cmp.Diff(want, s.Xorbs); diff != "" {
				t.Errorf("CAS blocks (-want +got):\n%s", diff)
			}
			nChunks := 0
			var stored uint64
			for _, x := range full.Xorbs {
				nChunks += len(x.Chunks)
				stored += uint64(x.NumBytesInXorb)
			}
			tables := uint64(48 + 48 + 48*(len(full.Xorbs)+nChunks) + 48)
			wantFooter := ShardFooter{
				Version: 1, FileInfoOffset: 48, CASInfoOffset: 96,
				FileLookupOffset: tables, XorbLookupOffset: tables, XorbLookupNumEntry: uint64(len(full.Xorbs)),
				ChunkLookupOffset: tables + 12*uint64(len(full.Xorbs)), ChunkLookupNumEntry: uint64(nChunks),
				ChunkHashKey: key, CreatedUnix: uint64(now.Unix()), ExpiryUnix: uint64(expiry.Unix()),
				StoredBytes: stored, FooterOffset: uint64(len(body) - 200),
			}
			if diff := cmp.Diff(&wantFooter, s.Footer); diff != "" {
				t.Errorf("footer (-want +got):\n%s", diff)
			}
			if wantFooter.FooterOffset != tables+12*uint64(len(full.Xorbs))+16*uint64(nChunks) {
				t.Errorf("tables are not contiguous up to the footer")
			}
			checkLookupTables(t, body, s)
		})
	}
	t.Run("no xorbs, times before epoch", func(t *testing.T) {
		body := BuildDedupShard(nil, [32]byte{}, time.Unix(-5, 0), time.Time{})
		s, err := ParseShard(body)
		if err != nil {
			t.Fatal(err)
		}
		if s.Footer.CreatedUnix != 0 || s.Footer.ExpiryUnix != 0 || len(s.Xorbs) != 0 || len(body) != 48*3+200 {
			t.Errorf("footer %+v, %d bytes", s.Footer, len(body))
		}
	})
}

// checkLookupTables reads the xorb and chunk lookup tables of a shard with
// footer: sorted by key, and every entry points at the entry it names.
func checkLookupTables(t *testing.T, body []byte, s *Shard) {
	t.Helper()
	f := s.Footer
	var prev uint64
	for i := range f.XorbLookupNumEntry {
		e := body[f.XorbLookupOffset+12*i:]
		key, idx := le64(e), le32(e[8:])
		if i > 0 && key < prev {
			t.Errorf("xorb lookup not sorted at %d", i)
		}
		prev = key
		at := f.CASInfoOffset + 48*uint64(idx)
		if got := le64(body[at:]); got != key {
			t.Errorf("xorb lookup %d: index %d holds key %x, want %x", i, idx, got, key)
		}
	}
	prev = 0
	for i := range f.ChunkLookupNumEntry {
		e := body[f.ChunkLookupOffset+16*i:]
		key, idx, pos := le64(e), le32(e[8:]), le32(e[12:])
		if i > 0 && key < prev {
			t.Errorf("chunk lookup not sorted at %d", i)
		}
		prev = key
		at := f.CASInfoOffset + 48*uint64(idx+1+pos)
		if got := le64(body[at:]); got != key {
			t.Errorf("chunk lookup %d: (%d, %d) holds key %x, want %x", i, idx, pos, got, key)
		}
	}
}

// TestCheckFile: every refusal names the wrong field of the caller's file
// and carries nothing computed from the stored xorbs: no chunk hash, range
// hash or file hash the caller did not send, and no stored count or size.
func TestCheckFile(t *testing.T) {
	s, lists := testShard(t)
	good := s.Files[1]
	tests := []struct {
		name      string
		f         func(f FileInfo) FileInfo
		want      error  // for CheckFile
		wantHash  error  // for CheckFileHash
		field     string // of the *CheckError
		fieldHash string
	}{
		{"good", func(f FileInfo) FileInfo { return f }, nil, nil, "", ""},
		{"no verification", func(f FileInfo) FileInfo { f.Verification = nil; return f }, nil, nil, "", ""},
		{"wrong file hash", func(f FileInfo) FileInfo { f.Hash[0] ^= 1; return f }, ErrHashMismatch, ErrHashMismatch, FieldFileHash, FieldFileHash},
		{"wrong verification", func(f FileInfo) FileInfo {
			f.Verification = slices.Clone(f.Verification)
			f.Verification[1][5] ^= 1
			return f
		}, ErrHashMismatch, nil, FieldVerification, ""},
		{"verification count", func(f FileInfo) FileInfo { f.Verification = f.Verification[:1]; return f }, ErrInvalidShard, nil, FieldVerificationCount, ""},
		{"term past xorb end", func(f FileInfo) FileInfo {
			f.Terms = slices.Clone(f.Terms)
			f.Terms[1].ChunkEnd = 4
			return f
		}, ErrInvalidShard, ErrInvalidShard, FieldChunkRange, FieldChunkRange},
		{"unpacked bytes", func(f FileInfo) FileInfo {
			f.Terms = slices.Clone(f.Terms)
			f.Terms[1].UnpackedBytes++
			return f
		}, ErrInvalidShard, ErrInvalidShard, FieldUnpackedBytes, FieldUnpackedBytes},
		{"empty range", func(f FileInfo) FileInfo {
			f.Terms = slices.Clone(f.Terms)
			f.Terms[1].ChunkStart = f.Terms[1].ChunkEnd
			return f
		}, ErrInvalidShard, ErrInvalidShard, FieldChunkRange, FieldChunkRange},
		{"unknown xorb", func(f FileInfo) FileInfo {
			f.Terms = slices.Clone(f.Terms)
			f.Terms[0].Xorb = Hash{1}
			return f
		}, errNoXorb, errNoXorb, "", ""},
		{"empty file", func(FileInfo) FileInfo { return FileInfo{} }, nil, nil, "", ""},
		{"empty file with a hash", func(FileInfo) FileInfo { return FileInfo{Hash: Hash{1}} }, ErrHashMismatch, ErrHashMismatch, FieldFileHash, FieldFileHash},
	}
	stored := storedValues(lists, good)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f(good)
			for _, c := range []struct {
				name  string
				fn    func(FileInfo, ChunkLookup) error
				want  error
				field string
			}{{"CheckFile", CheckFile, tt.want, tt.field}, {"CheckFileHash", CheckFileHash, tt.wantHash, tt.fieldHash}} {
				err := c.fn(f, lookupIn(lists))
				switch {
				case c.want == nil && err != nil:
					t.Errorf("%s: %v", c.name, err)
				case c.want == errNoXorb:
					if !errors.Is(err, errNoXorb) {
						t.Errorf("%s: got %v, want the lookup's error", c.name, err)
					}
				case c.want != nil:
					wantCheck(t, err, c.want, c.field)
					noStoredValue(t, err, f, stored)
				}
			}
		})
	}
}

func TestCheckCASInfo(t *testing.T) {
	_, x := BuildXorb([][]byte{randBytes(1, 1000), randBytes(2, 2000), randBytes(3, 3000)}, false)
	good := CASInfoFromXorb(x)
	tests := []struct {
		name  string
		mod   func(c *CASInfo)
		want  error
		field string
	}{
		{"good", func(*CASInfo) {}, nil, ""},
		{"flags and on-disk size ignored", func(c *CASInfo) { c.Flags, c.NumBytesOnDisk, c.Chunks[0].Flags = 1, 0, 3 }, nil, ""},
		{"chunk count", func(c *CASInfo) { c.Chunks = c.Chunks[:2] }, ErrInvalidShard, FieldChunkCount},
		{"chunk hash", func(c *CASInfo) { c.Chunks[1].Hash[0] ^= 1 }, ErrHashMismatch, FieldChunkHash},
		{"chunk size", func(c *CASInfo) { c.Chunks[1].UnpackedBytes++ }, ErrInvalidShard, FieldChunkPlace},
		{"chunk offset", func(c *CASInfo) { c.Chunks[2].ByteRangeStart-- }, ErrInvalidShard, FieldChunkPlace},
		{"bytes in xorb", func(c *CASInfo) { c.NumBytesInXorb++ }, ErrInvalidShard, FieldBytesInXorb},
	}
	var secret []string // what the stored xorb says and a refusal must not
	for _, c := range x.Chunks {
		secret = append(secret, c.Hash.String())
	}
	secret = append(secret, "6000", " 3 chunks", "of 3")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			c.Chunks = slices.Clone(good.Chunks)
			tt.mod(&c)
			err := CheckCASInfo(c, x.Chunks)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCheck(t, err, tt.want, tt.field)
			var sent []string // the caller's own values may be echoed
			for _, cc := range c.Chunks {
				sent = append(sent, cc.Hash.String())
			}
			for _, v := range secret {
				if strings.Contains(err.Error(), v) && !slices.Contains(sent, v) && !(v == "6000" && c.NumBytesInXorb == 6000) {
					t.Errorf("refusal %q reveals the stored %q", err, v)
				}
			}
		})
	}
}

func TestCASInfoFromXorb(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	// Find a chunk whose hash is dedup eligible by brute force over small inputs.
	var eligible []byte
	for eligible == nil {
		c := randBytes(r.Uint64(), 16)
		if DedupEligible(ChunkHash(c)) {
			eligible = c
		}
	}
	_, x := BuildXorb([][]byte{randBytes(1, 100), eligible, randBytes(2, 50)}, false)
	c := CASInfoFromXorb(x)
	want := CASInfo{Xorb: x.Hash, NumBytesInXorb: 166, NumBytesOnDisk: uint32(x.StreamLen), Chunks: []CASChunk{
		{Hash: x.Chunks[0].Hash, ByteRangeStart: 0, UnpackedBytes: 100},
		{Hash: x.Chunks[1].Hash, ByteRangeStart: 100, UnpackedBytes: 16, Flags: ChunkFlagGlobalDedup},
		{Hash: x.Chunks[2].Hash, ByteRangeStart: 116, UnpackedBytes: 50},
	}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
