package xet

import (
	"errors"
	"io"
)

// The content-defined chunking of docs/protocol.md §4, with the parameters
// xet-core's chunker uses: a gear hash over the bytes of the current chunk,
// a cut where the hash's top 16 bits are zero once the chunk holds
// ChunkMinBytes, and a forced cut at ChunkMaxBytes (= MaxChunkBytes).
const (
	// ChunkTargetBytes is the mean chunk size the mask aims at.
	ChunkTargetBytes = 64 << 10
	// ChunkMinBytes is the smallest chunk a cut may make (only the last
	// chunk of a stream can be shorter).
	ChunkMinBytes = ChunkTargetBytes / 8
	// ChunkMaxBytes is the longest chunk: a cut is forced there.
	ChunkMaxBytes = ChunkTargetBytes * 2

	// chunkMask keeps the top 16 bits of the gear hash: xet-core shifts
	// target−1 all the way left, where every bit depends on the last 64 bytes.
	chunkMask = uint64(ChunkTargetBytes-1) << 48
	// gearWindow is how many bytes determine the gear hash (a u64 shifted
	// left once per byte forgets a byte after 64 more).
	gearWindow = 64
)

// XorbTargetBytes and XorbTargetChunks are where hf_xet closes a xorb: before
// its uncompressed data would pass 64 MiB, or at 8192 chunks.
const (
	XorbTargetBytes  = 64 << 20
	XorbTargetChunks = 8192
)

// ChunkLen returns the length of the first chunk of data, which starts at a
// chunk boundary. When data is shorter than ChunkMaxBytes and has no cut,
// the whole of data is the chunk: the caller passes a shorter data only at
// the end of its stream. An empty data gives 0.
//
// The gear hash is h = h<<1 + gearTable[b] (wrapping), reset at each cut;
// the first cut allowed is after ChunkMinBytes bytes. Like xet-core, the
// hash only starts gearWindow+1 bytes before that point: bytes further back
// have been shifted out of it by then.
func ChunkLen(data []byte) int {
	n := min(len(data), ChunkMaxBytes)
	if n <= ChunkMinBytes {
		return n
	}
	data = data[:n]
	var h uint64
	i := ChunkMinBytes - gearWindow - 1
	for ; i < ChunkMinBytes-1; i++ {
		h = h<<1 + gearTable[data[i]]
	}
	for ; i < len(data); i++ {
		h = h<<1 + gearTable[data[i]]
		if h&chunkMask == 0 {
			return i + 1
		}
	}
	return n
}

// ChunkReaderBufBytes is the smallest buffer NewChunkReader accepts.
const ChunkReaderBufBytes = 2 * ChunkMaxBytes

// ChunkReader cuts the bytes of an io.Reader into the chunks ChunkLen gives,
// reading into one buffer it is handed (no other allocation). Not safe for
// concurrent use.
type ChunkReader struct {
	r          io.Reader
	buf        []byte
	start, end int
	eof        bool
	err        error
	n          int64
}

// NewChunkReader returns a ChunkReader of r that reads into buf; a longer
// buffer means fewer reads and copies. A buf shorter than
// ChunkReaderBufBytes is replaced by a new one of that size. The
// ChunkReader owns buf until the caller stops using it.
func NewChunkReader(r io.Reader, buf []byte) *ChunkReader {
	if len(buf) < ChunkReaderBufBytes {
		buf = make([]byte, ChunkReaderBufBytes)
	}
	return &ChunkReader{r: r, buf: buf}
}

// Next returns the next chunk: a slice of the buffer that is valid until the
// next call. At the end of the stream it returns io.EOF (an empty stream has
// no chunk); a read error of r is returned as it is, and again by every
// later call.
func (c *ChunkReader) Next() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	for !c.eof && c.end-c.start < ChunkMaxBytes {
		if len(c.buf)-c.end < ChunkMaxBytes {
			c.end = copy(c.buf, c.buf[c.start:c.end])
			c.start = 0
		}
		n, err := c.r.Read(c.buf[c.end:])
		c.end += n
		c.n += int64(n)
		if errors.Is(err, io.EOF) {
			c.eof = true
		} else if err != nil {
			c.err = err
			return nil, err
		}
	}
	if c.start == c.end {
		c.err = io.EOF
		return nil, io.EOF
	}
	n := ChunkLen(c.buf[c.start:c.end])
	chunk := c.buf[c.start : c.start+n : c.start+n]
	c.start += n
	return chunk, nil
}

// Buffered reports whether the next call of Next returns without reading
// from r: a whole chunk is buffered, or the stream ended or failed.
func (c *ChunkReader) Buffered() bool {
	return c.err != nil || c.eof || c.end-c.start >= ChunkMaxBytes
}

// BytesRead returns how many bytes were read from r so far.
func (c *ChunkReader) BytesRead() int64 { return c.n }
