//go:build !unix

package load

// selfCPU cannot read the process's CPU time here.
func selfCPU() (float64, bool) { return 0, false }
