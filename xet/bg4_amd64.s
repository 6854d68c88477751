#include "textflag.h"

// func bg4Interleave16(out, g0, g1, g2, g3 *byte, blocks int)
//
// Per block: X0..X3 hold 16 bytes of groups 0..3 (a, b, c, d). Byte
// unpacks pair a with b and c with d (a0 b0 a1 b1 ...), word unpacks pair
// those pairs (a0 b0 c0 d0 a1 b1 c1 d1 ...): 64 bytes in original order.
TEXT ·bg4Interleave16(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ g0+8(FP), R8
	MOVQ g1+16(FP), R9
	MOVQ g2+24(FP), R10
	MOVQ g3+32(FP), R11
	MOVQ blocks+40(FP), CX
	XORQ AX, AX // offset into each group

loop:
	MOVOU (R8)(AX*1), X0
	MOVOU (R9)(AX*1), X1
	MOVOU (R10)(AX*1), X2
	MOVOU (R11)(AX*1), X3
	MOVO  X0, X4
	PUNPCKLBW X1, X0 // a0 b0 ... a7 b7
	PUNPCKHBW X1, X4 // a8 b8 ... a15 b15
	MOVO  X2, X5
	PUNPCKLBW X3, X2 // c0 d0 ... c7 d7
	PUNPCKHBW X3, X5 // c8 d8 ... c15 d15
	MOVO  X0, X6
	PUNPCKLWL X2, X0 // a0 b0 c0 d0 ... a3 b3 c3 d3
	PUNPCKHWL X2, X6 // a4 ... d7
	MOVO  X4, X7
	PUNPCKLWL X5, X4 // a8 ... d11
	PUNPCKHWL X5, X7 // a12 ... d15
	MOVOU X0, 0(DI)
	MOVOU X6, 16(DI)
	MOVOU X4, 32(DI)
	MOVOU X7, 48(DI)
	ADDQ  $16, AX
	ADDQ  $64, DI
	DECQ  CX
	JNZ   loop
	RET
