package load

import (
	"os"
	"strconv"
	"strings"
)

// hostCPU is the host's CPU time so far as /proc/stat counts it (Linux):
// the time the hypervisor ran other guests on this machine's virtual CPUs
// (steal) and all of it, in clock ticks; false where it cannot be read. A
// phase's steal over its total is the share of the machine that was not
// there to be had: on a shared VM, a phase whose latencies are far above
// the others' with a high steal measured the host, not the server.
func hostCPU() (steal, total float64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseHostCPU(string(b))
}

// parseHostCPU reads the aggregate "cpu" line of /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal (guest time is within user).
func parseHostCPU(stat string) (steal, total float64, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += float64(v)
		if i == 8 {
			steal = float64(v)
		}
	}
	return steal, total, true
}

// stealShare is the share of the host's CPU time stolen between two
// readings of hostCPU; -1 unless both were read and time passed.
func stealShare(steal0, total0 float64, ok0 bool, steal1, total1 float64, ok1 bool) float64 {
	if !ok0 || !ok1 || total1 <= total0 {
		return -1
	}
	return (steal1 - steal0) / (total1 - total0)
}
