package widehash

import "golang.org/x/sys/cpu"

//go:generate go run gen_kernel.go

// haveKernel: the kernel needs AVX512F only (VPRORD, masks, unpacks and
// 128-bit shuffles of ZMM registers); x/sys/cpu also checks that the OS
// saves the ZMM state.
var haveKernel = cpu.X86.HasAVX512F

//go:noescape
func compress16(l *lanes)

func compress(l *lanes) {
	if haveKernel {
		compress16(l)
		return
	}
	compressGeneric(l)
}
