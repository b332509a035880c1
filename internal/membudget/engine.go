package membudget

// EngineMemory is what an engine reports of itself to a stage's memory
// model (the stage's memory.go holds the formulas per geometry; only the
// engine knows where its data lives and what it maps into the process):
//
//	OnDevice  the engine keeps the stage's working data in device memory
//	          (the CUDA engine): the stage takes its device form (planes
//	          to the device as they are read, results back per plane)
//	          and its device figures; false: the data is in the Go heap
//	Fixed     host bytes that do not depend on the data: the runtime and,
//	          for a device, the CUDA context, libraries, modules and
//	          pinned staging buffers
//	Lazy      host bytes the engine maps after the stage starts (cuFFT
//	          plans, JIT-compiled modules); the stage plans
//	          max(Fixed, resident set at start + Lazy)
type EngineMemory struct {
	OnDevice    bool
	Fixed, Lazy int64
}

// MemoryReporter is an engine that reports its EngineMemory. The CUDA
// engine (internal/gpu) does; an engine that does not is planned with the
// stage's CPU figures, the larger host model.
type MemoryReporter interface {
	EngineMemory() EngineMemory
}

// CUDAEngine is what the CUDA engine (internal/gpu) reports: its data on
// the device; 512 MiB fixed (context, cuFFT, modules, pinned staging
// buffers) and 256 MiB mapped later (the figures every stage planned with
// before engines reported them; the resident set with the engine open is
// measured when a stage starts, and kintsugi-gpubench prints it).
var CUDAEngine = EngineMemory{OnDevice: true, Fixed: 512 << 20, Lazy: 256 << 20}

// EngineMemoryOf is e's report when e is a MemoryReporter, else cpu (the
// stage's figures for its CPU engine).
func EngineMemoryOf(e any, cpu EngineMemory) EngineMemory {
	if r, ok := e.(MemoryReporter); ok {
		return r.EngineMemory()
	}
	return cpu
}
