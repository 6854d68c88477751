package xet

import (
	"testing"
)

// wideAndNarrow hashes data with the 16-chunk kernel and with zeebo/blake3
// under key and fails the test when they differ.
func wideAndNarrow(t testing.TB, key *[32]byte, data []byte) {
	t.Helper()
	wide := newKeyedHasherWide(key, true)
	if wide.wide == nil {
		t.Fatal("no wide hasher")
	}
	got := wide.wide.sum(data)
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
	if !wideBLAKE3 {
		t.Log("this CPU has no AVX-512: keyed hashes go through zeebo/blake3; comparing guts' portable code instead")
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
