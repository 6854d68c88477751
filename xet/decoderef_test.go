package xet

import (
	"encoding/binary"
	"strconv"

	"github.com/pierrec/lz4/v4"
)

// The chunk decoders as they were before issue 50, kept as the reference
// the fuzz tests hold the current ones to: the same bytes for every input
// they accepted, a refusal for every input they refused.

// decodeLZ4FrameRef decodes src, which must hold exactly one LZ4 frame and
// nothing else, into dst. dst's length is the most output accepted; more is
// an error. It returns the number of bytes written, or a reason and the
// offset into src where decoding failed.
func decodeLZ4FrameRef(src, dst []byte) (n int, errOff int, reason string) {
	if len(src) < 7 {
		return 0, 0, "LZ4 frame shorter than its header"
	}
	if binary.LittleEndian.Uint32(src) != lz4FrameMagic {
		return 0, 0, "not an LZ4 frame (bad magic number)"
	}
	flg, bd := src[4], src[5]
	switch {
	case flg&0xC0 != lz4FlgVersion:
		return 0, 4, "unsupported LZ4 frame version"
	case flg&lz4FlgReserved != 0 || bd&^lz4BDSizeMask != 0:
		return 0, 4, "LZ4 frame reserved bits set"
	case flg&lz4FlgDictID != 0:
		return 0, 4, "LZ4 frame needs a dictionary"
	}
	bsID := (bd & lz4BDSizeMask) >> 4
	if bsID < 4 {
		return 0, 5, "invalid LZ4 block size id"
	}
	maxBlock := 1 << (8 + 2*int(bsID)) // 4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB
	pos := 6
	var contentSize uint64
	hasSize := flg&lz4FlgSize != 0
	if hasSize {
		if len(src) < pos+8+1 {
			return 0, pos, "LZ4 frame header truncated"
		}
		contentSize = binary.LittleEndian.Uint64(src[pos:])
		pos += 8
	}
	if byte(xxh32(src[4:pos], 0)>>8) != src[pos] {
		return 0, pos, "LZ4 frame header checksum mismatch"
	}
	pos++

	blockSums := flg&lz4FlgBlockSum != 0
	independent := flg&lz4FlgIndep != 0
	out := 0
	for {
		if len(src)-pos < 4 {
			return 0, pos, "LZ4 frame truncated (no end mark)"
		}
		word := binary.LittleEndian.Uint32(src[pos:])
		pos += 4
		if word == 0 {
			break
		}
		size := int(word &^ lz4BlockRawFlag)
		if size > maxBlock {
			return 0, pos - 4, "LZ4 block larger than the frame's maximum block size"
		}
		if size > len(src)-pos {
			return 0, pos - 4, "LZ4 block extends past the chunk"
		}
		block := src[pos : pos+size]
		blockOff := pos
		pos += size
		if blockSums {
			if len(src)-pos < 4 {
				return 0, pos, "LZ4 block checksum truncated"
			}
			if xxh32(block, 0) != binary.LittleEndian.Uint32(src[pos:]) {
				return 0, pos, "LZ4 block checksum mismatch"
			}
			pos += 4
		}
		room := len(dst) - out
		if word&lz4BlockRawFlag != 0 {
			if size > room {
				return 0, blockOff, "LZ4 data decompresses to more than the chunk header says"
			}
			out += copy(dst[out:], block)
			continue
		}
		if size == 0 {
			return 0, blockOff, "empty compressed LZ4 block"
		}
		limit := min(maxBlock, room)
		var m int
		var err error
		if independent || out == 0 {
			m, err = lz4.UncompressBlock(block, dst[out:out+limit])
		} else {
			m, err = lz4.UncompressBlockWithDict(block, dst[out:out+limit], dst[max(0, out-lz4Window):out])
		}
		if err != nil {
			if limit < maxBlock {
				return 0, blockOff, "corrupt LZ4 block, or it decompresses to more than the chunk header says"
			}
			return 0, blockOff, "corrupt LZ4 block"
		}
		out += m
	}
	if flg&lz4FlgContSum != 0 {
		if len(src)-pos < 4 {
			return 0, pos, "LZ4 content checksum truncated"
		}
		if xxh32(dst[:out], 0) != binary.LittleEndian.Uint32(src[pos:]) {
			return 0, pos, "LZ4 content checksum mismatch"
		}
		pos += 4
	}
	if hasSize && contentSize != uint64(out) {
		return 0, 6, "LZ4 frame content size does not match its data"
	}
	if pos != len(src) {
		return 0, pos, "bytes after the end of the LZ4 frame"
	}
	return out, 0, ""
}

// bg4RegroupRef undoes byte grouping (docs/protocol.md §5.2 scheme 2): g holds four groups
// back to back (byte k of the original went to group k%4); out receives the
// original order. len(out) must equal len(g).
func bg4RegroupRef(g, out []byte) {
	n := len(g)
	q, r := n/4, n%4
	l0, l1, l2 := q, q, q
	if r > 0 {
		l0++
	}
	if r > 1 {
		l1++
	}
	if r > 2 {
		l2++
	}
	g0 := g[:l0]
	g1 := g[l0 : l0+l1]
	g2 := g[l0+l1 : l0+l1+l2]
	g3 := g[l0+l1+l2:]
	out = out[:n]
	for i := 0; i < q; i++ {
		o := out[4*i : 4*i+4 : 4*i+4]
		o[0], o[1], o[2], o[3] = g0[i], g1[i], g2[i], g3[i]
	}
	groups := [3][]byte{g0, g1, g2}
	for j := 0; j < r; j++ {
		out[4*q+j] = groups[j][q]
	}
}

// decodeChunkRef is how walkXorb decoded a chunk's payload before issue
// 50 (the body of its scheme switch), in chunkDecoder.decode's terms.
func decodeChunkRef(scheme byte, payload []byte, usize int) (data []byte, errOff int, reason string) {
	switch scheme {
	case SchemeNone:
		if len(payload) != usize {
			return nil, 0, "uncompressed chunk: compressed size " + strconv.Itoa(len(payload)) + " != uncompressed size " + strconv.Itoa(usize)
		}
		return payload, 0, ""
	case SchemeLZ4, SchemeBG4LZ4:
		scratch := make([]byte, MaxChunkBytes)
		n, eoff, reason := decodeLZ4FrameRef(payload, scratch[:usize])
		if reason != "" {
			return nil, ChunkHeaderBytes + eoff, reason
		}
		if n != usize {
			return nil, 0, "chunk decompresses to " + strconv.Itoa(n) + " bytes, header says " + strconv.Itoa(usize)
		}
		data = scratch[:n]
		if scheme == SchemeBG4LZ4 {
			grouped := make([]byte, MaxChunkBytes)
			bg4RegroupRef(data, grouped[:n])
			data = grouped[:n]
		}
		return data, 0, ""
	}
	panic("scheme " + strconv.Itoa(int(scheme)))
}
