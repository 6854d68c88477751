package xet

import (
	"testing"
	"time"

	"openxet/xet/internal/widehash"
)

// groupBytes is sixteen BLAKE3 chunks, what one run of widehash's kernel
// compresses side by side.
const groupBytes = 16 << 10

// wideAndNarrow hashes data with the 16-chunk kernel and with zeebo/blake3
// under key and fails the test when they differ.
func wideAndNarrow(t testing.TB, key *[32]byte, data []byte) {
	t.Helper()
	wide := newKeyedHasherWide(key, true)
	if wide.wide == nil {
		t.Fatal("no wide hasher")
	}
	got := wide.wide.hasher().Sum(data)
	want := newKeyedHasherWide(key, false).sum(data)
	if got != want {
		t.Fatalf("%d bytes: wide kernel gives %s, zeebo/blake3 %s", len(data), got, want)
	}
}

// The wide kernel agrees with zeebo/blake3 at every size where the BLAKE3
// tree changes shape: chunk and group edges, stacks of several heights, and
// a partial last group after complete ones. Inputs are cut from a larger
// buffer too, so that bytes after the slice's end (which the kernel must
// not read as input) are there and differ.
func TestWideBLAKE3MatchesReference(t *testing.T) {
	if !widehash.Available {
		t.Log("this CPU has no AVX-512: keyed hashes go through zeebo/blake3; comparing widehash's portable kernel instead")
	}
	const k = 1024
	g := groupBytes
	sizes := []int{k + 1, 2*k - 1, 2 * k, 2*k + 1, 15*k + 3, g - 1, g, g + 1, g + k, g + k + 1,
		2*g - 1, 2 * g, 2*g + 1, 3 * g, 3*g + 5, 4 * g, 4*g + 1, 5*g - 7, 7 * g, 8 * g, 8*g + 1,
		9*g + 2*k + 9, 16 * g, 17*g + 1, 31*g + 100, 64 * g, 128 << 10, 1<<20 + 12345}
	buf := randBytes(7, 2<<20)
	zero := [32]byte{}
	for _, key := range []*[32]byte{&dataKey, &zero} {
		for _, n := range sizes {
			wideAndNarrow(t, key, buf[:n])
			wideAndNarrow(t, key, buf[len(buf)-n:])
			exact := make([]byte, n)
			copy(exact, buf[3:])
			wideAndNarrow(t, key, exact)
		}
	}
}

// A chunk hash and a xorb's validation give the same answers through
// either hasher.
func TestChunkHashSameThroughEitherHasher(t *testing.T) {
	data := randBytes(11, 200<<10)
	for _, n := range []int{0, 1, 1000, 1024, 1025, 64 << 10, 200 << 10} {
		a := newKeyedHasherWide(&dataKey, true).sum(data[:n])
		b := newKeyedHasherWide(&dataKey, false).sum(data[:n])
		if a != b {
			t.Fatalf("ChunkHash of %d bytes: %s against %s", n, a, b)
		}
	}
}

func FuzzWideBLAKE3(f *testing.F) {
	f.Add(uint32(groupBytes+1), byte(0))
	f.Add(uint32(3*groupBytes+7), byte(9))
	f.Fuzz(func(t *testing.T, n uint32, seed byte) {
		n = n%(40*groupBytes) + 1025
		wideAndNarrow(t, &dataKey, randBytes(uint64(seed), int(n)))
	})
}

// The kernel choice follows the best timing of each kernel, drops the
// wide kernel only when it is clearly slower, and is not decided by one
// interrupted round.
func TestWideHoldsTakesTheBestRounds(t *testing.T) {
	us := time.Microsecond
	timings := func(zeebo, wide time.Duration, slowRound int) func(bool) time.Duration {
		n := 0
		return func(w bool) time.Duration {
			n++
			d := zeebo
			if w {
				d = wide
			}
			if n == slowRound {
				d *= 50 // the scheduler took the core for this round
			}
			return d
		}
	}
	for _, c := range []struct {
		name        string
		zeebo, wide time.Duration
		slowRound   int
		want        bool
	}{
		{"wide 1.45x (widehash on an AMD EPYC)", 690 * us, 475 * us, 0, true},
		{"wide 0.69x (guts' kernel on an AMD EPYC)", 690 * us, 1000 * us, 0, false},
		{"wide 5 % slower is kept", 690 * us, 725 * us, 0, true},
		{"wide 12 % slower is not", 690 * us, 773 * us, 0, false},
		{"equal", 690 * us, 690 * us, 0, true},
		{"an interrupted zeebo round", 690 * us, 1000 * us, 1, false},
		{"an interrupted wide round", 690 * us, 475 * us, 2, true},
	} {
		if got := wideHolds(timings(c.zeebo, c.wide, c.slowRound)); got != c.want {
			t.Errorf("%s: wideHolds = %v, want %v", c.name, got, c.want)
		}
	}
}

// Calibration times real work with both kernels.
func TestTimeKernelMeasures(t *testing.T) {
	kt := newKernelTimer()
	if kt.time(false) <= 0 {
		t.Fatal("zeebo/blake3 timed at zero")
	}
	if widehash.Available && kt.time(true) <= 0 {
		t.Fatal("wide kernel timed at zero")
	}
	t.Logf("this process hashes with %s", HashKernel())
}
