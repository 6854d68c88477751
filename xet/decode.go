package xet

import "strconv"

// DecodeChunks validates a chunk stream (a whole stored xorb, or the slice
// of one that a fetch URL serves) and returns every chunk's uncompressed
// bytes, in order, each in a slice of its own. It checks each chunk's
// format as ParseXorb does but hashes nothing: a stream has no hash to
// compare against, and the callers check what they assemble (a file's
// hash, a test's bytes).
func DecodeChunks(stream []byte) ([][]byte, error) {
	var out [][]byte
	_, err := walkXorb(stream, func(_ int, data []byte) {
		out = append(out, append([]byte(nil), data...))
	}, false)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendChunks is DecodeChunks for a caller that wants the bytes in one
// piece: it appends every chunk's uncompressed bytes to dst and returns
// the extended slice and the number of chunks. On error dst is returned
// as it was given, with count 0.
func AppendChunks(dst, stream []byte) (out []byte, count int, err error) {
	out = dst
	info, err := walkXorb(stream, func(_ int, data []byte) {
		out = append(out, data...)
	}, false)
	if err != nil {
		return dst, 0, err
	}
	return out, len(info.Chunks), nil
}

// chunkDecoder turns chunk payloads into their uncompressed bytes, in
// buffers of MaxChunkBytes it allocates on first need (one for LZ4
// output, one more for BG4 output) and reuses. The zero value is ready.
type chunkDecoder struct {
	lz4Out []byte // LZ4 output: a scheme-1 chunk, or a BG4 chunk's groups
	bg4Out []byte // a BG4 chunk un-grouped
}

// decode returns the uncompressed bytes of one chunk's payload, stored
// with scheme (SchemeNone, SchemeLZ4 or SchemeBG4LZ4) and declared by its
// header to be usize (at most MaxChunkBytes) bytes long. A scheme-0 chunk
// is payload itself; the others are in d's buffers, valid until the next
// call. Output never grows past usize: an LZ4 frame that would decode to
// more fails at the block that overflows. If the payload is refused,
// reason says why and errOff is the offset of the fault from the start of
// the chunk's header.
func (d *chunkDecoder) decode(scheme byte, payload []byte, usize int) (data []byte, errOff int, reason string) {
	if scheme == SchemeNone {
		if len(payload) != usize {
			return nil, 0, "uncompressed chunk: compressed size " + strconv.Itoa(len(payload)) + " != uncompressed size " + strconv.Itoa(usize)
		}
		return payload, 0, ""
	}
	if d.lz4Out == nil {
		d.lz4Out = make([]byte, MaxChunkBytes)
	}
	n, eoff, reason := decodeLZ4Frame(payload, d.lz4Out[:usize])
	if reason != "" {
		return nil, ChunkHeaderBytes + eoff, reason
	}
	if n != usize {
		return nil, 0, "chunk decompresses to " + strconv.Itoa(n) + " bytes, header says " + strconv.Itoa(usize)
	}
	if scheme != SchemeBG4LZ4 {
		return d.lz4Out[:n], 0, ""
	}
	if d.bg4Out == nil {
		d.bg4Out = make([]byte, MaxChunkBytes)
	}
	bg4Regroup(d.lz4Out[:n], d.bg4Out[:n])
	return d.bg4Out[:n], 0, ""
}
