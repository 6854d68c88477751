//go:build !linux

package cli

import (
	"errors"

	"openxet/load"
)

var errNoAffinity = errors.New("CPU pinning needs Linux; use your system's tool to pin the process")

func pinProcess(load.CPUSet) error { return errNoAffinity }

func processCPUs() (load.CPUSet, error) { return nil, errNoAffinity }

func yieldCPU() (string, error) {
	return "normal priority", errors.New("lowering the CPU priority needs Linux")
}
