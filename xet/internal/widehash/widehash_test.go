package widehash

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/zeebo/blake3"
)

func reference(key *[32]byte, data []byte) [32]byte {
	h, _ := blake3.NewKeyed(key[:])
	_, _ = h.Write(data)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// kernels runs f once with the AVX-512 kernel (where the CPU has it) and
// once with the portable one.
func kernels(t *testing.T, f func(t *testing.T)) {
	t.Run("portable", func(t *testing.T) {
		saved := haveKernel
		haveKernel = false
		defer func() { haveKernel = saved }()
		f(t)
	})
	t.Run("avx512", func(t *testing.T) {
		if !haveKernel {
			t.Skip("this CPU has no AVX-512")
		}
		f(t)
	})
}

// The offsets gen_kernel.go writes into the kernel are the struct's.
func TestLanesLayout(t *testing.T) {
	var l lanes
	for name, c := range map[string][2]uintptr{
		"ptr": {unsafe.Offsetof(l.ptr), 0}, "ctrLo": {unsafe.Offsetof(l.ctrLo), 128},
		"ctrHi": {unsafe.Offsetof(l.ctrHi), 192}, "lastBlk": {unsafe.Offsetof(l.lastBlk), 256},
		"lastLen": {unsafe.Offsetof(l.lastLen), 320}, "first": {unsafe.Offsetof(l.first), 384},
		"last": {unsafe.Offsetof(l.last), 448}, "cv": {unsafe.Offsetof(l.cv), 512},
		"blocks": {unsafe.Offsetof(l.blocks), 1024}, "base": {unsafe.Offsetof(l.base), 1032},
		"key": {unsafe.Offsetof(l.key), 1036},
	} {
		if c[0] != c[1] {
			t.Errorf("lanes.%s at %d, the kernel reads it at %d", name, c[0], c[1])
		}
	}
}

// Every size where the tree changes shape, alone and many to a call, under
// two keys, agrees with zeebo/blake3. Inputs are cut from a larger buffer,
// so the bytes after a slice's end (which must not be hashed) differ from
// zero.
func TestMatchesReference(t *testing.T) {
	const k = 1024
	sizes := []int{0, 1, 63, 64, 65, 1000, k - 1, k, k + 1, 2*k - 1, 2 * k, 2*k + 1, 3 * k, 15*k + 3,
		16*k - 1, 16 * k, 16*k + 1, 17 * k, 31*k + 5, 32 * k, 33*k + 64, 63 * k, 64 * k, 64*k + 1,
		100*k + 17, 128 * k, 1<<20 + 12345}
	buf := randBytes(7, 2<<20)
	keys := []*[32]byte{{}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}}
	kernels(t, func(t *testing.T) {
		for _, key := range keys {
			h := New(key)
			var inputs [][]byte
			for _, n := range sizes {
				for _, in := range [][]byte{buf[:n], buf[len(buf)-n:], buf[3 : 3+n]} {
					if got, want := h.Sum(in), reference(key, in); got != want {
						t.Fatalf("%d bytes: %x, want %x", n, got, want)
					}
					inputs = append(inputs, in)
				}
			}
			out := make([][32]byte, len(inputs))
			h.SumMany(inputs, out)
			for i, in := range inputs {
				if want := reference(key, in); out[i] != want {
					t.Fatalf("input %d of %d (%d bytes) in one call: %x, want %x", i, len(inputs), len(in), out[i], want)
				}
			}
		}
	})
}

// Random batches of random sizes, as a xorb's chunks come.
func TestRandomBatches(t *testing.T) {
	buf := randBytes(9, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	key := &[32]byte{9}
	kernels(t, func(t *testing.T) {
		h := New(key)
		for range 50 {
			inputs := make([][]byte, 1+r.IntN(40))
			for i := range inputs {
				n := r.IntN(140 << 10)
				off := r.IntN(len(buf) - n + 1)
				inputs[i] = buf[off : off+n]
			}
			out := make([][32]byte, len(inputs))
			h.SumMany(inputs, out)
			for i, in := range inputs {
				if want := reference(key, in); out[i] != want {
					t.Fatalf("input %d (%d bytes): %x, want %x", i, len(in), out[i], want)
				}
			}
		}
	})
}

func FuzzSumMany(f *testing.F) {
	f.Add([]byte("abc"), uint16(1), uint16(3000))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint16) {
		big := randBytes(uint64(len(data)), int(a)+int(b))
		copy(big, data)
		inputs := [][]byte{data, big[:a], big[a:]}
		out := make([][32]byte, len(inputs))
		New(&[32]byte{}).SumMany(inputs, out)
		for i, in := range inputs {
			if want := reference(&[32]byte{}, in); out[i] != want {
				t.Fatalf("input %d (%d bytes): %x, want %x", i, len(in), out[i], want)
			}
		}
	})
}

func BenchmarkSum64KiB(b *testing.B) {
	data := randBytes(1, 64<<10)
	h := New(&[32]byte{})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		h.Sum(data)
	}
}

func BenchmarkSumMany64KiB(b *testing.B) {
	data := randBytes(1, 32*64<<10)
	inputs := make([][]byte, 32)
	for i := range inputs {
		inputs[i] = data[i*64<<10 : (i+1)*64<<10]
	}
	out := make([][32]byte, len(inputs))
	h := New(&[32]byte{})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		h.SumMany(inputs, out)
	}
}

func BenchmarkZeebo64KiB(b *testing.B) {
	data := randBytes(1, 64<<10)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		reference(&[32]byte{}, data)
	}
}

// The checked-in kernel is what gen_kernel.go writes today.
func TestKernelIsGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generator")
	}
	dst := filepath.Join(t.TempDir(), "kernel.s")
	if out, err := exec.Command("go", "run", "gen_kernel.go", "-o", dst).CombinedOutput(); err != nil {
		t.Fatalf("go run gen_kernel.go: %v\n%s", err, out)
	}
	want, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("kernel_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("kernel_amd64.s is not gen_kernel.go's output: run go generate in xet/internal/widehash")
	}
}
