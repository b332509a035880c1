package regstage

import (
	"fmt"
	"math"
	"runtime"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// ConfigKeyMem is the config key of the registration job's memory (MB),
// named by the error of a budget too small for the stage.
const ConfigKeyMem = "resources.mem_registration"

// The stage's host memory (resident set), in bytes, for cycles of
// channels of H x W px (padded size) uint16 images:
//
//	plane    one full-size plane, P = H·W·2
//	read     one plane being read: P, plus the file's own unpadded plane
//	         when any image needs padding (Pad copies it) and the TIFF
//	         decoder's strip buffer (readScratch; the EDF stage's strips
//	         are 512 KiB)
//	written  one plane being written: P plus the TIFF writer's strip and
//	         buffer (writeScratch)
//	levels   the registration levels of one image, float32:
//	         Σ over the distinct level factors k (coarse, rigid,
//	         non-rigid) of floor(H/k)·floor(W/k)·4; the reference's are
//	         held throughout, a cycle's while it is registered
//	overlay  the reference's overlay level and the cycle's (float32), the
//	         PNG's RGBA picture and the percentile's samples: 16 bytes per
//	         overlay px (<= 1024 px side)
//	engine   what the backend adds while registering (engineMem)
//
// Three phases peak:
//
//	reference  Out·(read + writeScratch) + levels + overlay   (the reference
//	           cycle's images are read and rewritten padded, Out at once)
//	cycles     In·read + Out·written + 2·levels + engine + overlay
//	ome        P + read + 2·P/3 (the plane being compressed, the next
//	           one being read, their pyramids' reduced levels) + the
//	           OME-TIFF writer's tiles (ometiff.WriterMemory); with a
//	           backend that codes the tiles (ometiff.Coder, the GPU) also
//	           a level's coded tiles at once (<= its padded tiles' bytes
//	           plus framing, about 1.01 P), its blocks' counts and codes
//	           (P/16) and Adaptive's level-1 tiles (< P/4): 3P/2
//
// where In planes are read and not yet warped (the cycle's DAPI from its
// read until its own warp, then the channel being warped, plus In−1
// channels read ahead, also while the DAPI is registered) and Out warped
// planes are being produced or wait for or are in TIFF writing (the
// write-behind). Everything but fixed is Go heap: it is planned at
// liveFraction of the budget left after fixed, and the Go runtime's soft
// limit is set to goFraction of it, so that garbage (the planes already
// written) is collected before the heap grows past it.
const (
	liveFraction = 0.80
	goFraction   = 0.95
	readScratch  = 4 << 20         // TIFF decoder's strip buffers, bytes
	writeScratch = 1<<20 + 512<<10 // TIFF writer's buffer and strip
)

// engineMem is a backend's host memory, bytes.
type engineMem struct {
	// Fixed is what does not depend on the data: the runtime, and for the
	// GPU the CUDA context, libraries, modules and pinned staging buffers.
	// The stage takes the resident set when it starts (the engine is open)
	// plus Lazy (what the engine maps later, e.g. cuFFT plans), or Fixed,
	// whichever is larger.
	Fixed int64
	Lazy  int64
	// Register is the backend's working set while a cycle is registered,
	// beyond both images' levels.
	Register int64
}

// geometry is what the stage's memory depends on.
type geometry struct {
	H, W     int  // padded size, px
	Pad      bool // some image is smaller than H x W (read holds two copies)
	Workers  int
	Channels int   // most channels of a cycle
	Levels   []int // distinct level factors (coarse, rigid, non-rigid)
}

func (g geometry) plane() int64 { return int64(g.H) * int64(g.W) * 2 }

// levelBytes is one image's registration levels.
func (g geometry) levelBytes() int64 {
	var n int64
	for _, k := range g.Levels {
		n += int64(g.H/k) * int64(g.W/k) * 4
	}
	return n
}

// coarsePx is the coarse search's level, the largest block of phase
// correlation (one whole-level block per angle).
func (g geometry) coarsePx() int64 {
	k := g.Levels[0]
	return int64(g.H/k) * int64(g.W/k)
}

// overlayBytes is the QC overlays' working set.
func (g geometry) overlayBytes() int64 {
	k := max(1, (max(g.W, g.H)+overlayMax-1)/overlayMax)
	return int64(g.H/k) * int64(g.W/k) * 16
}

// cpuMem is the CPU backend's model: BlockShifts gives each worker a
// phase-correlation workspace of the block (complex128 FFT buffer and two
// float64 patches, 32 bytes per block px, and gonum's plans), the
// largest being the coarse search's whole-level block, for each of the
// backend's workers; LevelNCC and the field's smoothing are small.
// Downsample and Warp allocate only their outputs (levels, the warped
// plane), counted by the stage.
func cpuMem(g geometry, workers int) engineMem {
	return engineMem{
		Register: int64(workers)*(g.coarsePx()*32+1<<20) + 8<<20,
	}
}

// gpuMem is the CUDA backend's model: images go to the device from their
// uint16 buffers through the engine's fixed pinned staging buffers,
// levels and warped planes come back into host buffers the stage counts,
// and phase correlation runs on the device (the host holds the block list
// and the peaks: ~100 bytes per block). The host adds what the CUDA
// driver, cuFFT and the JIT-compiled modules map into the process
// (measured when the stage starts, with the engine open; gpubench prints
// it).
func gpuMem(g geometry) engineMem {
	return engineMem{Register: 32 << 20}
}

// cpuEngineMemory is the CPU backend's report (the runtime): also that of
// a backend that reports nothing.
var cpuEngineMemory = membudget.EngineMemory{Fixed: 32 << 20, Lazy: 16 << 20}

// engineMemory picks the model from what the backend reports
// (membudget.EngineMemoryOf): the GPU's for data on the device, else the
// CPU's (the larger) with the CPU backend's workers (the stage's for
// another backend); fixed and lazy as reported.
func engineMemory(be register.Backend, g geometry) engineMem {
	r := membudget.EngineMemoryOf(be, cpuEngineMemory)
	var m engineMem
	if r.OnDevice {
		m = gpuMem(g)
	} else {
		workers := g.Workers
		if c, cpu := be.(register.CPU); cpu {
			workers = c.Workers
			if workers <= 0 {
				workers = runtime.GOMAXPROCS(0)
			}
		}
		m = cpuMem(g, workers)
	}
	m.Fixed, m.Lazy = r.Fixed, r.Lazy
	return m
}

// deviceName is the device of the sentinel and logs: "gpu" for a backend
// whose data is on the device, else "cpu".
func deviceName(be register.Backend) string {
	if membudget.EngineMemoryOf(be, cpuEngineMemory).OnDevice {
		return "gpu"
	}
	return "cpu"
}

// memPlan is how the pipeline is sized.
type memPlan struct {
	In  int // planes read and not yet warped (>= 1)
	Out int // warped planes being produced or written (>= 1)
	// Beside: the OME-TIFF is written while the cycles are registered
	// (each channel read back once its registered image is written), not
	// after them; its phase's memory adds to theirs.
	Beside bool
}

// Planes is the most full-size planes the plan holds at once: the
// OME-TIFF writer's two (the plane compressed, the next read) with the
// registration's when they overlap.
func (p memPlan) Planes() int {
	if p.Beside {
		return p.In + p.Out + 2
	}
	return p.In + p.Out
}

type memModel struct {
	g            geometry
	e            engineMem
	plane        int64
	read, wrote  int64
	ome          int64
	budget       int64 // 0: none
	budgetSource string
}

// newMemModel is the model of backend be on geometry g; resident is the
// process's resident set now (0: unknown), with the engine open.
func newMemModel(be register.Backend, g geometry, resident, budget int64, source string) memModel {
	em := engineMemory(be, g)
	em.Fixed = max(em.Fixed, resident+em.Lazy)
	P := g.plane()
	read := P + readScratch
	if g.Pad {
		read += P
	}
	var pyr int64
	for _, s := range ometiff.LevelSizes(g.W, g.H)[1:] {
		pyr += int64(s[0]) * int64(s[1]) * 2
	}
	ome := P + read + 2*pyr + ometiff.WriterMemory(omeTileSize, g.Workers)
	if omeCoder(be, g.Workers) != nil {
		ome += P + P/2
	}
	return memModel{g: g, e: em, plane: P, read: read, wrote: P + writeScratch, ome: ome,
		budget: budget, budgetSource: source}
}

// live is the largest phase's heap under p.
func (m memModel) live(p memPlan) int64 {
	lv, ov := m.g.levelBytes(), m.g.overlayBytes()
	ref := int64(p.Out)*(m.read+writeScratch) + lv + ov
	cyc := int64(p.In)*m.read + int64(p.Out)*m.wrote + 2*lv + m.e.Register + ov
	if p.Beside {
		return max(ref, cyc) + m.ome
	}
	return max(ref, cyc, m.ome)
}

// need is the budget a plan needs: fixed plus the heap at liveFraction.
func (m memModel) need(p memPlan) int64 {
	return m.e.Fixed + int64(math.Ceil(float64(m.live(p))/liveFraction))
}

// goLimit is the Go runtime's soft limit under the budget (0: none).
func (m memModel) goLimit() int64 {
	if m.budget <= 0 {
		return 0
	}
	return int64(float64(m.budget-m.e.Fixed) * goFraction)
}

// minPlan is the smallest working set: one plane read (the DAPI, then the
// channel being warped), one warped plane being produced or written.
var minPlan = memPlan{In: 1, Out: 1}

// plans lists the plans from the preferred (k = max(2, min(workers,
// channels, 4)) planes read and k written: a cycle's channels are read
// while its DAPI is registered, and written while the next are warped;
// the OME-TIFF written beside the registration) down to minPlan,
// shrinking what costs the least time first: the OME-TIFF's overlap (it
// then follows the registration), the read-ahead beyond one plane, write
// slots beyond 2, the last read-ahead, the last write-behind slot.
func plans(workers, channels int) []memPlan {
	k := max(2, min(workers, channels, 4))
	p := memPlan{In: k, Out: k, Beside: true}
	out := []memPlan{p}
	p.Beside = false
	add := func() {
		if out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	add()
	p.In = 2
	add()
	p.Out = 2
	add()
	p.In = 1
	add()
	p.Out = 1
	add()
	return out
}

// choose returns the first plan that fits the budget (the preferred one
// when there is no budget), or a *membudget.NeedError naming the smallest
// working set.
func (m memModel) choose() (memPlan, error) {
	ps := plans(m.g.Workers, m.g.Channels)
	if p, ok := membudget.First(ps, m.budget, m.need); ok {
		return p, nil
	}
	return memPlan{}, &membudget.NeedError{Stage: "registration", Budget: m.budget, Source: m.budgetSource,
		Need: m.need(minPlan), ConfigKey: ConfigKeyMem,
		What: fmt.Sprintf("one %dx%d px plane read (%s) and one warped (%s), the registration levels (%s) and engine work (%s), runtime and engine %s",
			m.g.W, m.g.H, membudget.Format(m.read), membudget.Format(m.wrote), membudget.Format(2*m.g.levelBytes()),
			membudget.Format(m.e.Register), membudget.Format(m.e.Fixed))}
}
