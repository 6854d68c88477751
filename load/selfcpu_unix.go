//go:build unix

package load

import "syscall"

// selfCPU is the CPU time this process has used so far, user and system,
// in seconds (its children, such as the abuser's process, not included);
// false where it cannot be read.
func selfCPU() (float64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return sec(ru.Utime) + sec(ru.Stime), true
}
