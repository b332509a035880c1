//go:build cuda

package gpu

import (
	"embed"
	"fmt"
	"math"
	"regexp"
	"sort"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"
)

// The kernels' PTX, generated from kernels/*.cu by `make ptx` (nvcc,
// virtual architecture compute_75, which the driver JIT-compiles for any
// newer GPU: Turing through Blackwell) and committed.
//
//go:embed kernels/*.ptx
var ptxFiles embed.FS

var entryRE = regexp.MustCompile(`(?m)^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_][A-Za-z0-9_]*)`)

// loadKernels JIT-loads every embedded module and looks up every entry, so
// that a PTX the driver cannot use fails at Open, not mid-run.
func (e *Engine) loadKernels() error {
	ents, err := ptxFiles.ReadDir("kernels")
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	for _, d := range ents {
		names = append(names, d.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		src, err := ptxFiles.ReadFile("kernels/" + name)
		if err != nil {
			return err
		}
		e.op = "load module " + name
		mod := cu.ModuleLoadData(string(src))
		for _, m := range entryRE.FindAllStringSubmatch(string(src), -1) {
			if _, dup := e.fns[m[1]]; dup {
				return fmt.Errorf("kernel %s defined twice (module %s)", m[1], name)
			}
			e.fns[m[1]] = mod.GetFunction(m[1])
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

// launch runs kernel name on the compute stream. Arguments are
// cu.DevicePtr, int (passed as 64 bits, so the kernel may declare int or
// long long), float32 or float64. With Options.Debug it synchronises and
// reports a failure as the failure of this kernel.
func (e *Engine) launch(name string, d dim, args ...any) {
	f, ok := e.fns[name]
	if !ok {
		panic("gpu: unknown kernel " + name)
	}
	vals := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case cu.DevicePtr:
			vals[i] = uint64(v)
		case int:
			vals[i] = uint64(int64(v))
		case int64:
			vals[i] = uint64(v)
		case float32:
			vals[i] = uint64(math.Float32bits(v))
		case float64:
			vals[i] = math.Float64bits(v)
		default:
			panic(fmt.Sprintf("gpu: kernel %s: argument %d of type %T", name, i, a))
		}
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
