package xet

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"
	"time"
)

// Shard limits and layout constants (docs/protocol.md §6).
const (
	// MaxShardBytes caps a serialized shard body.
	MaxShardBytes = 64<<20 + 1<<20
	// ShardEntryBytes is the size of every header, entry and bookend.
	ShardEntryBytes = 48
	// ShardFooterBytes is the size of the optional footer.
	ShardFooterBytes = 200
	// ShardVersion is the header version this package reads and writes.
	ShardVersion = 2
	// ShardFooterVersion is the footer version this package reads and writes.
	ShardFooterVersion = 1

	// FileFlagVerification (bit 31 of a file's flags): verification entries follow the terms.
	FileFlagVerification = 1 << 31
	// FileFlagMetadataExt (bit 30 of a file's flags): a metadata extension (SHA-256) follows.
	FileFlagMetadataExt = 1 << 30
	// ChunkFlagGlobalDedup (bit 31 of a CAS chunk entry's flags): the chunk is global-dedup eligible.
	ChunkFlagGlobalDedup = 1 << 31

	fileLookupEntryBytes  = 12 // trunc u64, index u32
	xorbLookupEntryBytes  = 12 // trunc u64, index u32
	chunkLookupEntryBytes = 16 // trunc u64, xorb index u32, chunk position u32
)

// shardTag is the 32-byte tag that starts every shard (docs/protocol.md §6.2). Never modified.
var shardTag = [32]byte{'H', 'F', 'R', 'e', 'p', 'o', 'M', 'e', 't', 'a', 'D', 'a', 't', 'a', 0,
	0x55, 0x69, 0x67, 0x45, 0x6a, 0x7b, 0x81, 0x57, 0x83, 0xa5, 0xbd, 0xd9, 0x5c, 0xcd, 0xd1, 0x4a, 0xa9}

// Term is one FileDataSequenceEntry (docs/protocol.md §6.3): the chunks [ChunkStart, ChunkEnd)
// of Xorb, UnpackedBytes long once decompressed.
type Term struct {
	Xorb          Hash
	Flags         uint32
	UnpackedBytes uint32
	ChunkStart    uint32
	ChunkEnd      uint32 // exclusive
}

// FileInfo is one file of a shard's file-info section (docs/protocol.md §6.3).
type FileInfo struct {
	Hash  Hash
	Flags uint32 // as stored; bits 31 and 30 agree with Verification and SHA256
	Terms []Term
	// Verification holds one range hash (docs/protocol.md §3.4) per term, or is nil when the
	// file carries no verification entries.
	Verification []Hash
	// SHA256 is the file's SHA-256 from the metadata extension, nil if
	// absent. It is stored in hash byte order: SHA256.String() gives the
	// ordinary lowercase SHA-256 hex digest of the file.
	SHA256 *Hash
}

// Size returns the file's length: the sum of its terms' UnpackedBytes.
func (f FileInfo) Size() uint64 { return FileSize(f.Terms) }

// CASChunk is one CASChunkSequenceEntry (docs/protocol.md §6.4).
type CASChunk struct {
	Hash           Hash
	ByteRangeStart uint32 // cumulative uncompressed offset of the chunk in its xorb
	UnpackedBytes  uint32
	Flags          uint32 // bit 31: ChunkFlagGlobalDedup
}

// CASInfo is one xorb's block of a shard's CAS-info section (docs/protocol.md §6.4).
type CASInfo struct {
	Xorb           Hash
	Flags          uint32
	NumBytesInXorb uint32 // sum of the chunks' uncompressed sizes
	NumBytesOnDisk uint32 // documented as the serialized length; hf_xet writes 0
	Chunks         []CASChunk
}

// CASInfoFromXorb returns the CAS-info block describing a validated xorb,
// with ChunkFlagGlobalDedup set on chunks that DedupEligible accepts.
// NumBytesOnDisk is the stored chunk stream length.
func CASInfoFromXorb(x XorbInfo) CASInfo {
	c := CASInfo{
		Xorb:           x.Hash,
		NumBytesInXorb: uint32(x.UncompressedSize()),
		NumBytesOnDisk: uint32(x.StreamLen),
		Chunks:         make([]CASChunk, len(x.Chunks)),
	}
	for i, ch := range x.Chunks {
		var flags uint32
		if DedupEligible(ch.Hash) {
			flags = ChunkFlagGlobalDedup
		}
		c.Chunks[i] = CASChunk{
			Hash:           ch.Hash,
			ByteRangeStart: uint32(ch.UncompressedEnd - uint64(ch.Size)),
			UnpackedBytes:  ch.Size,
			Flags:          flags,
		}
	}
	return c
}

// Shard is a parsed shard.
type Shard struct {
	Files  []FileInfo
	Xorbs  []CASInfo
	Footer *ShardFooter // nil when the body had no footer (what hf_xet uploads), whatever the header's footer_size
}

// ShardFooter is the 200-byte footer of docs/protocol.md §6.5. Offsets are from the start of
// the shard; lookup offsets point at tables of 12, 12 and 16-byte entries.
type ShardFooter struct {
	Version             uint64
	FileInfoOffset      uint64
	CASInfoOffset       uint64
	FileLookupOffset    uint64
	FileLookupNumEntry  uint64
	XorbLookupOffset    uint64
	XorbLookupNumEntry  uint64
	ChunkLookupOffset   uint64
	ChunkLookupNumEntry uint64
	// ChunkHashKey, when non-zero, means every chunk hash in the CAS section
	// is KeyedChunkHash(ChunkHashKey, real hash).
	ChunkHashKey      [32]byte
	CreatedUnix       uint64 // shard_creation_timestamp, Unix seconds
	ExpiryUnix        uint64 // shard_key_expiry, Unix seconds
	Reserved          [6]uint64
	StoredBytesOnDisk uint64 // sum of NumBytesOnDisk
	MaterializedBytes uint64 // sum of all terms' UnpackedBytes
	StoredBytes       uint64 // sum of NumBytesInXorb
	FooterOffset      uint64 // shard length - 200
}

// shardReader walks a body with bounds checks.
type shardReader struct {
	b   []byte
	off int
	end int // len(b): the sections end at their bookends, tables and footer follow
}

func (r *shardReader) entry() ([]byte, bool) {
	if r.end-r.off < ShardEntryBytes {
		return nil, false
	}
	e := r.b[r.off : r.off+ShardEntryBytes]
	r.off += ShardEntryBytes
	return e, true
}

// fits reports whether n more 48-byte entries fit before r.end, without
// overflowing.
func (r *shardReader) fits(n uint64) bool {
	return n <= uint64(r.end-r.off)/ShardEntryBytes
}

func isBookend(e []byte) bool {
	for _, c := range e[:32] {
		if c != 0xff {
			return false
		}
	}
	return true
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// ParseShard parses a serialized shard (docs/protocol.md §6): header (tag, version 2,
// footer_size 0 or 200), the file-info section and the CAS-info section up to
// their bookends, then either end of input or, only with footer_size 200,
// lookup tables and a footer whose offsets and table bounds must agree with
// the body (the tables themselves are not returned). A shard whose header
// says 200 but that ends at the CAS bookend (hf_xet 1.1.6 to 1.2.0 upload
// them) parses as one without footer: Footer is nil.
//
// Structural rules enforced: every file's terms have ChunkStart < ChunkEnd;
// either every file carries verification entries or none does; every entry
// count is checked against the remaining body before anything is allocated,
// so memory use stays proportional to len(body). Reserved fields are not
// checked. Whether terms match real xorbs is CheckFile's job.
//
// Errors: ErrTooLarge if len(body) > MaxShardBytes, otherwise ErrInvalidShard.
func ParseShard(body []byte) (*Shard, error) {
	if len(body) > MaxShardBytes {
		return nil, formatErr(ErrTooLarge, -1,
			"shard body is "+strconv.Itoa(len(body))+" bytes, limit "+strconv.Itoa(MaxShardBytes))
	}
	if len(body) < ShardEntryBytes {
		return nil, shardErr(0, "truncated shard header")
	}
	if !bytes.Equal(body[:32], shardTag[:]) {
		return nil, shardErr(0, "not a shard (bad header tag)")
	}
	if v := le64(body[32:]); v != ShardVersion {
		return nil, shardErr(32, "shard version "+strconv.FormatUint(v, 10)+", want 2")
	}
	footerSize := le64(body[40:])
	if footerSize != 0 && footerSize != ShardFooterBytes {
		return nil, shardErr(40, "footer size "+strconv.FormatUint(footerSize, 10)+", want 0 or 200")
	}
	// The sections end at their bookends, so they are read up to the end of
	// the body whatever the header says: hf_xet 1.1.6 to 1.2.0 write
	// footer_size 200 and still send nothing after the CAS bookend. Where
	// the sections stopped then decides: at the end of the body (no tables,
	// no footer, whatever footer_size says) or, with footer_size 200, at
	// least a footer before the end.
	r := &shardReader{b: body, off: ShardEntryBytes, end: len(body)}
	s := &Shard{}

	// File-info section.
	verified := -1 // -1 unknown, 0 none so far, 1 all so far
	for {
		at := r.off
		e, ok := r.entry()
		if !ok {
			return nil, shardErr(at, "file-info section not terminated by a bookend")
		}
		if isBookend(e) {
			break
		}
		f := FileInfo{Flags: le32(e[32:])}
		copy(f.Hash[:], e[:32])
		n := uint64(le32(e[36:]))
		hasVerif := f.Flags&FileFlagVerification != 0
		hasMeta := f.Flags&FileFlagMetadataExt != 0
		need := n
		if hasVerif {
			need += n
		}
		if hasMeta {
			need++
		}
		if !r.fits(need) {
			return nil, shardErr(at+36, "file entry count "+strconv.FormatUint(n, 10)+" runs past the end of the shard")
		}
		switch v := boolInt(hasVerif); {
		case verified == -1:
			verified = v
		case verified != v:
			return nil, shardErr(at+32, "some files have verification entries and some do not")
		}
		f.Terms = make([]Term, n)
		for i := range f.Terms {
			te, _ := r.entry()
			t := &f.Terms[i]
			copy(t.Xorb[:], te[:32])
			t.Flags = le32(te[32:])
			t.UnpackedBytes = le32(te[36:])
			t.ChunkStart = le32(te[40:])
			t.ChunkEnd = le32(te[44:])
			if t.ChunkStart >= t.ChunkEnd {
				return nil, shardErr(r.off-8, "term chunk range ["+strconv.FormatUint(uint64(t.ChunkStart), 10)+
					", "+strconv.FormatUint(uint64(t.ChunkEnd), 10)+") is empty")
			}
		}
		if hasVerif {
			f.Verification = make([]Hash, n)
			for i := range f.Verification {
				ve, _ := r.entry()
				copy(f.Verification[i][:], ve[:32])
			}
		}
		if hasMeta {
			me, _ := r.entry()
			var sha Hash
			copy(sha[:], me[:32])
			f.SHA256 = &sha
		}
		s.Files = append(s.Files, f)
	}
	fileBookendEnd := r.off

	// CAS-info section.
	for {
		at := r.off
		e, ok := r.entry()
		if !ok {
			return nil, shardErr(at, "CAS-info section not terminated by a bookend")
		}
		if isBookend(e) {
			break
		}
		c := CASInfo{
			Flags:          le32(e[32:]),
			NumBytesInXorb: le32(e[40:]),
			NumBytesOnDisk: le32(e[44:]),
		}
		copy(c.Xorb[:], e[:32])
		n := uint64(le32(e[36:]))
		if !r.fits(n) {
			return nil, shardErr(at+36, "CAS chunk count "+strconv.FormatUint(n, 10)+" runs past the end of the shard")
		}
		c.Chunks = make([]CASChunk, n)
		for i := range c.Chunks {
			ce, _ := r.entry()
			ch := &c.Chunks[i]
			copy(ch.Hash[:], ce[:32])
			ch.ByteRangeStart = le32(ce[32:])
			ch.UnpackedBytes = le32(ce[36:])
			ch.Flags = le32(ce[40:])
		}
		s.Xorbs = append(s.Xorbs, c)
	}

	switch {
	case r.off == len(body):
		return s, nil
	case footerSize == 0:
		return nil, shardErr(r.off, "bytes after the CAS-info bookend in a shard without footer")
	case len(body)-r.off < ShardFooterBytes:
		return nil, shardErr(r.off, strconv.Itoa(len(body)-r.off)+
			" bytes after the CAS-info bookend: neither the end of the shard nor room for its 200-byte footer")
	}
	ft, err := parseShardFooter(body, fileBookendEnd, r.off)
	if err != nil {
		return nil, err
	}
	s.Footer = ft
	return s, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseShardFooter reads the footer at the end of body and checks it against
// the layout: casStart is where the CAS section began, casEnd where its
// bookend ended.
func parseShardFooter(body []byte, casStart, casEnd int) (*ShardFooter, error) {
	fo := len(body) - ShardFooterBytes
	b := body[fo:]
	f := &ShardFooter{
		Version:             le64(b[0:]),
		FileInfoOffset:      le64(b[8:]),
		CASInfoOffset:       le64(b[16:]),
		FileLookupOffset:    le64(b[24:]),
		FileLookupNumEntry:  le64(b[32:]),
		XorbLookupOffset:    le64(b[40:]),
		XorbLookupNumEntry:  le64(b[48:]),
		ChunkLookupOffset:   le64(b[56:]),
		ChunkLookupNumEntry: le64(b[64:]),
		CreatedUnix:         le64(b[104:]),
		ExpiryUnix:          le64(b[112:]),
		StoredBytesOnDisk:   le64(b[168:]),
		MaterializedBytes:   le64(b[176:]),
		StoredBytes:         le64(b[184:]),
		FooterOffset:        le64(b[192:]),
	}
	copy(f.ChunkHashKey[:], b[72:104])
	for i := range f.Reserved {
		f.Reserved[i] = le64(b[120+8*i:])
	}
	switch {
	case f.Version != ShardFooterVersion:
		return nil, shardErr(fo, "footer version "+strconv.FormatUint(f.Version, 10)+", want 1")
	case f.FooterOffset != uint64(fo):
		return nil, shardErr(fo+192, "footer_offset "+strconv.FormatUint(f.FooterOffset, 10)+", footer is at "+strconv.Itoa(fo))
	case f.FileInfoOffset != ShardEntryBytes:
		return nil, shardErr(fo+8, "file_info_offset "+strconv.FormatUint(f.FileInfoOffset, 10)+", want 48")
	case f.CASInfoOffset != uint64(casStart):
		return nil, shardErr(fo+16, "cas_info_offset "+strconv.FormatUint(f.CASInfoOffset, 10)+
			", CAS section starts at "+strconv.Itoa(casStart))
	}
	tables := []struct {
		name     string
		off, num uint64
		size     uint64
		at       int
	}{
		{"file lookup", f.FileLookupOffset, f.FileLookupNumEntry, fileLookupEntryBytes, 24},
		{"xorb lookup", f.XorbLookupOffset, f.XorbLookupNumEntry, xorbLookupEntryBytes, 40},
		{"chunk lookup", f.ChunkLookupOffset, f.ChunkLookupNumEntry, chunkLookupEntryBytes, 56},
	}
	for _, t := range tables {
		if t.num == 0 {
			// An empty table may sit anywhere: @huggingface/hub writes
			// zeros for the offsets of the tables it leaves out.
			continue
		}
		if t.off < uint64(casEnd) || t.off > uint64(fo) || t.num > (uint64(fo)-t.off)/t.size {
			return nil, shardErr(fo+t.at, t.name+" table ("+strconv.FormatUint(t.num, 10)+" entries at "+
				strconv.FormatUint(t.off, 10)+") lies outside ["+strconv.Itoa(casEnd)+", "+strconv.Itoa(fo)+")")
		}
	}
	return f, nil
}

// Shard writing.

func appendShardHeader(b []byte, footerSize uint64) []byte {
	b = append(b, shardTag[:]...)
	b = binary.LittleEndian.AppendUint64(b, ShardVersion)
	return binary.LittleEndian.AppendUint64(b, footerSize)
}

func appendBookend(b []byte) []byte {
	for range 32 {
		b = append(b, 0xff)
	}
	return append(b, make([]byte, 16)...)
}

// appendEntry appends a 48-byte entry: a hash and four u32s.
func appendEntry(b []byte, h *Hash, a, c, d, e uint32) []byte {
	b = append(b, h[:]...)
	b = binary.LittleEndian.AppendUint32(b, a)
	b = binary.LittleEndian.AppendUint32(b, c)
	b = binary.LittleEndian.AppendUint32(b, d)
	return binary.LittleEndian.AppendUint32(b, e)
}

func appendFileSection(b []byte, files []FileInfo) []byte {
	for i := range files {
		f := &files[i]
		flags := f.Flags &^ (FileFlagVerification | FileFlagMetadataExt)
		if f.Verification != nil {
			flags |= FileFlagVerification
		}
		if f.SHA256 != nil {
			flags |= FileFlagMetadataExt
		}
		b = appendEntry(b, &f.Hash, flags, uint32(len(f.Terms)), 0, 0)
		for j := range f.Terms {
			t := &f.Terms[j]
			b = appendEntry(b, &t.Xorb, t.Flags, t.UnpackedBytes, t.ChunkStart, t.ChunkEnd)
		}
		if f.Verification != nil {
			for j := range f.Terms {
				var v Hash
				if j < len(f.Verification) {
					v = f.Verification[j]
				}
				b = appendEntry(b, &v, 0, 0, 0, 0)
			}
		}
		if f.SHA256 != nil {
			b = appendEntry(b, f.SHA256, 0, 0, 0, 0)
		}
	}
	return appendBookend(b)
}

// appendCASSection writes the CAS-info blocks; if key is non-zero every chunk
// hash is replaced by KeyedChunkHash(key, hash).
func appendCASSection(b []byte, xorbs []CASInfo, key [32]byte) []byte {
	keyed := key != [32]byte{}
	var kh keyedHasher
	if keyed {
		kh = newKeyedHasher(&key)
	}
	for i := range xorbs {
		x := &xorbs[i]
		b = appendEntry(b, &x.Xorb, x.Flags, uint32(len(x.Chunks)), x.NumBytesInXorb, x.NumBytesOnDisk)
		for j := range x.Chunks {
			c := &x.Chunks[j]
			h := c.Hash
			if keyed {
				h = kh.sum(h[:])
			}
			b = appendEntry(b, &h, c.ByteRangeStart, c.UnpackedBytes, c.Flags, 0)
		}
	}
	return appendBookend(b)
}

func shardBodySize(files []FileInfo, xorbs []CASInfo) int {
	n := 3 // header and two bookends
	for i := range files {
		n += 1 + len(files[i].Terms)
		if files[i].Verification != nil {
			n += len(files[i].Terms)
		}
		if files[i].SHA256 != nil {
			n++
		}
	}
	for i := range xorbs {
		n += 1 + len(xorbs[i].Chunks)
	}
	return n * ShardEntryBytes
}

// MarshalUpload serializes s the way hf_xet >= 1.3 uploads shards: header
// with footer_size 0, file-info section, CAS-info section, no lookup tables,
// no footer. s.Footer is ignored.
//
// Each file's flag bits 31 and 30 are set from whether Verification and
// SHA256 are non-nil (other bits are kept). A non-nil Verification is
// written with exactly one entry per term (missing entries as zero hashes);
// CAS blocks are written with num_entries = len(Chunks).
func (s *Shard) MarshalUpload() []byte {
	b := make([]byte, 0, shardBodySize(s.Files, s.Xorbs))
	b = appendShardHeader(b, 0)
	b = appendFileSection(b, s.Files)
	return appendCASSection(b, s.Xorbs, [32]byte{})
}

// BuildDedupShard builds the body of a GET /v1/chunks answer (docs/protocol.md §6.6): a
// header with footer_size 200, an empty file-info section, the given CAS
// blocks in order, the CAS bookend, an empty file lookup table, the xorb and
// chunk lookup tables (sorted by truncated hash), and the footer with key,
// creation time now, expiry and byte totals.
//
// If key is non-zero every chunk hash in the CAS blocks (and every chunk
// lookup key) is KeyedChunkHash(key, hash); the client then matches its own
// chunks by keyed hash. Times before the Unix epoch are written as 0.
func BuildDedupShard(xorbs []CASInfo, key [32]byte, now time.Time, expiry time.Time) []byte {
	nChunks := 0
	for i := range xorbs {
		nChunks += len(xorbs[i].Chunks)
	}
	size := shardBodySize(nil, xorbs) + len(xorbs)*xorbLookupEntryBytes + nChunks*chunkLookupEntryBytes + ShardFooterBytes
	b := make([]byte, 0, size)
	b = appendShardHeader(b, ShardFooterBytes)
	b = appendFileSection(b, nil)
	casStart := len(b)
	b = appendCASSection(b, xorbs, key)
	tablesStart := len(b)

	type xorbKey struct {
		trunc uint64
		index uint32
	}
	type chunkKey struct {
		trunc      uint64
		index, pos uint32
	}
	xk := make([]xorbKey, 0, len(xorbs))
	ck := make([]chunkKey, 0, nChunks)
	var footer ShardFooter
	index := uint32(0)
	for i := range xorbs {
		x := &xorbs[i]
		xk = append(xk, xorbKey{le64(x.Xorb[:8]), index})
		for j := range x.Chunks {
			// The stored (possibly keyed) hash of chunk j sits in its entry.
			at := casStart + int(index+1+uint32(j))*ShardEntryBytes
			ck = append(ck, chunkKey{le64(b[at : at+8]), index, uint32(j)})
		}
		index += 1 + uint32(len(x.Chunks))
		footer.StoredBytesOnDisk += uint64(x.NumBytesOnDisk)
		footer.StoredBytes += uint64(x.NumBytesInXorb)
	}
	slices.SortFunc(xk, func(a, b xorbKey) int {
		if a.trunc != b.trunc {
			return cmpU64(a.trunc, b.trunc)
		}
		return cmpU64(uint64(a.index), uint64(b.index))
	})
	slices.SortFunc(ck, func(a, b chunkKey) int {
		switch {
		case a.trunc != b.trunc:
			return cmpU64(a.trunc, b.trunc)
		case a.index != b.index:
			return cmpU64(uint64(a.index), uint64(b.index))
		}
		return cmpU64(uint64(a.pos), uint64(b.pos))
	})

	footer.Version = ShardFooterVersion
	footer.FileInfoOffset = ShardEntryBytes
	footer.CASInfoOffset = uint64(casStart)
	footer.FileLookupOffset = uint64(tablesStart)
	footer.XorbLookupOffset = uint64(tablesStart)
	footer.XorbLookupNumEntry = uint64(len(xk))
	for _, k := range xk {
		b = binary.LittleEndian.AppendUint64(b, k.trunc)
		b = binary.LittleEndian.AppendUint32(b, k.index)
	}
	footer.ChunkLookupOffset = uint64(len(b))
	footer.ChunkLookupNumEntry = uint64(len(ck))
	for _, k := range ck {
		b = binary.LittleEndian.AppendUint64(b, k.trunc)
		b = binary.LittleEndian.AppendUint32(b, k.index)
		b = binary.LittleEndian.AppendUint32(b, k.pos)
	}
	footer.ChunkHashKey = key
	footer.CreatedUnix = unixOrZero(now)
	footer.ExpiryUnix = unixOrZero(expiry)
	footer.FooterOffset = uint64(len(b))
	return appendShardFooter(b, &footer)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func unixOrZero(t time.Time) uint64 {
	if s := t.Unix(); s > 0 {
		return uint64(s)
	}
	return 0
}

func appendShardFooter(b []byte, f *ShardFooter) []byte {
	for _, v := range []uint64{f.Version, f.FileInfoOffset, f.CASInfoOffset, f.FileLookupOffset,
		f.FileLookupNumEntry, f.XorbLookupOffset, f.XorbLookupNumEntry, f.ChunkLookupOffset, f.ChunkLookupNumEntry} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, f.ChunkHashKey[:]...)
	b = binary.LittleEndian.AppendUint64(b, f.CreatedUnix)
	b = binary.LittleEndian.AppendUint64(b, f.ExpiryUnix)
	for _, v := range f.Reserved {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	for _, v := range []uint64{f.StoredBytesOnDisk, f.MaterializedBytes, f.StoredBytes, f.FooterOffset} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}
