package deconstage

import (
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
)

// ConfigKeyMem is the config key of the decon job's memory (MB), named by
// the error of a budget too small for the stage.
const ConfigKeyMem = "resources.mem_decon"

// The stage's host memory (resident set), in bytes, for a channel of
// N planes of H x W px (the largest channel of the cycle counts):
//
//	plane  one uint16 plane, H·W·2 (a reader's or writer's buffer)
//	U      the channel's uint16 planes, N·H·W·2
//	S      the channel's float32 stack, N·H·W·4
//	P      one padded float32 array of decon.Pad, PN·PH·PW·4
//	       (PN = Smooth5(N + 4·kz), PH, PW likewise; about 1.2 S for
//	       20 planes)
//
// Channels run one after the other; a plan reads Ahead (0 or 1) channels
// ahead while one deconvolves and writes Behind (0 or 1) finished channels
// while the next one is read and deconvolved. Per engine, the heap of the
// channel being deconvolved is:
//
//	CPU (decon.CPU)      S + A·P + max(win, U) + IO·plane
//	                     the input stack, A = 3 (RL: obs, x, xnew) or 6
//	                     (Biggs-Andrews: + xprev, g, gprev) padded arrays,
//	                     the window scratch win = 5·PN·wh·PW·4 (obs, y, a,
//	                     b, cur of a window of wh = rows + 2·halo padded
//	                     rows, rows from decon.RowsForBudget of the window
//	                     budget) or, after the iterations, the rounded
//	                     output planes U; IO readers' planes
//	GPU, resident        2·IO·plane
//	                     planes go to the device as they are read (one
//	                     plane per reader) and come back rounded to uint16
//	                     one plane per writer; the stack, the iterates and
//	                     the result stay on the device
//	GPU, streamed        S + U + IO·plane, and pinned 3·P (RL) or 6·P
//	                     (Biggs-Andrews) outside the Go heap: a stack
//	                     whose iterates exceed the device (or
//	                     decon.memory_budget_mb / --gpu-mem-cap) keeps them
//	                     in pinned host memory (gpu DeconStreams)
//
// to which the plan adds Ahead·(the next channel's input: U on the GPU, S
// on the CPU, and IO more reader planes) and Behind·U (the previous
// channel's planes being written). The need of a plan is
//
//	fixed + pinned + heap / liveFraction
//
// where fixed is what the engine reports (membudget.EngineMemory: the
// runtime, CPU 64 MiB, or the CUDA context, modules, pinned staging
// buffers and the lazily created cuFFT plans, GPU 512 MiB), or the
// resident set when the stage starts plus what the engine maps later
// (CPU 32 MiB, GPU 256 MiB), whichever is larger. The Go runtime's soft
// limit is set to goFraction of the budget less fixed and pinned, so
// garbage is collected before the heap grows past the plan.
const (
	liveFraction = 0.80
	goFraction   = 0.95
)

// chanMem is one channel's figures.
type chanMem struct {
	N, H, W      int
	PN, PH, PW   int // padded (decon.NewGeometry)
	Halo, Arrays int // decon.Halo; iterate arrays of decon.CPU (3 or 6)
	RowsArrays   int // the arrays decon.Iterate sizes its windows with (6 or 9)
	Window       int64
	Streamed     bool  // GPU: iterates streamed through pinned host memory
	Pinned       int64 // bytes pinned by the streamed form
}

func newChanMem(n, h, w int, k *psf.Kernel, p decon.Params) chanMem {
	g := decon.NewGeometry(n, h, w, k)
	c := chanMem{N: n, H: h, W: w, PN: g.PN, PH: g.PH, PW: g.PW, Halo: decon.Halo(k, p.Damping),
		Arrays: 3, RowsArrays: 6, Window: p.MemoryBudget}
	if p.Biggs() {
		c.Arrays, c.RowsArrays = 6, 9
	}
	return c
}

func (c chanMem) plane() int64 { return int64(c.H) * int64(c.W) * 2 }
func (c chanMem) u() int64     { return int64(c.N) * c.plane() }
func (c chanMem) s() int64     { return 2 * c.u() }
func (c chanMem) p() int64     { return int64(c.PN) * int64(c.PH) * int64(c.PW) * 4 }

// scratch is decon.CPU's window scratch under a window budget (0: one
// window): 5 arrays of the window, as winScratch.step allocates them.
func (c chanMem) scratch(window int64) int64 {
	rows := decon.RowsForBudget(window, c.RowsArrays, c.PN, c.PH, c.PW, c.Halo)
	wh := c.PH
	if rows > 0 {
		wh = min(c.PH, rows+2*c.Halo)
	}
	return 5 * int64(c.PN) * int64(wh) * int64(c.PW) * 4
}

// minWindow is the window budget of the smallest window the stage asks of
// decon.CPU: 4·max(1, halo) core rows, so that the halo rows computed
// twice cost at most half the work again (the scratch is then a few
// hundred MB for a production channel, beside GBs of iterates).
func (c chanMem) minWindow() int64 {
	rows := 4 * max(1, c.Halo)
	return int64(rows+2*c.Halo) * int64(c.RowsArrays) * int64(c.PN) * int64(c.PW) * 4
}

// mode is how the stage hands a channel to its engine.
type mode int

const (
	modeStack mode = iota // a float32 stack on the host (CPU, other engines, GPU streamed)
	modePlane             // planes straight to the device and back (GPU resident)
)

// memPlan is how the stage is sized.
type memPlan struct {
	Ahead  int   // channels read ahead while one deconvolves (0 or 1)
	Behind int   // finished channels written while the next runs (0 or 1)
	IO     int   // planes read (and, GPU, written) at once: goroutines
	Window int64 // CPU: decon window budget (decon.Params.MemoryBudget), bytes; 0: one window
}

type memModel struct {
	cpu          bool // the CPU engine: windows can shrink
	modes        []mode
	chans        []chanMem
	fixed, lazy  int64
	io           int // the preferred planes in flight: workers, at most the planes of a channel
	budget       int64
	budgetSource string
}

// cpuEngineMemory is the CPU engine's report (the runtime): also that of
// an engine that reports nothing.
var cpuEngineMemory = membudget.EngineMemory{Fixed: 64 << 20, Lazy: 32 << 20}

// newMemModel is the model of a cycle's channels on an engine that
// reports em (membudget.EngineMemoryOf; cpu: the engine works on the host,
// its windows can shrink); resident is the resident set now (0: unknown),
// with the engine open.
func newMemModel(em membudget.EngineMemory, cpu bool, modes []mode, chans []chanMem, workers int, resident, budget int64, source string) memModel {
	m := memModel{cpu: cpu, modes: modes, chans: chans, fixed: em.Fixed, lazy: em.Lazy,
		io: max(1, workers), budget: budget, budgetSource: source}
	m.fixed = max(m.fixed, resident+m.lazy)
	for _, c := range chans {
		m.io = min(m.io, max(1, c.N))
	}
	return m
}

// input is what a channel read ahead holds.
func (m memModel) input(i int) int64 {
	if m.modes[i] == modePlane {
		return m.chans[i].u()
	}
	return m.chans[i].s()
}

// work is the heap of channel i deconvolving under p, beyond read-ahead
// and write-behind.
func (m memModel) work(i int, p memPlan) int64 {
	c := m.chans[i]
	rd := int64(p.IO) * c.plane()
	switch {
	case m.modes[i] == modePlane:
		return 2 * rd
	case c.Streamed:
		return c.s() + c.u() + rd
	default:
		win := c.Window
		if m.cpu {
			win = p.Window
		}
		return c.s() + int64(c.Arrays)*c.p() + max(c.scratch(win), c.u()) + rd
	}
}

// heap is the largest Go heap of the run under p.
func (m memModel) heap(p memPlan) int64 {
	var h int64
	for i := range m.chans {
		v := m.work(i, p)
		if p.Ahead > 0 && i+1 < len(m.chans) {
			v += m.input(i+1) + int64(p.IO)*m.chans[i+1].plane()
		}
		if p.Behind > 0 && i > 0 {
			v += m.chans[i-1].u()
		}
		h = max(h, v)
	}
	return h
}

// pinned is the largest pinned host memory of a streamed channel.
func (m memModel) pinned() int64 {
	var b int64
	for _, c := range m.chans {
		if c.Streamed {
			b = max(b, c.Pinned)
		}
	}
	return b
}

// need is the budget a plan needs.
func (m memModel) need(p memPlan) int64 {
	return m.fixed + m.pinned() + int64(math.Ceil(float64(m.heap(p))/liveFraction))
}

// goLimit is the Go runtime's soft limit under the budget (0: none).
func (m memModel) goLimit() int64 {
	if m.budget <= 0 {
		return 0
	}
	return int64(float64(m.budget-m.fixed-m.pinned()) * goFraction)
}

// defaultWindow is the CPU window budget the channels ask for (the
// largest: DefaultCPUBudget or decon.memory_budget_mb).
func (m memModel) defaultWindow() int64 {
	var w int64
	for _, c := range m.chans {
		w = max(w, c.Window)
	}
	return w
}

// smallestWindow is the window budget of the CPU's smallest windows over
// the channels.
func (m memModel) smallestWindow() int64 {
	var w int64
	for _, c := range m.chans {
		w = max(w, c.minWindow())
	}
	return w
}

// plans lists the plans from the preferred (one channel read ahead, one
// written behind, a plane per worker in flight, the CPU's default windows)
// down to the smallest working set, shrinking what costs the least time
// first: planes in flight beyond 4, the read-ahead, the write-behind, the
// planes in flight (halved down to 1), then (CPU) the window budget, halved
// down to the smallest window.
func (m memModel) plans() []memPlan {
	p := memPlan{Ahead: 1, Behind: 1, IO: m.io, Window: m.defaultWindow()}
	if len(m.chans) < 2 {
		p.Ahead, p.Behind = 0, 0
	}
	out := []memPlan{p}
	add := func() {
		if out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	p.IO = min(p.IO, 4)
	add()
	p.Ahead = 0
	add()
	p.Behind = 0
	add()
	for p.IO > 1 {
		p.IO /= 2
		add()
	}
	if !m.cpu {
		return out
	}
	lo := m.smallestWindow()
	for w := p.Window; ; {
		if w == 0 {
			w = m.largestScratchWindow()
		} else {
			w /= 2
		}
		if w <= lo {
			break
		}
		p.Window = w
		add()
	}
	p.Window = lo
	add()
	return out
}

// largestScratchWindow is a window budget just below one window (the
// start of the halving when the default is one window).
func (m memModel) largestScratchWindow() int64 {
	var w int64
	for _, c := range m.chans {
		w = max(w, int64(c.PH)*int64(c.RowsArrays)*int64(c.PN)*int64(c.PW)*4)
	}
	return w
}

// smallest is the last plan.
func (m memModel) smallest() memPlan {
	ps := m.plans()
	return ps[len(ps)-1]
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
	c := m.chans[0]
	for _, x := range m.chans {
		if x.u() > c.u() {
			c = x
		}
	}
	what := fmt.Sprintf("one channel of %d planes of %dx%d px (%s as uint16) deconvolved at a time", c.N, c.W, c.H, membudget.Format(c.u()))
	switch {
	case m.modes[0] == modePlane:
		what += fmt.Sprintf(" on the device, %d+%d planes in flight on the host", small.IO, small.IO)
	default:
		what += fmt.Sprintf(", its float32 stack (%s)", membudget.Format(c.s()))
		if c.Streamed {
			what += fmt.Sprintf(" and the streamed iterates pinned on the host (%s)", membudget.Format(m.pinned()))
		} else {
			what += fmt.Sprintf(", %d padded iterate arrays (%s each) and the smallest windows", c.Arrays, membudget.Format(c.p()))
		}
	}
	what += fmt.Sprintf(", runtime and engine %s", membudget.Format(m.fixed))
	return memPlan{}, &membudget.NeedError{Stage: "decon", Budget: m.budget, Source: m.budgetSource,
		Need: m.need(small), What: what, ConfigKey: ConfigKeyMem}
}
