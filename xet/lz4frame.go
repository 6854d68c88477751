package xet

import (
	"encoding/binary"
	"math/bits"

	"github.com/pierrec/lz4/v4"
)

// LZ4 frame format (https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md),
// as written by the Rust lz4_flex FrameEncoder that hf_xet uses for schemes
// 1 and 2 (docs/protocol.md §5.2). Decoding is done here rather than with lz4.Reader so that
// output goes straight into one caller-owned buffer capped at the chunk
// header's uncompressed size (an LZ4 bomb fails at the first block that
// overflows, without allocating), and so that the accepted subset is exactly
// one well-formed frame filling the chunk's compressed bytes.

const (
	lz4FrameMagic   = 0x184D2204
	lz4Window       = 64 << 10
	lz4FlgVersion   = 0x40 // bits 7-6 = 01
	lz4FlgIndep     = 0x20
	lz4FlgBlockSum  = 0x10
	lz4FlgSize      = 0x08
	lz4FlgContSum   = 0x04
	lz4FlgReserved  = 0x02
	lz4FlgDictID    = 0x01
	lz4BDSizeMask   = 0x70
	lz4BlockRawFlag = 0x80000000
)

// decodeLZ4Frame decodes src, which must hold exactly one LZ4 frame and
// nothing else, into dst. dst's length is the most output accepted; more is
// an error. It returns the number of bytes written, or a reason and the
// offset into src where decoding failed.
func decodeLZ4Frame(src, dst []byte) (n int, errOff int, reason string) {
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

// appendLZ4Frame appends src compressed as one LZ4 frame the way lz4_flex's
// FrameEncoder does by default: independent blocks, no checksums, no content
// size, 64 KiB blocks for inputs up to 64 KiB and 256 KiB blocks above.
// Incompressible blocks are stored raw.
func appendLZ4Frame(dst, src []byte, c *lz4.Compressor) []byte {
	var tmp []byte
	return appendLZ4FrameTmp(dst, src, c, &tmp)
}

// appendLZ4FrameTmp is appendLZ4Frame compressing into *tmp, grown as
// needed and kept for the next call (XorbWriter compresses every chunk).
func appendLZ4FrameTmp(dst, src []byte, c *lz4.Compressor, tmpp *[]byte) []byte {
	tmp := *tmpp
	defer func() { *tmpp = tmp }()
	bd, blockSize := byte(0x40), 64<<10
	if len(src) > 64<<10 {
		bd, blockSize = 0x50, 256<<10
	}
	flg := byte(lz4FlgVersion | lz4FlgIndep)
	dst = binary.LittleEndian.AppendUint32(dst, lz4FrameMagic)
	dst = append(dst, flg, bd, byte(xxh32([]byte{flg, bd}, 0)>>8))
	for len(src) > 0 {
		n := min(blockSize, len(src))
		blk := src[:n]
		src = src[n:]
		if cap(tmp) < lz4.CompressBlockBound(n) {
			tmp = make([]byte, lz4.CompressBlockBound(n))
		}
		m, err := c.CompressBlock(blk, tmp[:cap(tmp)])
		if err != nil || m == 0 || m >= n {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(n)|lz4BlockRawFlag)
			dst = append(dst, blk...)
			continue
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(m))
		dst = append(dst, tmp[:m]...)
	}
	return binary.LittleEndian.AppendUint32(dst, 0) // end mark
}

// xxh32 is the 32-bit xxHash used by LZ4 frames for header, block and
// content checksums.
func xxh32(b []byte, seed uint32) uint32 {
	const (
		p1 uint32 = 2654435761
		p2 uint32 = 2246822519
		p3 uint32 = 3266489917
		p4 uint32 = 668265263
		p5 uint32 = 374761393
	)
	round := func(acc, in uint32) uint32 {
		return bits.RotateLeft32(acc+in*p2, 13) * p1
	}
	n := len(b)
	var h uint32
	if n >= 16 {
		v1, v2, v3, v4 := seed+p1+p2, seed+p2, seed, seed-p1
		for len(b) >= 16 {
			v1 = round(v1, binary.LittleEndian.Uint32(b[0:]))
			v2 = round(v2, binary.LittleEndian.Uint32(b[4:]))
			v3 = round(v3, binary.LittleEndian.Uint32(b[8:]))
			v4 = round(v4, binary.LittleEndian.Uint32(b[12:]))
			b = b[16:]
		}
		h = bits.RotateLeft32(v1, 1) + bits.RotateLeft32(v2, 7) + bits.RotateLeft32(v3, 12) + bits.RotateLeft32(v4, 18)
	} else {
		h = seed + p5
	}
	h += uint32(n)
	for len(b) >= 4 {
		h += binary.LittleEndian.Uint32(b) * p3
		h = bits.RotateLeft32(h, 17) * p4
		b = b[4:]
	}
	for _, c := range b {
		h += uint32(c) * p5
		h = bits.RotateLeft32(h, 11) * p1
	}
	h ^= h >> 15
	h *= p2
	h ^= h >> 13
	h *= p3
	h ^= h >> 16
	return h
}
