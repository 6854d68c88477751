package widehash

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

var iv = [4]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a}

var msgPermutation = [16]int{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8}

// compressGeneric does what the kernel does, one lane and one block at a
// time, in plain Go: the reference the kernel is tested against, and what
// a Hasher runs on a CPU without AVX-512 (where xet hashes with
// zeebo/blake3 instead).
func compressGeneric(l *lanes) {
	for n := range lanesN {
		in := unsafe.Slice(l.ptr[n], int(l.blocks)*blockBytes)
		cv := l.key
		for b := 0; b <= int(l.lastBlk[n]); b++ {
			flags, blen := l.base, uint32(blockBytes)
			if b == 0 {
				flags |= l.first[n]
			}
			if b == int(l.lastBlk[n]) {
				flags |= l.last[n]
				blen = l.lastLen[n]
			}
			var m [16]uint32
			for i := range m {
				m[i] = binary.LittleEndian.Uint32(in[b*blockBytes+4*i:])
			}
			cv = compressBlock(cv, m, uint64(l.ctrHi[n])<<32|uint64(l.ctrLo[n]), blen, flags)
		}
		for w := range cv {
			l.cv[w][n] = cv[w]
		}
	}
}

// compressBlock is BLAKE3's compression function, truncated to the eight
// words of a chaining value.
func compressBlock(cv [8]uint32, m [16]uint32, ctr uint64, blen, flags uint32) [8]uint32 {
	v := [16]uint32{cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
		iv[0], iv[1], iv[2], iv[3], uint32(ctr), uint32(ctr >> 32), blen, flags}
	g := func(a, b, c, d int, x, y uint32) {
		v[a] += v[b] + x
		v[d] = bits.RotateLeft32(v[d]^v[a], -16)
		v[c] += v[d]
		v[b] = bits.RotateLeft32(v[b]^v[c], -12)
		v[a] += v[b] + y
		v[d] = bits.RotateLeft32(v[d]^v[a], -8)
		v[c] += v[d]
		v[b] = bits.RotateLeft32(v[b]^v[c], -7)
	}
	for r := range 7 {
		g(0, 4, 8, 12, m[0], m[1])
		g(1, 5, 9, 13, m[2], m[3])
		g(2, 6, 10, 14, m[4], m[5])
		g(3, 7, 11, 15, m[6], m[7])
		g(0, 5, 10, 15, m[8], m[9])
		g(1, 6, 11, 12, m[10], m[11])
		g(2, 7, 8, 13, m[12], m[13])
		g(3, 4, 9, 14, m[14], m[15])
		if r < 6 {
			var p [16]uint32
			for i := range p {
				p[i] = m[msgPermutation[i]]
			}
			m = p
		}
	}
	var out [8]uint32
	for i := range out {
		out[i] = v[i] ^ v[i+8]
	}
	return out
}
