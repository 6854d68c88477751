//go:build !amd64

package widehash

var haveKernel = false

func compress(l *lanes) { compressGeneric(l) }
