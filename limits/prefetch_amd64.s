#include "go_asm.h"
#include "textflag.h"

// func prefetchEntry(t *tatTable, h uint64)
//
// Computes h's home slot as tatTable.home does and issues PREFETCHT0 for
// it. The table's fields are read here, outside Go, without the shard's
// lock: a concurrent grow can only make the hint point at the wrong line,
// and PREFETCH never faults.
TEXT ·prefetchEntry(SB), NOSPLIT, $0-16
	MOVQ t+0(FP), AX
	MOVQ h+8(FP), BX
	MOVQ tatTable_entries(AX), DX
	TESTQ DX, DX
	JZ done
	MOVQ tatTable_shift(AX), CX
	MOVQ $0x9E3779B97F4A7C15, SI
	IMULQ SI, BX
	SHRQ CX, BX
	IMULQ $tatEntry__size, BX
	PREFETCHT0 (DX)(BX*1)
done:
	RET

// func prefetchLine(p *atomic.Int32)
//
// Issues PREFETCHT0 for the cache line of p.
TEXT ·prefetchLine(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
