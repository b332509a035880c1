//go:build !linux

package align_test

import "time"

// processCPU returns a negative duration: process CPU time is read on
// Linux only.
func processCPU() time.Duration { return -1 }
