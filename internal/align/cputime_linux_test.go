//go:build linux

package align_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) of this process so far,
// or a negative duration where it is not available.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
