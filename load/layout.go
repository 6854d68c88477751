package load

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// CPUSet is a set of CPU numbers, sorted and without duplicates, written as
// taskset -c and /proc/PID/status write them: "0", "0-1,4".
type CPUSet []int

// maxCPU bounds the CPU numbers ParseCPUSet accepts.
const maxCPU = 4095

// ParseCPUSet reads a CPU list such as "1", "0,2" or "0-3,8".
func ParseCPUSet(s string) (CPUSet, error) {
	var set CPUSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b > maxCPU {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number or range like 0-3 (0 to %d)", s, part, maxCPU)
		}
		for c := a; c <= b; c++ {
			set = append(set, c)
		}
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

// String writes the set as a CPU list, ranges folded: "0-2,5".
func (c CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Overlaps reports whether c and d share a CPU.
func (c CPUSet) Overlaps(d CPUSet) bool {
	for _, x := range c {
		if slices.Contains(d, x) {
			return true
		}
	}
	return false
}

// ErrLayout means the server does not run on the CPUs Config.ServerCPUs
// names; the run was not made.
var ErrLayout = errors.New("server CPU layout")

func newLayout(server, load CPUSet) Layout {
	return Layout{ServerCPUs: server.String(), LoadCPUs: load.String(),
		Pinned: len(server) > 0 && len(load) > 0 && !server.Overlaps(load)}
}

// checkServerCPUs compares what the server reports with what the caller
// expects (nil: anything).
func checkServerCPUs(reported string, known bool, want CPUSet) (CPUSet, error) {
	if !known {
		if len(want) > 0 {
			return nil, fmt.Errorf("%w: the server does not report its CPUs (metric openxet_process_cpus), so --server-cpus %s cannot be checked", ErrLayout, want)
		}
		return nil, nil
	}
	got, err := ParseCPUSet(reported)
	if err != nil {
		return nil, fmt.Errorf("%w: the server reports %w", ErrLayout, err)
	}
	if len(want) > 0 && !slices.Equal(got, want) {
		return got, fmt.Errorf("%w: the server runs on CPUs %s, not %s; start it with `taskset -c %s openxet serve …`", ErrLayout, got, want, want)
	}
	return got, nil
}

// checkNodeCPUs is checkServerCPUs for a deployment: each node reports
// its own set (reported[i], known[i]), and what the run compares with want
// is their union, the CPUs the nodes run on together. With one node it is
// checkServerCPUs.
func checkNodeCPUs(ns []string, reported []string, known []bool, want CPUSet) (CPUSet, error) {
	if len(ns) == 1 {
		return checkServerCPUs(reported[0], known[0], want)
	}
	var union CPUSet
	for i, n := range ns {
		if !known[i] {
			if len(want) > 0 {
				return nil, fmt.Errorf("%w: %s does not report its CPUs (metric openxet_process_cpus), so --server-cpus %s cannot be checked", ErrLayout, n, want)
			}
			return nil, nil
		}
		got, err := ParseCPUSet(reported[i])
		if err != nil {
			return nil, fmt.Errorf("%w: %s reports %w", ErrLayout, n, err)
		}
		union = append(union, got...)
	}
	slices.Sort(union)
	union = slices.Compact(union)
	if len(want) > 0 && !slices.Equal(union, want) {
		return union, fmt.Errorf("%w: the %d nodes run on CPUs %s together, not %s; start each with `taskset -c <cpus> openxet serve …` within %s", ErrLayout, len(ns), union, want, want)
	}
	return union, nil
}
