// Package gpu is the CUDA engine of the four stages, on one NVIDIA GPU
// through the CUDA driver API and cuFFT (github.com/mumax/3/cuda/cu and
// .../cufft): for stitch, BaSiC illumination fits, phase-correlation
// translations and correction + blending (basic.go, align.go, blend.go); for
// decon, Richardson-Lucy / Biggs-Andrews deconvolution, resident on the
// device or streamed through it from pinned host memory (decon.go,
// decon_stream.go, decon_fft.go); for edf, extended depth of field
// (edf.go); for registration, downsampling, block phase correlation and the
// warp (register.go). One engine serves every algorithm interface
// (basic.Fitter, align.PairTranslator, blend.Blender, decon.Deconvolver,
// register.Backend, the EDF methods) and, for stages chained on the card,
// device-buffer forms (DevStack, EDFStack).
//
// Build tags: the engine is compiled only with -tags cuda (make gpu). Without
// the tag, Open returns ErrNoCUDA and nothing here needs cgo, so
// CGO_ENABLED=0 go build ./... keeps working.
//
// Threading: a CUDA context is current on one OS thread. Open starts one
// goroutine locked to its OS thread that creates the context and owns the
// GPU; every exported method hands its work to that goroutine and waits.
// Methods may be called from any goroutine; calls are serialised.
//
// Errors: mumax's cu and cufft packages panic on every CUDA/cuFFT failure.
// The engine recovers those panics on its thread and returns them as *Error
// values wrapped with the operation ("gpu: blend: alloc 1.20 GiB: cuda
// CUDA_ERROR_OUT_OF_MEMORY (2)"); errors.Is(err, ErrOutOfMemory) tells an
// out-of-memory failure. A failed launch leaves the context unusable: every
// later call returns ErrBroken.
//
// Data conventions follow internal/raster: planes (y, x), stacks (n, y, x),
// row-major, x fastest, on the host and on the device. Intensities are counts
// (uint16) or counts/65535 (float32), as each method states.
//
// Precision, per step (the conformance suites in basictest, aligntest,
// blendtest, decontest, edftest and registertest pass for both CPU and GPU; the
// tests with -tags cuda compare the two on the same data; decon, edf and
// register state theirs on Decon, Engine.EDF and Registrar):
//   - resize to the BaSiC working size: float32 samples, float64 sums in the
//     CPU's order: bit-identical to basic.ResizeToWorking;
//   - BaSiC inexact-ALM iterations, DCTs (as matrix products), reweighting:
//     float64 throughout, like basic.CPU (the ||D-A-E||/||D|| < 1e-6 stop
//     sits at float32's noise floor, so float32 would change iteration
//     counts); profiles measured bit-identical to the CPU's on the test
//     stacks and on a production plane, tolerance 1e-3 (flat) / 1 count
//     (dark) in the tests;
//   - correction: float32, the CPU's expression: bit-identical;
//   - blending: blend.Taper's float64 tapers, float64 sums in tile order:
//     bit-identical to blend.CPU;
//   - phase correlation: cuFFT Z2Z (float64, the CPU uses complex128), the
//     same crop, window, blur and peak rules; NCC sums in float64
//     (translations equal to the CPU's, sub-pixel ones within 1e-6 px).
//
// Memory: BaSiC fits are batched up to half of the free device memory
// (lossless: each fit's arithmetic is independent of the others); the
// stitch stage at production size peaks at about 6 GiB. Deconvolution
// plans its device memory against a budget (deconMakePlan) and streams
// when the resident form does not fit.
package gpu

// The typed kernel launchers (launch_gen.go, e.launchCropMeans(d, ...)) are
// generated from kernels/*.cu by kernelgen: a launch with a wrong argument
// count or type does not compile.
//
//go:generate go run ./kernelgen -dir kernels -out launch_gen.go
