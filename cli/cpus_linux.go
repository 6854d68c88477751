//go:build linux

package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"openxet/load"
)

// pinProcess restricts every thread of this process, and new threads with
// them (a thread inherits its creator's CPU set), to cpus, and sets
// GOMAXPROCS to match.
func pinProcess(cpus load.CPUSet) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	err := eachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &set) })
	if err != nil {
		return fmt.Errorf("pin to CPUs %s: %w", cpus, err)
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

// yieldCPU puts every thread of this process, and so the threads it makes
// later (a thread inherits its creator's scheduling), in Linux's
// SCHED_IDLE class, below any nice level: the process runs only when no
// other thread of its CPUs wants to. Where SCHED_IDLE is refused it sets
// nice 19 instead. It returns what it set, for a report.
func yieldCPU() (string, error) {
	err := eachThread(func(tid int) error {
		return unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
	})
	if err == nil {
		return "SCHED_IDLE", nil
	}
	if nerr := eachThread(func(tid int) error { return unix.Setpriority(unix.PRIO_PROCESS, tid, 19) }); nerr != nil {
		return "normal priority", errors.Join(err, nerr)
	}
	return "nice 19 (SCHED_IDLE refused: " + err.Error() + ")", nil
}

// eachThread calls fn with the id of every thread of this process, this
// one first, passing over /proc/self/task until a pass finds no thread it
// had not seen. A thread that ended meanwhile (ESRCH) is passed over. Use
// it for a setting new threads inherit from the thread that makes them.
func eachThread(fn func(tid int) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := fn(unix.Gettid()); err != nil {
		return err
	}
	seen := map[int]bool{unix.Gettid(): true}
	for {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || seen[tid] {
				continue
			}
			if err := fn(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("thread %d: %w", tid, err)
			}
			seen[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// processCPUs is the set of CPUs this process may run on.
func processCPUs() (load.CPUSet, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read CPU affinity: %w", err)
	}
	var cpus load.CPUSet
	for c, n := 0, set.Count(); len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
