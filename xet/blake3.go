package xet

import (
	"sync"
	"time"

	"github.com/zeebo/blake3"

	"openxet/xet/internal/widehash"
)

// wideBLAKE3 reports whether keyed hashes go through widehash's AVX-512
// kernel, which compresses 16 BLAKE3 chunks or parents at once, rather than
// through zeebo/blake3's AVX2 code. The CPU flag alone does not promise
// that it is faster (a CPU may slow its clock for ZMM work; the AVX-512
// kernel openxet used before widehash, guts', was 0.69× AVX2 on an AMD
// EPYC: BENCHMARKS.md, "Ingest"). So the choice is measured, once per
// process, on the first hash: both kernels over the same chunks, the best
// of several rounds of each.
var wideBLAKE3 = sync.OnceValue(func() bool {
	return widehash.Available && wideHolds(newKernelTimer().time)
})

// HashKernel names the BLAKE3 code this process hashes chunks with, for
// the serving log line.
func HashKernel() string {
	if wideBLAKE3() {
		return "avx512 (openxet/xet/internal/widehash)"
	}
	return "zeebo/blake3"
}

// calibrationRounds is how many timings of each kernel wideHolds takes;
// it keeps the fastest of each, so that a round the scheduler interrupted
// does not decide.
const calibrationRounds = 7

// wideHolds reports whether the wide kernel was no more than 10 % slower
// than zeebo/blake3 in the best of calibrationRounds alternating timings:
// the wide kernel is kept unless the CPU clearly runs it slower. (Where
// it is faster, it is 1.4× or more; the margin keeps a rare slow set of
// rounds, 1 in 40 on amd512, from losing that.) measure reports how long
// one kernel took over the calibration chunks.
func wideHolds(measure func(wide bool) time.Duration) bool {
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
	return best[1]*10 <= best[0]*11
}

// kernelTimer times both kernels over the same four 64 KiB chunks (the
// most common xorb chunk size, about a millisecond of work), each with
// the same hasher every time, so that no round pays for fresh memory.
type kernelTimer struct {
	data   [][]byte
	hasher [2]keyedHasher // zeebo/blake3, wide
}

func newKernelTimer() *kernelTimer {
	t := &kernelTimer{data: make([][]byte, 4)}
	for i := range t.data {
		t.data[i] = make([]byte, 64<<10)
		t.data[i][0] = byte(i)
	}
	key := [32]byte{}
	t.hasher[0] = newKeyedHasherWide(&key, false)
	t.hasher[1] = newKeyedHasherWide(&key, true)
	return t
}

// time hashes the chunks with one kernel and reports how long it took.
func (t *kernelTimer) time(wide bool) time.Duration {
	k := t.hasher[0]
	if wide {
		k = t.hasher[1]
	}
	start := time.Now()
	for _, d := range t.data {
		k.sum(d)
	}
	return time.Since(start)
}

// wideMinBytes is the shortest input the wide kernel hashes alone: one
// input of a few chunks leaves most of its sixteen lanes idle.
const wideMinBytes = 10 << 10

// keyedHasher is a reusable BLAKE3 hasher for one key. Not safe for
// concurrent use; each call of an exported function makes its own.
type keyedHasher struct {
	h    *blake3.Hasher // streaming writes (h.Write), and sum of short inputs
	wide *wideHasher    // with wideBLAKE3(): sum of inputs of wideMinBytes or more
}

// wideHasher makes its widehash.Hasher (17 KiB of lanes and buffers) on
// first use: most keyedHashers (a file's hash, a range's) never hash an
// input long enough for it. Copies of a keyedHasher share it.
type wideHasher struct {
	key [32]byte
	h   *widehash.Hasher
}

func (w *wideHasher) hasher() *widehash.Hasher {
	if w.h == nil {
		w.h = widehash.New(&w.key)
	}
	return w.h
}

func newKeyedHasher(key *[32]byte) keyedHasher {
	return newKeyedHasherWide(key, wideBLAKE3())
}

func newKeyedHasherWide(key *[32]byte, wide bool) keyedHasher {
	// NewKeyed fails only for a key that is not 32 bytes long.
	h, _ := blake3.NewKeyed(key[:])
	k := keyedHasher{h: h}
	if wide {
		k.wide = &wideHasher{key: *key}
	}
	return k
}

func (k keyedHasher) sum(data []byte) Hash {
	if k.wide != nil && len(data) >= wideMinBytes {
		return k.wide.hasher().Sum(data)
	}
	k.h.Reset()
	_, _ = k.h.Write(data)
	var out Hash
	k.h.Sum(out[:0])
	return out
}
