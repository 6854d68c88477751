package xet

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/zeebo/blake3"
	"golang.org/x/sys/cpu"
	"lukechampine.com/blake3/guts"
)

// canWide reports whether the CPU runs guts' AVX-512 kernel at all.
var canWide = cpu.X86.HasAVX512F

// wideBLAKE3 reports whether keyed hashes go through guts' AVX-512 kernel,
// which hashes 16 BLAKE3 chunks (16 KiB) at once, rather than through
// zeebo/blake3's AVX2 code. The CPU flag alone does not say which is
// faster: on an Intel Xeon the wide kernel is 1.4–1.5× AVX2 on 64 KiB
// chunks, on an AMD EPYC with AVX-512 it is 0.69× (BENCHMARKS.md,
// "Ingest"). So the choice is measured, once per process, on the first
// hash: both kernels over the same chunks, the best of several rounds of
// each.
var wideBLAKE3 = sync.OnceValue(func() bool {
	return canWide && wideIsFaster(timeKernel)
})

// HashKernel names the BLAKE3 code this process hashes chunks with, for
// the serving log line.
func HashKernel() string {
	if wideBLAKE3() {
		return "avx512 (lukechampine.com/blake3/guts)"
	}
	return "zeebo/blake3"
}

// calibrationRounds is how many timings of each kernel wideIsFaster takes;
// it keeps the fastest of each, so that a round the scheduler interrupted
// does not decide.
const calibrationRounds = 7

// wideIsFaster reports whether the wide kernel beat zeebo/blake3 by at
// least 10 % in the best of calibrationRounds alternating timings. measure
// reports how long one kernel took over the calibration chunks.
func wideIsFaster(measure func(wide bool) time.Duration) bool {
	best := [2]time.Duration{}
	for r := range 2 * calibrationRounds {
		wide := r%2 == 1
		d := measure(wide)
		i := 0
		if wide {
			i = 1
		}
		if best[i] == 0 || d < best[i] {
			best[i] = d
		}
	}
	return best[1]*11 < best[0]*10
}

// timeKernel hashes four 64 KiB chunks (the most common xorb chunk size,
// about a millisecond of work) with one kernel and reports how long it took.
func timeKernel(wide bool) time.Duration {
	var data [4][64 << 10]byte
	for i := range data {
		data[i][0] = byte(i)
	}
	key := [32]byte{}
	k := newKeyedHasherWide(&key, wide)
	start := time.Now()
	for i := range data {
		k.sum(data[i][:])
	}
	return time.Since(start)
}

// wideMinBytes is the shortest input the wide kernel hashes: it always
// hashes a whole group, which costs about what zeebo/blake3 spends on
// 9–10 KiB (BenchmarkChunkHashers).
const wideMinBytes = 10 << 10

// groupBytes is what one call of the wide kernel hashes: guts.MaxSIMD
// BLAKE3 chunks, a complete subtree of the BLAKE3 tree when it starts at a
// multiple of itself.
const groupBytes = guts.MaxSIMD * guts.ChunkSize

// keyedHasher is a reusable BLAKE3 hasher for one key. Not safe for
// concurrent use; each call of an exported function makes its own.
type keyedHasher struct {
	h    *blake3.Hasher // streaming writes (h.Write), and sum of short inputs
	wide *wideKeyed     // with wideBLAKE3(): sum of inputs of wideMinBytes or more
}

// wideKeyed hashes whole inputs with guts' 16-chunk kernel.
type wideKeyed struct {
	key [8]uint32 // the key as BLAKE3 words
	// tail holds an input's last, partial group: the kernel reads a whole
	// group, and the input's slice may end sooner. Made on first use.
	tail *[groupBytes]byte
}

func newKeyedHasher(key *[32]byte) keyedHasher {
	return newKeyedHasherWide(key, wideBLAKE3())
}

func newKeyedHasherWide(key *[32]byte, wide bool) keyedHasher {
	// NewKeyed fails only for a key that is not 32 bytes long.
	h, _ := blake3.NewKeyed(key[:])
	k := keyedHasher{h: h}
	if wide {
		k.wide = new(wideKeyed)
		for i := range k.wide.key {
			k.wide.key[i] = binary.LittleEndian.Uint32(key[4*i:])
		}
	}
	return k
}

func (k keyedHasher) sum(data []byte) Hash {
	if k.wide != nil && len(data) >= wideMinBytes {
		return k.wide.sum(data)
	}
	k.h.Reset()
	_, _ = k.h.Write(data)
	var out Hash
	k.h.Sum(out[:0])
	return out
}

// sum builds the BLAKE3 tree from complete groups the way the reference
// implementation builds it from chunks: a stack of subtree roots, two of
// one height merged as soon as a later group follows them, the last
// group's node folded into the stack from the top, and the final node
// compressed as the root.
func (w *wideKeyed) sum(data []byte) Hash {
	const flags = guts.FlagKeyedHash
	var stack [54][8]uint32 // 2^54 groups is more than a slice can hold
	depth := 0
	var counter, groups uint64
	for len(data) > groupBytes {
		cv := guts.ChainingValue(guts.CompressBuffer((*[groupBytes]byte)(data), groupBytes, &w.key, counter, flags))
		data = data[groupBytes:]
		counter += guts.MaxSIMD
		groups++
		for t := groups; t&1 == 0; t >>= 1 {
			depth--
			cv = guts.ChainingValue(guts.ParentNode(stack[depth], cv, &w.key, flags))
		}
		stack[depth] = cv
		depth++
	}
	var last *[groupBytes]byte
	if len(data) == groupBytes {
		last = (*[groupBytes]byte)(data)
	} else {
		if w.tail == nil {
			w.tail = new([groupBytes]byte)
		}
		last = w.tail
		copy(last[:], data)
	}
	n := guts.CompressBuffer(last, len(data), &w.key, counter, flags)
	for depth > 0 {
		depth--
		n = guts.ParentNode(stack[depth], guts.ChainingValue(n), &w.key, flags)
	}
	n.Flags |= guts.FlagRoot
	words := guts.CompressNode(n)
	var out Hash
	for i := range 8 {
		binary.LittleEndian.PutUint32(out[4*i:], words[i])
	}
	return out
}
