package xet

// bg4Interleave16 writes out[64k:64k+64] from g0..g3[16k:16k+16] for
// k < blocks: byte j of each group's 16 goes to out[64k+4j+group]. It
// uses SSE2, which every amd64 CPU has.
//
//go:noescape
func bg4Interleave16(out, g0, g1, g2, g3 *byte, blocks int)

// bg4Blocks un-groups whole 16-byte blocks of the first q bytes of each
// group into out and returns how many bytes of each group it consumed.
func bg4Blocks(out, g0, g1, g2, g3 []byte, q int) int {
	blocks := q / 16
	if blocks == 0 {
		return 0
	}
	// The assembly trusts its pointers: check once what it will touch.
	n := 16 * blocks
	_, _, _, _, _ = out[4*n-1], g0[n-1], g1[n-1], g2[n-1], g3[n-1]
	bg4Interleave16(&out[0], &g0[0], &g1[0], &g2[0], &g3[0], blocks)
	return n
}
