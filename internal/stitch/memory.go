package stitch

import (
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
)

// ConfigKeyMem is the config key of the stitch job's memory (MB), named by
// the error of a budget too small for the stage.
const ConfigKeyMem = "resources.mem_stitch"

// The stage's host memory (resident set), in bytes, for one cycle of T raw
// tiles of h x w px blended into an H x W mosaic:
//
//	raw      one plane of raw tiles, T·h·w·2 (uint16)
//	mosaic   one stitched plane, H·W·2 (uint16)
//	profile  one plane's BaSiC profiles held until written: flatfield,
//	         darkfield and the darkfield in counts, 3·h·w·4 (float32)
//	engine   what the engine adds (engineMem)
//
// Two phases peak:
//
//	alignment  fixed + raw + max(fit + profile, align)       (reference plane)
//	pipeline   fixed + Planes·raw + max(Batch·fit, blend)
//	           + (Writes+1)·mosaic + (Writes+Batch)·profile
//
// where Planes raw planes are in memory at once (the batch being fitted and
// blended plus the read-ahead; a plane's tiles are dropped as soon as it is
// blended), Batch planes are fitted together, and Writes stitched planes
// wait for or are in TIFF encoding while one more is being blended.
// Everything but fixed is Go heap: it is planned at liveFraction of the
// budget left after fixed, and the Go runtime's soft limit is set to
// goFraction of it, so garbage is collected before the heap grows past it.
const (
	liveFraction = 0.80
	goFraction   = 0.95
)

// engineMem is an engine's host memory per phase, bytes.
type engineMem struct {
	// Fixed is what does not depend on the data: the runtime, and for the
	// GPU the CUDA context, libraries, modules and pinned buffers. The
	// stage takes the resident set when it starts (the engine is open)
	// plus Lazy (what the engine maps later, e.g. cuFFT plans), or Fixed,
	// whichever is larger.
	Fixed int64
	Lazy  int64
	Fit   int64 // per plane fitted at once, beyond its raw tiles
	Blend int64 // one CorrectAndBlend, beyond its raw tiles and its uint16 mosaic
	Align int64 // the alignment, beyond the reference plane's raw tiles
}

// geometry is what the memory of a cycle depends on.
type geometry struct {
	Tiles, H, W         int // tiles per plane, tile size px
	MosaicH, MosaicW    int // px
	Workers, WorkingDim int // goroutines; BaSiC working grid side (px)
}

func (g geometry) tilePx() int64   { return int64(g.H) * int64(g.W) }
func (g geometry) planePx() int64  { return int64(g.Tiles) * g.tilePx() }
func (g geometry) mosaicPx() int64 { return int64(g.MosaicH) * int64(g.MosaicW) }

// cpuMem is the CPU engine's model: a fit converts its plane to float32
// (stitch toStack) and keeps the resized working stack and full-size
// profiles; CorrectAndBlend holds the corrected float32 tiles and the
// float32 mosaic; the alignment holds the corrected reference plane and one
// FFT workspace per worker (at most a whole tile of complex128, window and
// plan).
func cpuMem(g geometry) engineMem {
	ws := int64(g.WorkingDim) * int64(g.WorkingDim)
	return engineMem{
		Fit:   g.planePx()*4 + int64(g.Tiles)*ws*8*2 + 4*g.tilePx()*4,
		Blend: g.planePx()*4 + g.mosaicPx()*4 + int64(g.Workers)*int64(g.MosaicW)*16,
		Align: g.planePx()*4 + int64(g.Workers)*g.tilePx()*24,
	}
}

// gpuMem is the model of an engine whose data is on the device (the CUDA
// engine): tiles go to the device from their uint16 buffers through fixed
// pinned staging buffers, and the mosaic comes back as uint16, so the host
// holds only the profiles, the float32 reference plane of the alignment
// and what the engine reports as fixed (the CUDA driver, cuFFT and the
// JIT-compiled modules; measured when the stage starts, with the engine
// open; gpubench prints it).
func gpuMem(g geometry) engineMem {
	return engineMem{
		Fit:   2 * g.tilePx() * 4,
		Blend: int64(g.Workers) << 20,
		Align: g.planePx()*4 + int64(g.Workers)*g.tilePx()*4,
	}
}

// cpuEngineMemory is the CPU engine's report (the runtime): also that of
// an engine that reports nothing.
var cpuEngineMemory = membudget.EngineMemory{Fixed: 64 << 20, Lazy: 32 << 20}

// engineMemory is the model of an engine from what it reports
// (membudget.EngineMemoryOf): gpuMem with its data on the device, else
// cpuMem (the larger), with the reported fixed and lazy bytes.
func engineMemory(e Engine, g geometry) engineMem {
	r := membudget.EngineMemoryOf(e, cpuEngineMemory)
	m := cpuMem(g)
	if r.OnDevice {
		m = gpuMem(g)
	}
	m.Fixed, m.Lazy = r.Fixed, r.Lazy
	return m
}

// memPlan is how the pipeline is sized.
type memPlan struct {
	Batch  int // planes fitted together
	Planes int // raw planes in memory at once (>= Batch)
	Writes int // stitched planes queued for or in writing
}

type memModel struct {
	g                    geometry
	e                    engineMem
	raw, mosaic, profile int64
	budget               int64 // 0: none
	budgetSource         string
	// reserve is what a sink holds beside the stage (Sink.Reserve, bytes;
	// 0: no sink) and jobBudget the job's whole budget, of which budget is
	// what the reserve leaves: a NeedError reports the job's figures.
	reserve, jobBudget int64
}

// newMemModel is the model of engine e on a cycle of geometry g; resident
// is the process's resident set now (0: unknown), with the engine open.
func newMemModel(e Engine, g geometry, resident, budget int64, source string) memModel {
	em := engineMemory(e, g)
	em.Fixed = max(em.Fixed, resident+em.Lazy)
	return memModel{g: g, e: em, raw: g.planePx() * 2, mosaic: g.mosaicPx() * 2,
		profile: 3 * g.tilePx() * 4, budget: budget, budgetSource: source}
}

// alignLive is the heap of the alignment phase.
func (m memModel) alignLive() int64 {
	return m.raw + max(m.e.Fit+m.profile, m.e.Align)
}

// live is the heap of the pipeline under p.
func (m memModel) live(p memPlan) int64 {
	return int64(p.Planes)*m.raw + max(int64(p.Batch)*m.e.Fit, m.e.Blend) +
		int64(p.Writes+1)*m.mosaic + int64(p.Writes+p.Batch)*m.profile
}

// need is the budget a plan needs: fixed plus the larger phase's heap at
// liveFraction.
func (m memModel) need(p memPlan) int64 {
	live := max(m.alignLive(), m.live(p))
	return m.e.Fixed + int64(math.Ceil(float64(live)/liveFraction))
}

// goLimit is the Go runtime's soft limit under the budget (0: none).
func (m memModel) goLimit() int64 {
	if m.budget <= 0 {
		return 0
	}
	return int64(float64(m.budget-m.e.Fixed) * goFraction)
}

// minPlan is the smallest working set: one plane read, fitted and blended
// at a time, one stitched plane being written.
var minPlan = memPlan{Batch: 1, Planes: 1, Writes: 1}

// plans lists the plans from the preferred (batch as asked, one batch read
// ahead, one write slot per worker) down to minPlan, shrinking what costs
// the least time first: write slots beyond 4, read-ahead beyond one plane,
// write slots beyond 2, then the batch (halved, one plane read ahead), then
// the last write slot and the read-ahead.
func plans(batch, workers int) []memPlan {
	batch = max(1, batch)
	p := memPlan{Batch: batch, Planes: 2 * batch, Writes: max(2, workers)}
	out := []memPlan{p}
	add := func() {
		if out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	p.Writes = min(p.Writes, 4)
	add()
	for p.Planes > p.Batch+1 {
		p.Planes--
		add()
	}
	p.Writes = min(p.Writes, 2)
	add()
	for p.Batch > 1 {
		p.Batch = max(1, p.Batch/2)
		p.Planes = p.Batch + 1
		add()
	}
	p.Writes = 1
	add()
	p.Planes = 1
	add()
	return out
}

// choose returns the first plan that fits the budget (the preferred one
// when there is no budget), or a *membudget.NeedError naming the smallest
// working set.
func (m memModel) choose(batch int) (memPlan, error) {
	ps := plans(batch, m.g.Workers)
	if p, ok := membudget.First(ps, m.budget, m.need); ok {
		return p, nil
	}
	ne := &membudget.NeedError{Stage: "stitch", Budget: m.budget, Source: m.budgetSource,
		Need: m.need(minPlan), ConfigKey: ConfigKeyMem,
		What: fmt.Sprintf("one plane of %d raw tiles of %dx%d px (%s), its fit and blend, one %dx%d mosaic (%s), runtime and engine %s",
			m.g.Tiles, m.g.W, m.g.H, membudget.Format(m.raw), m.g.MosaicW, m.g.MosaicH, membudget.Format(m.mosaic),
			membudget.Format(m.e.Fixed))}
	if m.reserve > 0 {
		// With a sink the job's budget holds both: the figure to raise it
		// to is the stage's smallest working set plus the sink's share.
		ne.Budget, ne.Need = m.jobBudget, ne.Need+m.reserve
		ne.What += fmt.Sprintf("; beside it, what the later stages hold at once (%s)", membudget.Format(m.reserve))
	}
	return memPlan{}, ne
}
