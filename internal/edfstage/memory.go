package edfstage

import (
	"context"
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
)

// ConfigKeyMem is the config key of the EDF job's memory (MB), named by the
// error of a budget too small for the stage.
const ConfigKeyMem = "resources.mem_edf"

// The stage's host memory (resident set), in bytes, for a cycle whose
// largest channel has N planes of H x W px, with plane = H·W·2 (one uint16
// plane: a reader's decoded plane, the output plane, the index map or the
// TIFF writer's page):
//
//	stacked (edf.CPU and any engine without a streamed form)
//	    heap = Stacks·N·plane + engine + plane
//	    The engine needs the whole stack in host memory: Stacks (1 or 2)
//	    channel stacks are held at once, the one being fused and, with 2,
//	    the next one being read meanwhile (its planes are allocated as
//	    they are read). plane: the TIFF writer's page. engine is what the
//	    fusion adds, its result included:
//	      variance  3·H·W·2 (index map, smoothed map, output) plus
//	                Workers·(StripRows + 2·RadiusY + 2)·W·24 (each strip
//	                in flight: Gaussian tmp and s as float32, best as
//	                float64, its accumulators)
//	      wavelet   H·W·(6·L + 44) (per level a float32 best magnitude
//	                and a uint16 selection; energy, best energy and the
//	                residual sum as float64; 3 float32 transform planes;
//	                the height map, its majority copy and the output)
//	streamed (an engine with a device stack: the GPU's EDFDeviceStack)
//	    heap = Readers·plane + 3·plane
//	    Channels run one at a time; Readers goroutines read planes and
//	    each plane goes to the device stack as soon as it is read and is
//	    dropped (the gate, the argmax over z and the gather run on the
//	    device); then the output plane and index map come back and are
//	    written.
//
// The need of a plan is
//
//	fixed + heap / liveFraction
//
// where fixed is what the engine reports (membudget.EngineMemory: the
// runtime, CPU 64 MiB, or the CUDA context, modules and pinned staging
// buffers, GPU 512 MiB), or the resident set when the stage starts (the
// engine is open) plus what the engine maps later (CPU 32 MiB, GPU
// 256 MiB), whichever is larger. The Go runtime's soft limit is set to
// goFraction of the budget less fixed, so garbage (planes already fused or
// uploaded) is collected before the heap grows past the plan.
const (
	liveFraction = 0.80
	goFraction   = 0.95
)

// Streamer is a Fuser with the device-buffer form, found by interface
// assertion: a device stack filled plane by plane and fused there
// (edf.DeviceStack; the CUDA engine, *gpu.Engine, is one as it is).
type Streamer interface {
	edf.Fuser
	EDFDeviceStack(ctx context.Context, n, h, w int) (edf.DeviceStack, error)
}

// streamerOf returns f's streamed form, or nil when it has none.
func streamerOf(f edf.Fuser) Streamer {
	st, _ := f.(Streamer)
	return st
}

// cpuEngineMemory is the CPU engine's report (the runtime): also that of
// an engine that reports nothing.
var cpuEngineMemory = membudget.EngineMemory{Fixed: 64 << 20, Lazy: 32 << 20}

// memPlan is how the stage is sized.
type memPlan struct {
	Streamed bool // planes to the device as they are read (streamed form)
	Stacks   int  // stacked: channel stacks in host memory at once (1 or 2)
	Readers  int  // planes read at once
}

func (p memPlan) String() string {
	if p.Streamed {
		return fmt.Sprintf("streamed, %d planes read at once", p.Readers)
	}
	return fmt.Sprintf("%d channel stack(s) in memory, %d planes read at once", p.Stacks, p.Readers)
}

type memModel struct {
	N, H, W      int // largest channel: planes, px
	Workers      int
	P            edf.Params
	StripRows    int
	streamed     bool
	fixed        int64
	budget       int64 // 0: none
	budgetSource string
}

// newMemModel is the model of engine f on a cycle whose largest channel has
// n planes of h x w px; resident is the process's resident set now (0:
// unknown), with the engine open.
func newMemModel(f edf.Fuser, n, h, w, workers int, p edf.Params, resident, budget int64, source string) memModel {
	m := memModel{N: n, H: h, W: w, Workers: max(1, workers), P: p, StripRows: edf.DefaultStripRows,
		budget: budget, budgetSource: source}
	if c, ok := f.(edf.CPU); ok {
		m.Workers = max(1, c.Workers)
		if c.StripRows > 0 {
			m.StripRows = c.StripRows
		}
	}
	m.streamed = streamerOf(f) != nil
	em := membudget.EngineMemoryOf(f, cpuEngineMemory)
	m.fixed = max(em.Fixed, resident+em.Lazy)
	return m
}

func (m memModel) px() int64    { return int64(m.H) * int64(m.W) }
func (m memModel) plane() int64 { return m.px() * 2 }

// engine is what the stacked fusion adds to its input stack.
func (m memModel) engine() int64 {
	if m.P.Method == edf.MethodWavelet {
		L := m.P.WaveletLevels
		if L == 0 {
			L = edf.AutoLevels(m.W, m.H)
		}
		return m.px() * int64(6*L+44)
	}
	strips := int64(min(m.Workers, (m.H+m.StripRows-1)/m.StripRows))
	return 3*m.plane() + strips*int64(m.StripRows+2*m.P.RadiusY+2)*int64(m.W)*24
}

// live is the heap under p.
func (m memModel) live(p memPlan) int64 {
	if p.Streamed {
		return int64(p.Readers)*m.plane() + 3*m.plane()
	}
	return int64(p.Stacks)*int64(m.N)*m.plane() + m.engine() + m.plane()
}

// need is the budget a plan needs.
func (m memModel) need(p memPlan) int64 {
	return m.fixed + int64(math.Ceil(float64(m.live(p))/liveFraction))
}

// goLimit is the Go runtime's soft limit under the budget (0: none).
func (m memModel) goLimit() int64 {
	if m.budget <= 0 {
		return 0
	}
	return int64(float64(m.budget-m.fixed) * goFraction)
}

// plans lists the plans from the preferred down to the smallest working
// set: streamed, the readers from min(Workers, N) halved down to 1;
// stacked, the next channel read ahead (2 stacks), then one stack (its
// planes are all held, so the readers cost nothing more).
func (m memModel) plans() []memPlan {
	r := max(1, min(m.Workers, m.N))
	var out []memPlan
	if m.streamed {
		for ; r >= 1; r = r / 2 {
			out = append(out, memPlan{Streamed: true, Readers: r})
			if r == 1 {
				break
			}
		}
		if out[len(out)-1].Readers != 1 {
			out = append(out, memPlan{Streamed: true, Readers: 1})
		}
		return out
	}
	return append(out, memPlan{Stacks: 2, Readers: r}, memPlan{Stacks: 1, Readers: r})
}

// choose returns the first plan that fits the budget (the preferred one
// when there is no budget), or a *membudget.NeedError naming the smallest
// working set.
func (m memModel) choose() (memPlan, error) {
	ps := m.plans()
	if p, ok := membudget.First(ps, m.budget, m.need); ok {
		return p, nil
	}
	small := ps[len(ps)-1]
	what := fmt.Sprintf("one channel of %d planes of %dx%d px held whole (%s) for the %s engine, its fusion (%s), runtime %s",
		m.N, m.W, m.H, membudget.Format(int64(m.N)*m.plane()), m.P.Method, membudget.Format(m.engine()), membudget.Format(m.fixed))
	if small.Streamed {
		what = fmt.Sprintf("one %dx%d px plane read and streamed to the device (%s), the output plane and index map, runtime and engine %s",
			m.W, m.H, membudget.Format(m.plane()), membudget.Format(m.fixed))
	}
	return memPlan{}, &membudget.NeedError{Stage: "edf", Budget: m.budget, Source: m.budgetSource,
		Need: m.need(small), What: what, ConfigKey: ConfigKeyMem}
}
