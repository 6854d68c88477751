package xet

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"

	"github.com/pierrec/lz4/v4"
)

// Xorb limits (docs/protocol.md §5.1, docs/protocol.md §5.4).
// MaxXorbChunks caps the chunks of one xorb. hf_xet cuts xorbs at 8192
// chunks; the cap leaves room for other writers while bounding the work a
// hostile xorb of empty chunks can cause.
const MaxXorbChunks = 1 << 16

const (
	// MaxXorbBytes caps a serialized xorb body (footer included). The client
	// cuts xorbs at 64 MiB of uncompressed data, so an incompressible xorb
	// serializes to a little more; 1 MiB of slack covers 8-byte chunk
	// headers for 8192 chunks and an old client's footer.
	MaxXorbBytes = 64<<20 + 1<<20
	// MaxChunkBytes caps one chunk's uncompressed size.
	MaxChunkBytes = 128 << 10
	// MaxCompressedChunkBytes caps one chunk's compressed_size field, as the
	// client's reader does.
	MaxCompressedChunkBytes = 2 * MaxChunkBytes
	// ChunkHeaderBytes is the size of the header before each chunk's data.
	ChunkHeaderBytes = 8
)

// Compression schemes of a chunk header (docs/protocol.md §5.2).
const (
	SchemeNone       = 0 // bytes stored as-is
	SchemeLZ4        = 1 // one LZ4 frame
	SchemeBG4LZ4     = 2 // byte grouping by 4, then one LZ4 frame
	xorbFooterIdent  = "XETBLOB"
	xorbHashesIdent  = "XBLBHSH"
	xorbBoundsIdent  = "XBLBBND"
	xorbFooterV0Base = 60 // + 36 per chunk
	xorbFooterV1Base = 92 // + 40 per chunk
)

// XorbChunk describes one chunk of a validated xorb. Offsets are cumulative
// ends, so chunk i occupies serialized bytes
// [Chunks[i-1].SerializedEnd, Chunks[i].SerializedEnd) of the chunk stream
// (header included; 0 for i == 0) and uncompressed bytes
// [Chunks[i-1].UncompressedEnd, Chunks[i].UncompressedEnd) of the xorb's data.
type XorbChunk struct {
	Hash            Hash
	Size            uint32 // uncompressed bytes
	SerializedEnd   uint32 // end offset of this chunk in the chunk stream, header included
	UncompressedEnd uint64 // end offset of this chunk in the uncompressed data
}

// XorbInfo is what ParseXorb learned about a valid xorb.
type XorbInfo struct {
	Hash   Hash
	Chunks []XorbChunk
	// StreamLen is the length of the chunk stream: the body without any
	// footer. The object to store is body[:StreamLen]; fetch byte ranges
	// index into it.
	StreamLen int64
	// HadFooter reports that the upload carried a V0/V1 metadata footer
	// (clients before hf_xet 1.1.4).
	HadFooter bool
	// StreamCRC32 is the CRC-32 (IEEE) of the chunk stream, body[:StreamLen]:
	// the integrity checksum of the object's write to S3. ParseXorb sums
	// each chunk right after hashing it, while its bytes are in the CPU's
	// cache, which costs a quarter of a separate pass over the whole body
	// later (BENCHMARKS.md, "Ingest").
	StreamCRC32 uint32
}

// UncompressedSize returns the total uncompressed bytes of the xorb.
func (x XorbInfo) UncompressedSize() uint64 {
	if len(x.Chunks) == 0 {
		return 0
	}
	return x.Chunks[len(x.Chunks)-1].UncompressedEnd
}

// Leaves returns the xorb's chunks as merkle leaves.
func (x XorbInfo) Leaves() []Leaf { return chunkLeaves(x.Chunks) }

func chunkLeaves(chunks []XorbChunk) []Leaf {
	leaves := make([]Leaf, len(chunks))
	for i, c := range chunks {
		leaves[i] = Leaf{Hash: c.Hash, Size: uint64(c.Size)}
	}
	return leaves
}

// ParseXorb validates a whole serialized xorb as uploaded to
// POST /v1/xorbs (docs/protocol.md §5.5) and checks that its hash is want.
//
// It checks every chunk header (version 0, scheme 0, 1 or 2, uncompressed
// size <= MaxChunkBytes, compressed size <= MaxCompressedChunkBytes and within
// the body), decompresses LZ4 and BG4 chunks into one reused buffer capped
// at the header's uncompressed size, requires the decompressed length to
// equal the header's, and hashes every chunk. An optional V0/V1 metadata
// footer (old clients) must be well formed, agree on the chunk count and be
// followed by its u32 length; its hashes and offsets are not compared with
// the data, and it is not part of StreamLen. At least one chunk is required.
//
// Errors: ErrTooLarge if len(body) > MaxXorbBytes; ErrInvalidXorb for any
// format problem; ErrHashMismatch if the data is well formed but its
// aggregated hash is not want. On error the XorbInfo is zero.
//
// ParseXorb does not copy scheme-0 chunk data; body is only read, and the
// returned XorbInfo does not refer to it. Besides a fixed ~300 KiB of
// buffers and hashers, memory use is 48 bytes per chunk for
// XorbInfo.Chunks; as every chunk takes at least 8 bytes of body, that is
// at most 6 × len(body) for a hostile xorb of empty chunks (hf_xet writes
// at most 8192 chunks per xorb).
func ParseXorb(body []byte, want Hash) (XorbInfo, error) {
	info, err := parseXorb(body, nil)
	if err != nil {
		return XorbInfo{}, err
	}
	if info.Hash != want {
		return XorbInfo{}, formatErr(ErrHashMismatch, -1,
			"xorb hash is "+info.Hash.String()+", want "+want.String())
	}
	return info, nil
}

// parseXorb validates body and computes its hash without comparing it.
// If each is not nil it is called with every chunk's uncompressed data (which
// is only valid during the call).
func parseXorb(body []byte, each func(i int, data []byte)) (XorbInfo, error) {
	return walkXorb(body, each, true)
}

// walkXorb is parseXorb; with hashed false it checks the format and
// decodes every chunk as parseXorb does but computes no hash and no
// CRC32: the XorbInfo's hashes and StreamCRC32 are zero.
func walkXorb(body []byte, each func(i int, data []byte), hashed bool) (XorbInfo, error) {
	if len(body) > MaxXorbBytes {
		return XorbInfo{}, formatErr(ErrTooLarge, -1,
			"xorb body is "+strconv.Itoa(len(body))+" bytes, limit "+strconv.Itoa(MaxXorbBytes))
	}
	if len(body) == 0 {
		return XorbInfo{}, xorbErr(-1, "empty body")
	}
	var (
		kh       keyedHasher // only when hashed
		later    laterHashes // stored chunks hashed in batches, with kh's wide kernel
		agg      AggregatedHasher
		chunks   = make([]XorbChunk, 0, countChunkHeaders(body))
		dec      chunkDecoder
		unpacked uint64
		off      int
		info     XorbInfo
	)
	if hashed {
		kh = newKeyedHasher(&dataKey)
	}
	for off < len(body) {
		rest := body[off:]
		if len(rest) >= len(xorbFooterIdent) && string(rest[:len(xorbFooterIdent)]) == xorbFooterIdent {
			if err := checkXorbFooter(body, off, len(chunks)); err != nil {
				return XorbInfo{}, err
			}
			info.HadFooter = true
			break
		}
		if len(rest) < ChunkHeaderBytes {
			return XorbInfo{}, xorbErr(off, "truncated chunk header")
		}
		version := rest[0]
		csize := int(rest[1]) | int(rest[2])<<8 | int(rest[3])<<16
		scheme := rest[4]
		usize := int(rest[5]) | int(rest[6])<<8 | int(rest[7])<<16
		switch {
		case version != 0:
			return XorbInfo{}, xorbErr(off, "chunk header version "+strconv.Itoa(int(version))+", want 0")
		case scheme > SchemeBG4LZ4:
			return XorbInfo{}, xorbErr(off+4, "unknown compression scheme "+strconv.Itoa(int(scheme)))
		case usize > MaxChunkBytes:
			return XorbInfo{}, xorbErr(off+5, "chunk uncompressed size "+strconv.Itoa(usize)+" over limit "+strconv.Itoa(MaxChunkBytes))
		case csize > MaxCompressedChunkBytes:
			return XorbInfo{}, xorbErr(off+1, "chunk compressed size "+strconv.Itoa(csize)+" over limit "+strconv.Itoa(MaxCompressedChunkBytes))
		case csize > len(rest)-ChunkHeaderBytes:
			return XorbInfo{}, xorbErr(off+1, "chunk data ("+strconv.Itoa(csize)+" bytes) extends past the end of the body")
		}
		dataOff := off + ChunkHeaderBytes
		data, eoff, reason := dec.decode(scheme, body[dataOff:dataOff+csize], usize)
		if reason != "" {
			return XorbInfo{}, xorbErr(off+eoff, reason)
		}
		if each != nil {
			each(len(chunks), data)
		}
		chunkOff := off
		off = dataOff + csize
		unpacked += uint64(usize)
		if len(chunks) == MaxXorbChunks {
			return XorbInfo{}, xorbErr(off, "more than "+strconv.Itoa(MaxXorbChunks)+" chunks")
		}
		chunks = append(chunks, XorbChunk{
			Size:            uint32(usize),
			SerializedEnd:   uint32(off),
			UncompressedEnd: unpacked,
		})
		if hashed {
			info.StreamCRC32 = crc32.Update(info.StreamCRC32, crc32.IEEETable, body[chunkOff:off])
			if scheme == SchemeNone && kh.wide != nil {
				// data is body's own bytes, valid after this chunk.
				later.add(kh, chunks, data)
			} else {
				chunks[len(chunks)-1].Hash = kh.sum(data)
			}
		}
	}
	if len(chunks) == 0 {
		return XorbInfo{}, xorbErr(0, "xorb has no chunks")
	}
	if hashed {
		later.flush(kh, chunks)
		for _, c := range chunks {
			agg.Add(Leaf{Hash: c.Hash, Size: uint64(c.Size)})
		}
		info.Hash = agg.Sum()
	}
	info.Chunks = chunks
	info.StreamLen = int64(chunks[len(chunks)-1].SerializedEnd)
	return info, nil
}

// laterHashes holds the stored (uncompressed) chunks of a xorb whose
// hashes are still to be computed, so that the wide kernel hashes many at
// once: the tail of each chunk, and its parent nodes, fill lanes that one
// chunk alone would leave idle.
type laterHashes struct {
	index []int
	data  [][]byte
	out   [][32]byte
}

// laterBatch is how many chunks laterHashes hashes in one call: about
// 512 KiB of the stock client's chunks, still in the CPU's L2 cache from
// the walk's CRC-32 of them. 16 and 32 were no faster
// (BenchmarkParseXorbStockSizes).
const laterBatch = 8

// add queues data, the last chunk of chunks; it hashes the queue once it
// holds laterBatch chunks.
func (l *laterHashes) add(kh keyedHasher, chunks []XorbChunk, data []byte) {
	l.index = append(l.index, len(chunks)-1)
	l.data = append(l.data, data)
	if len(l.index) == laterBatch {
		l.flush(kh, chunks)
	}
}

// flush hashes the queued chunks into chunks[i].Hash.
func (l *laterHashes) flush(kh keyedHasher, chunks []XorbChunk) {
	if len(l.index) == 0 {
		return
	}
	if cap(l.out) < len(l.index) {
		l.out = make([][32]byte, laterBatch)
	}
	out := l.out[:len(l.index)]
	kh.wide.hasher().SumMany(l.data, out)
	for i, c := range l.index {
		chunks[c].Hash = out[i]
	}
	l.index, l.data = l.index[:0], l.data[:0]
}

// countChunkHeaders walks the chunk headers of body without checking or
// decoding anything and returns how many fit, as a capacity hint: one
// allocation of the chunk list instead of repeated growth.
func countChunkHeaders(body []byte) int {
	n := 0
	for off := 0; len(body)-off >= ChunkHeaderBytes && body[off] == 0; n++ {
		off += ChunkHeaderBytes + (int(body[off+1]) | int(body[off+2])<<8 | int(body[off+3])<<16)
	}
	return n
}

// checkXorbFooter validates a V0 or V1 footer starting at body[off:] and the
// u32 length after it (docs/protocol.md §5.3). numChunks is the number of chunks before it.
func checkXorbFooter(body []byte, off, numChunks int) error {
	if len(body)-off < len(xorbFooterIdent)+1+4 {
		return xorbErr(off, "truncated xorb footer")
	}
	footerLen := len(body) - off - 4
	if got := binary.LittleEndian.Uint32(body[len(body)-4:]); uint64(got) != uint64(footerLen) {
		return xorbErr(len(body)-4, "xorb footer length field is "+strconv.FormatUint(uint64(got), 10)+
			", footer is "+strconv.Itoa(footerLen)+" bytes")
	}
	f := body[off : off+footerLen]
	u32 := func(at int) uint64 { return uint64(binary.LittleEndian.Uint32(f[at:])) }
	n := uint64(numChunks)
	switch f[7] {
	case 0:
		// ident, version, xorb_hash, num_chunks, boundaries u32×n, hashes 32×n, 16-byte buffer
		if len(f) < 44 {
			return xorbErr(off, "truncated V0 xorb footer")
		}
		if u32(40) != n {
			return xorbErr(off+40, "V0 footer chunk count "+strconv.FormatUint(u32(40), 10)+", xorb has "+strconv.Itoa(numChunks))
		}
		if uint64(len(f)) != xorbFooterV0Base+36*n {
			return xorbErr(off, "V0 footer length "+strconv.Itoa(len(f))+" does not match its chunk count")
		}
		return nil
	case 1:
		if uint64(len(f)) != xorbFooterV1Base+40*n {
			return xorbErr(off, "V1 footer length "+strconv.Itoa(len(f))+" does not fit "+strconv.Itoa(numChunks)+" chunks")
		}
		// Layout with n chunks: ident(7) version(1) hash(32) | XBLBHSH(7) v(1)
		// n(4) hashes(32n) | XBLBBND(7) v(1) n(4) bounds(4n) unpacked(4n) |
		// n(4) hashes_off(4) bounds_off(4) buffer(16).
		hs := 40
		bs := hs + 12 + 32*numChunks
		tail := bs + 12 + 8*numChunks
		switch {
		case string(f[hs:hs+7]) != xorbHashesIdent || f[hs+7] != 0:
			return xorbErr(off+hs, "bad hashes section in V1 xorb footer")
		case string(f[bs:bs+7]) != xorbBoundsIdent || f[bs+7] != 1:
			return xorbErr(off+bs, "bad boundaries section in V1 xorb footer")
		case u32(hs+8) != n || u32(bs+8) != n || u32(tail) != n:
			return xorbErr(off, "V1 footer chunk counts disagree with the xorb's "+strconv.Itoa(numChunks)+" chunks")
		case u32(tail+4) != uint64(len(f)-hs) || u32(tail+8) != uint64(len(f)-bs):
			return xorbErr(off+tail, "V1 footer section offsets are wrong")
		}
		return nil
	}
	return xorbErr(off+7, "unknown xorb footer version "+strconv.Itoa(int(f[7])))
}

// BuildXorb serializes chunks as an upload body without footer, the way
// hf_xet >= 1.1.4 sends it: each chunk is stored with scheme 0, or with
// scheme 1 (one LZ4 frame) when compress is true and that is smaller.
// It returns the body and the XorbInfo that ParseXorb would return for it.
//
// Chunks longer than MaxChunkBytes are split into MaxChunkBytes pieces (so
// the result is always valid); empty chunks are kept. With no chunks the
// body is empty and the info zero, which ParseXorb rejects.
func BuildXorb(chunks [][]byte, compress bool) ([]byte, XorbInfo) {
	total := 0
	for _, c := range chunks {
		total += len(c) + ChunkHeaderBytes*(1+len(c)/MaxChunkBytes)
	}
	w := NewXorbWriter(make([]byte, 0, total), compress)
	kh := newKeyedHasher(&dataKey)
	for _, c := range chunks {
		for len(c) > MaxChunkBytes {
			w.Add(kh.sum(c[:MaxChunkBytes]), c[:MaxChunkBytes])
			c = c[MaxChunkBytes:]
		}
		w.Add(kh.sum(c), c)
	}
	return w.Finish()
}

// XorbWriter serializes chunks into a xorb body one at a time, as BuildXorb
// does, into a buffer the caller provides (and so may take from a memory
// budget). Not safe for concurrent use.
type XorbWriter struct {
	body     []byte
	chunks   []XorbChunk
	unpacked uint64
	compress bool
	comp     lz4.Compressor
	frame    []byte
	scratch  []byte // appendLZ4FrameTmp's block buffer
}

// NewXorbWriter returns a writer that appends to buf[:0]; the body grows
// past cap(buf) only if the caller adds more than fits.
func NewXorbWriter(buf []byte, compress bool) *XorbWriter {
	return &XorbWriter{body: buf[:0], compress: compress}
}

// Fits reports whether a chunk of n bytes may join the xorb without passing
// the limits hf_xet closes its xorbs at (XorbTargetBytes of data,
// XorbTargetChunks chunks). An empty xorb takes any chunk.
func (w *XorbWriter) Fits(n int) bool {
	return len(w.chunks) == 0 || len(w.chunks) < XorbTargetChunks && w.unpacked+uint64(n) <= XorbTargetBytes
}

// Len returns the number of chunks added since the last Finish or Reset.
func (w *XorbWriter) Len() int { return len(w.chunks) }

// Add appends one chunk of at most MaxChunkBytes whose ChunkHash is h (the
// caller has it already; it is not checked).
func (w *XorbWriter) Add(h Hash, c []byte) {
	scheme, payload := byte(SchemeNone), c
	if w.compress && len(c) > 0 {
		w.frame = appendLZ4FrameTmp(w.frame[:0], c, &w.comp, &w.scratch)
		if len(w.frame) < len(c) {
			scheme, payload = SchemeLZ4, w.frame
		}
	}
	cs, us := len(payload), len(c)
	w.body = append(w.body, 0, byte(cs), byte(cs>>8), byte(cs>>16), scheme, byte(us), byte(us>>8), byte(us>>16))
	w.body = append(w.body, payload...)
	w.unpacked += uint64(us)
	w.chunks = append(w.chunks, XorbChunk{Hash: h, Size: uint32(us), SerializedEnd: uint32(len(w.body)), UncompressedEnd: w.unpacked})
}

// Finish returns the body (in the writer's buffer: valid until the next
// Add after a Reset) and its XorbInfo, as ParseXorb would return them.
// With no chunks both are zero.
func (w *XorbWriter) Finish() ([]byte, XorbInfo) {
	if len(w.chunks) == 0 {
		return w.body, XorbInfo{}
	}
	info := XorbInfo{Chunks: w.chunks, StreamLen: int64(len(w.body)), StreamCRC32: crc32.ChecksumIEEE(w.body)}
	info.Hash = AggregatedHash(chunkLeaves(w.chunks))
	return w.body, info
}

// Reset empties the writer for the next xorb, reusing its buffer. The
// XorbInfo Finish returned keeps its own chunk list.
func (w *XorbWriter) Reset() {
	w.body = w.body[:0]
	w.chunks = nil
	w.unpacked = 0
}
