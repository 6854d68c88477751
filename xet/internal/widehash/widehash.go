// Package widehash computes keyed BLAKE3 hashes of many inputs at once:
// sixteen BLAKE3 compressions side by side, one per 32-bit lane of the
// AVX-512 registers, filled from the chunks and parent nodes of every input
// in a call. A xorb's chunk hashes are the server's biggest CPU cost on
// upload (BENCHMARKS.md, "Ingest"); this is where they are computed when
// the CPU has AVX-512.
//
// The BLAKE3 tree is built level by level: the 1 KiB chunks of every input
// first, then the parents of each level, a level's odd last node carried
// up unchanged. That is the reference implementation's tree (left subtrees
// complete powers of two), built breadth first so that a level's nodes of
// all inputs fill the lanes together.
//
// Little-endian machines only: chaining values are kept as native uint32
// words and read back as message bytes.
package widehash

import (
	"encoding/binary"
	"unsafe"
)

// BLAKE3's flags and sizes.
const (
	chunkStart = 1 << 0
	chunkEnd   = 1 << 1
	parent     = 1 << 2
	root       = 1 << 3
	keyedHash  = 1 << 4

	chunkBytes = 1024
	blockBytes = 64
	lanesN     = 16
)

// Available reports whether this CPU runs the AVX-512 kernel; without it,
// a Hasher still works, through a portable kernel many times slower (for
// tests).
var Available = haveKernel

// lanes is the kernel's argument: sixteen compressions of up to sixteen
// blocks each. Lane l hashes blocks 0..lastBlk[l] read from ptr[l], with
// counter ctrHi:ctrLo, the flags base on every block, first on block 0 and
// last on its last block, whose length is lastLen[l] (the others are 64
// bytes), starting from key. cv receives the chaining values, word-major
// (cv[w][l] is word w of lane l). The kernel runs blocks
// blocks and reads blocks×64 bytes from every ptr, whatever its lastBlk.
// The layout is fixed: gen_kernel.go addresses the fields by offset.
type lanes struct {
	ptr     [lanesN]*byte
	ctrLo   [lanesN]uint32
	ctrHi   [lanesN]uint32
	lastBlk [lanesN]uint32
	lastLen [lanesN]uint32
	first   [lanesN]uint32
	last    [lanesN]uint32
	cv      [8][lanesN]uint32
	blocks  uint64
	base    uint32
	key     [8]uint32
}

// Hasher hashes inputs under one key. Its buffers are reused from call to
// call; not safe for concurrent use.
type Hasher struct {
	l     lanes
	n     int                      // lanes filled
	sink  [lanesN]*[8]uint32       // where each lane's result goes
	pad   [lanesN][chunkBytes]byte // partial chunks, zero-filled after their bytes
	cvs   [][8]uint32              // every input's nodes of the current level
	span  []span
	roots [][8]uint32 // every input's root
	one   [1][]byte   // Sum's input list
}

// span is one input's run of nodes in Hasher.cvs at the current level.
type span struct {
	start, count int
}

// New returns a Hasher for the 32-byte key.
func New(key *[32]byte) *Hasher {
	h := &Hasher{}
	for i := range h.l.key {
		h.l.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	h.l.base = keyedHash
	return h
}

// Sum returns the keyed hash of data.
func (h *Hasher) Sum(data []byte) [32]byte {
	var out [1][32]byte
	h.one[0] = data
	h.SumMany(h.one[:], out[:])
	h.one[0] = nil
	return out[0]
}

// SumMany writes the keyed hash of inputs[i] to out[i].
func (h *Hasher) SumMany(inputs [][]byte, out [][32]byte) {
	out = out[:len(inputs)]
	total := 0
	for _, in := range inputs {
		total += chunksOf(len(in))
	}
	if cap(h.cvs) < total {
		h.cvs = make([][8]uint32, total)
	}
	h.cvs = h.cvs[:total]
	h.span = h.span[:0]
	if cap(h.roots) < len(inputs) {
		h.roots = make([][8]uint32, len(inputs))
	}
	roots := h.roots[:len(inputs)]
	start := 0
	for i, in := range inputs {
		n := chunksOf(len(in))
		h.span = append(h.span, span{start, n})
		for j := range n {
			piece := in[min(j*chunkBytes, len(in)):min((j+1)*chunkBytes, len(in))]
			sink, flags := &h.cvs[start+j], uint32(chunkEnd)
			if n == 1 {
				sink, flags = &roots[i], chunkEnd|root
			}
			h.addChunk(piece, uint64(j), flags, sink)
		}
		start += n
	}
	h.flush()
	for h.parentLevel(roots) {
	}
	for i := range out {
		for w, x := range roots[i] {
			binary.LittleEndian.PutUint32(out[i][4*w:], x)
		}
	}
}

// chunksOf is how many BLAKE3 chunks an input of n bytes has: an empty
// input is one empty chunk.
func chunksOf(n int) int {
	return max(1, (n+chunkBytes-1)/chunkBytes)
}

// parentLevel queues every input's parents of the current level, runs
// them, and carries each odd last node up; it reports whether any input
// had a level left to merge.
func (h *Hasher) parentLevel(roots [][8]uint32) bool {
	any := false
	for i, s := range h.span {
		if s.count < 2 {
			continue
		}
		any = true
		for p := range s.count / 2 {
			sink, flags := &h.cvs[s.start+p], uint32(0)
			if s.count == 2 {
				sink, flags = &roots[i], root
			}
			h.add((*byte)(unsafe.Pointer(&h.cvs[s.start+2*p])), 0, 0, blockBytes, parent, parent|flags, sink)
		}
	}
	h.flush()
	for i, s := range h.span {
		if s.count < 2 {
			continue
		}
		if s.count%2 == 1 {
			h.cvs[s.start+s.count/2] = h.cvs[s.start+s.count-1]
		}
		h.span[i].count = (s.count + 1) / 2
	}
	return any
}

// addChunk queues one chunk of up to 1 KiB at counter ctr; a partial chunk
// is copied into the lane's pad, zero-filled after it, since the kernel
// reads whole blocks.
func (h *Hasher) addChunk(piece []byte, ctr uint64, last uint32, sink *[8]uint32) {
	if len(piece) == chunkBytes {
		h.add(&piece[0], ctr, chunkBytes/blockBytes-1, blockBytes, chunkStart, last, sink)
		return
	}
	pad := &h.pad[h.n]
	copy(pad[:], piece)
	blocks := max(1, (len(piece)+blockBytes-1)/blockBytes)
	clear(pad[len(piece) : blocks*blockBytes])
	h.add(&pad[0], ctr, uint32(blocks-1), uint32(len(piece)-(blocks-1)*blockBytes), chunkStart, last, sink)
}

// add queues one compression in the next lane and runs the kernel when
// all sixteen are full.
func (h *Hasher) add(p *byte, ctr uint64, lastBlk, lastLen, first, last uint32, sink *[8]uint32) {
	l, n := &h.l, h.n
	l.ptr[n] = p
	l.ctrLo[n], l.ctrHi[n] = uint32(ctr), uint32(ctr>>32)
	l.lastBlk[n], l.lastLen[n] = lastBlk, lastLen
	l.first[n], l.last[n] = first, last
	l.blocks = max(l.blocks, uint64(lastBlk)+1)
	h.sink[n] = sink
	h.n++
	if h.n == lanesN {
		h.flush()
	}
}

// flush runs the queued lanes (the unused ones hash their pad, unread)
// and writes each lane's chaining value to its sink.
func (h *Hasher) flush() {
	if h.n == 0 {
		return
	}
	l := &h.l
	for n := h.n; n < lanesN; n++ {
		l.ptr[n] = &h.pad[n][0]
		l.lastBlk[n] = 0
	}
	compress(l)
	clear(l.ptr[:]) // hold no input past the call
	for n := range h.n {
		s := h.sink[n]
		for w := range s {
			s[w] = l.cv[w][n]
		}
	}
	h.n = 0
	l.blocks = 0
}
