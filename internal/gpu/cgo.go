//go:build cuda

package gpu

// The few driver calls that mumax's cu package does not wrap: contexts with
// blocking synchronisation, streams with a priority, events (stream
// ordering without host waits), and
// a batched 2-D cuFFT plan (mumax's cufft.PlanMany passes Go []int, 64-bit,
// where cuFFT reads 32-bit ints).
// Failures panic with a cu.Result, like mumax's own calls, so the engine's
// recover turns them into *Error values.

/*
#cgo LDFLAGS: -lcufft -lcuda
#include <cuda.h>
#include <cufft.h>
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"
)

func check(r C.CUresult) {
	if r != C.CUDA_SUCCESS {
		panic(cu.Result(r))
	}
}

// ctxCreate creates a context on dev whose synchronising calls block the
// thread instead of spinning, leaving the CPU to the I/O goroutines.
func ctxCreate(dev cu.Device) cu.Context {
	return cu.CtxCreate(uint(C.CU_CTX_SCHED_BLOCKING_SYNC), dev)
}

type event uintptr

// eventCreate makes an event whose synchronize blocks the thread after a
// short spin (CU_EVENT_BLOCKING_SYNC): an event of the default kind spins
// for as long as the GPU works (a whole deconvolution iteration), taking a
// core from the I/O goroutines, and two engine goroutines (Lane) two.
func eventCreate() event {
	var ev C.CUevent
	check(C.cuEventCreate(&ev, C.CU_EVENT_DISABLE_TIMING|C.CU_EVENT_BLOCKING_SYNC))
	return *(*event)(unsafe.Pointer(&ev))
}

// c and streamC reinterpret the handles, which mumax and this file keep as
// uintptr, as the C pointer types (same size; no Go pointer involved).
func (ev event) c() C.CUevent { return *(*C.CUevent)(unsafe.Pointer(&ev)) }

func streamC(s cu.Stream) C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// record marks the point of stream s that ev completes at.
func (ev event) record(s cu.Stream) { check(C.cuEventRecord(ev.c(), streamC(s))) }

// synchronize blocks until ev has completed: it polls for up to spinWait
// (the many short waits of the BaSiC iterations end within it, without a
// wake-up), then sleeps in cuEventSynchronize.
func (ev event) synchronize() {
	t0 := time.Now()
	for {
		switch r := C.cuEventQuery(ev.c()); r {
		case C.CUDA_SUCCESS:
			return
		case C.CUDA_ERROR_NOT_READY:
		default:
			check(r)
		}
		if time.Since(t0) > spinWait {
			break
		}
	}
	check(C.cuEventSynchronize(ev.c()))
}

// spinWait is how long synchronize polls before it blocks: longer than a
// BaSiC iteration (whose wait a wake-up would double), far shorter than a
// deconvolution iteration.
const spinWait = 2 * time.Millisecond

// streamCreateFirst creates a stream of the context's greatest priority:
// the GPU schedules its pending blocks before those of other streams (a
// lane's, of the default, least priority), so that the short kernels of
// the stitch stage's BaSiC iterations are not queued behind a lane's
// deconvolution. Running blocks are not preempted.
func streamCreateFirst() cu.Stream {
	var least, greatest C.int
	check(C.cuCtxGetStreamPriorityRange(&least, &greatest))
	var st C.CUstream
	check(C.cuStreamCreateWithPriority(&st, C.CU_STREAM_DEFAULT, greatest))
	return *(*cu.Stream)(unsafe.Pointer(&st))
}

func (ev event) destroy() { check(C.cuEventDestroy(ev.c())) }

// streamWait makes later work on s wait for ev, without blocking the host.
func streamWait(s cu.Stream, ev event) { check(C.cuStreamWaitEvent(streamC(s), ev.c(), 0)) }

// planMany2D creates a cuFFT plan for batch contiguous h x w transforms.
func planMany2D(typ cufft.Type, h, w, batch int) cufft.Handle {
	var handle C.cufftHandle
	n := [2]C.int{C.int(h), C.int(w)}
	if r := C.cufftPlanMany(&handle, 2, &n[0], nil, 1, 0, nil, 1, 0, C.cufftType(typ), C.int(batch)); r != C.CUFFT_SUCCESS {
		panic(cufft.Result(r))
	}
	return cufft.Handle(handle)
}
