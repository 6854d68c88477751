package xet

import "encoding/binary"

// bg4Regroup undoes byte grouping (docs/protocol.md §5.2 scheme 2): g holds four groups
// back to back (byte k of the original went to group k%4); out receives the
// original order. len(out) must equal len(g).
//
// It is a 4×n byte transpose. On amd64, SSE2 unpacks interleave 16 bytes
// of each group at a time (bg4Blocks); elsewhere, and for what is left,
// 64-bit registers interleave 8 at a time. A byte at a time, as before,
// took half the validation time of a bf16 upload (issue 50).
func bg4Regroup(g, out []byte) { regroupBG4(g, out, true) }

// regroupBG4 is bg4Regroup; with simd false it uses no assembly, so that
// tests cover the portable code on every machine.
func regroupBG4(g, out []byte, simd bool) {
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
	i := 0
	if simd {
		i = bg4Blocks(out, g0, g1, g2, g3, q)
	}
	const (
		m8  = 0x00ff00ff00ff00ff
		m16 = 0x0000ffff0000ffff
		m32 = 0x00000000ffffffff
	)
	le := binary.LittleEndian
	for ; i+8 <= q; i += 8 {
		a, b, c, d := le.Uint64(g0[i:]), le.Uint64(g1[i:]), le.Uint64(g2[i:]), le.Uint64(g3[i:])
		// Bytes of a and b in pairs: abEven holds a0 b0 a2 b2 a4 b4 a6 b6,
		// abOdd a1 b1 a3 b3 a5 b5 a7 b7; cd likewise.
		abEven, abOdd := a&m8|(b<<8)&^m8, (a>>8)&m8|b&^m8
		cdEven, cdOdd := c&m8|(d<<8)&^m8, (c>>8)&m8|d&^m8
		// Pairs into words: w04 holds output words 0 and 4 (a0 b0 c0 d0,
		// a4 b4 c4 d4), and so on.
		w04, w26 := abEven&m16|(cdEven<<16)&^m16, (abEven>>16)&m16|cdEven&^m16
		w15, w37 := abOdd&m16|(cdOdd<<16)&^m16, (abOdd>>16)&m16|cdOdd&^m16
		o := out[4*i : 4*i+32]
		le.PutUint64(o[0:], w04&m32|w15<<32)
		le.PutUint64(o[8:], w26&m32|w37<<32)
		le.PutUint64(o[16:], w04>>32|w15&^m32)
		le.PutUint64(o[24:], w26>>32|w37&^m32)
	}
	for ; i < q; i++ {
		o := out[4*i : 4*i+4 : 4*i+4]
		o[0], o[1], o[2], o[3] = g0[i], g1[i], g2[i], g3[i]
	}
	groups := [3][]byte{g0, g1, g2}
	for j := 0; j < r; j++ {
		out[4*q+j] = groups[j][q]
	}
}
