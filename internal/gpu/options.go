package gpu

import (
	"errors"
	"fmt"
)

// ErrNoCUDA is returned by Open in a binary built without the cuda tag.
var ErrNoCUDA = errors.New("this binary was built without CUDA support; rebuild with `make gpu` or run with --device cpu")

// ErrOutOfMemory matches (errors.Is) any GPU allocation failure.
var ErrOutOfMemory = errors.New("out of GPU memory")

// ErrBroken is returned by every call after a CUDA failure that leaves the
// context unusable (a failed kernel launch, an illegal address).
var ErrBroken = errors.New("gpu engine unusable after an earlier CUDA error")

// ErrClosed is returned by calls on a closed engine.
var ErrClosed = errors.New("gpu engine closed")

// Options select the device and debugging behaviour.
type Options struct {
	// Device is the index of the GPU among the visible ones (--gpu). The
	// CUDA driver numbers only the devices that CUDA_VISIBLE_DEVICES lets
	// through (SLURM sets it to the job's GPUs), so 0 is the job's first GPU.
	Device int
	// Debug synchronises after every kernel launch and cuFFT call, so that a
	// failure is reported by the launch that caused it (slow).
	Debug bool
}

// MemStats are device-memory figures in bytes.
type MemStats struct {
	Free, Total int64 // cuMemGetInfo now
	// PoolInUse is memory handed out by the buffer pool now, PoolCached the
	// free buffers it keeps for reuse, PoolPeak the peak of in use + cached.
	PoolInUse, PoolCached, PoolPeak int64
	// DevicePeak is the largest Total-Free seen (sampled after allocations
	// and after every call); it includes cuFFT work areas, the context and
	// other processes on the same GPU.
	DevicePeak int64
}

// OpTime is the time the engine goroutine spent on one kind of call (its
// op name): Calls calls, Seconds of wall time from the call's start on the
// goroutine to its end (kernels it left running on a stream are counted by
// the call that waits for them).
type OpTime struct {
	Op      string
	Calls   int
	Seconds float64
}

// Error is a CUDA driver or cuFFT failure.
type Error struct {
	Lib  string // "cuda" or "cufft"
	Code int    // CUresult or cufftResult
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s (%d)", e.Lib, e.Name, e.Code) }

// Is reports ErrOutOfMemory for allocation failures.
func (e *Error) Is(target error) bool {
	if target != ErrOutOfMemory {
		return false
	}
	return (e.Lib == "cuda" && e.Code == 2) || (e.Lib == "cufft" && e.Code == 2)
}
