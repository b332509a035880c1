//go:build cuda

package gpu

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"
)

// The kernels, generated from kernels/*.cu and committed: <module>.ptx by
// `make ptx` (nvcc, virtual architecture compute_75, which the driver
// JIT-compiles for any newer GPU: Turing through Blackwell), and, where
// present, <module>.fatbin by `make fatbin` (the same compute_75 PTX plus
// SASS compiled from it for sm_80, sm_90 and sm_100, so that A100, H100/H200
// and B200 nodes load the kernels without JIT compilation). The directory
// is embedded whole (sources, PTX, fatbins: a few MB).
//
//go:embed kernels
var kernelFiles embed.FS

// kernelImage returns the image of module name: its fatbin if one is
// embedded, else its PTX.
func kernelImage(name string) (file string, img []byte, err error) {
	for _, ext := range []string{".fatbin", ".ptx"} {
		file = name + ext
		img, err = kernelFiles.ReadFile("kernels/" + file)
		if !errors.Is(err, fs.ErrNotExist) {
			return file, img, err
		}
	}
	return file, nil, fmt.Errorf("module %s: no %s.fatbin or %s.ptx embedded (run make ptx)", name, name, name)
}

// loadKernels loads every module of kernelModules (launch_gen.go, generated
// from the .cu sources) and looks up every kernel it defines, so that an
// image the driver cannot use, or one that lacks a kernel, fails at Open,
// not mid-run.
func (e *Engine) loadKernels() error {
	for _, km := range kernelModules {
		file, img, err := kernelImage(km.name)
		if err != nil {
			return err
		}
		e.op = "load module " + file
		mod := cu.ModuleLoadData(string(img))
		for _, k := range km.kernels {
			e.op = "load kernel " + k + " of module " + file
			e.fns[k] = mod.GetFunction(k)
		}
	}
	if len(e.fns) == 0 {
		return fmt.Errorf("no kernels embedded (run make ptx)")
	}
	return nil
}

// dim is a launch configuration.
type dim struct{ gx, gy, gz, bx, by, bz, shmem int }

// grid1 covers n items with 1-D blocks of 256 threads, capped so that
// kernels use grid-stride loops for larger n.
func grid1(n int64) dim {
	const bs = 256
	g := (n + bs - 1) / bs
	g = max(1, min(g, 132*32))
	return dim{gx: int(g), gy: 1, gz: 1, bx: bs, by: 1, bz: 1}
}

// grid32x8 covers a w x h plane with blocks of 32 x 8 threads, one block
// per tw x th px (the block's output tile), and shmem bytes of dynamic
// shared memory per block.
func grid32x8(w, h, tw, th, shmem int) dim {
	return dim{gx: (w + tw - 1) / tw, gy: (h + th - 1) / th, gz: 1, bx: 32, by: 8, bz: 1, shmem: shmem}
}

// launchArgs runs kernel name on the compute stream with its arguments as
// the 64-bit words the typed launchers of launch_gen.go make (a kernel reads
// from each word the bytes of its parameter: the low 4 of an int or float).
// With Options.Debug it synchronises and reports a failure as the failure of
// this kernel.
func (e *Engine) launchArgs(name string, d dim, vals ...uint64) {
	f, ok := e.fns[name]
	if !ok {
		panic("gpu: unknown kernel " + name)
	}
	ptrs := make([]unsafe.Pointer, len(vals))
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	prev := e.op
	e.op = "kernel " + name
	cu.LaunchKernel(f, d.gx, d.gy, d.gz, d.bx, d.by, d.bz, d.shmem, e.compute, ptrs)
	if e.opts.Debug {
		e.compute.Synchronize()
	}
	e.op = prev
}

// planKey identifies a cached cuFFT plan.
type planKey struct {
	typ   cufft.Type
	h, w  int
	batch int
}

// plan returns a batched 2-D cuFFT plan on the compute stream.
func (e *Engine) plan(typ cufft.Type, h, w, batch int) cufft.Handle {
	k := planKey{typ, h, w, batch}
	if p, ok := e.plans[k]; ok {
		return p
	}
	prev := e.op
	e.op = fmt.Sprintf("cufft plan %v %dx%d batch %d", typ, h, w, batch)
	p := planMany2D(typ, h, w, batch)
	p.SetStream(e.compute)
	e.plans[k] = p
	e.op = prev
	e.sample()
	return p
}

// dropPlans destroys cached plans (their work areas can be large).
func (e *Engine) dropPlans() {
	e.sync()
	for k, p := range e.plans {
		p.Destroy()
		delete(e.plans, k)
	}
}

func (e *Engine) fftDebug(what string) {
	if e.opts.Debug {
		prev := e.op
		e.op = what
		e.compute.Synchronize()
		e.op = prev
	}
}
