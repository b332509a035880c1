// Package edfstage is the EDF stage of one cycle: it reads every channel's
// deconvolved z-stack, applies the quality gate, fuses the stack into one
// in-focus plane (internal/edf) and writes the original's marker-named
// outputs, atomically per cycle (internal/staging).
//
//	data/processed/deconvolved/cycNN/.snakemake_complete          input sentinel (required)
//	data/processed/deconvolved/cycNN/CH{c}/deconv_*.tif            input, uint16, z order = sorted names
//	data/processed/edf/cycNN/<marker>.tif                          output, uint16 (config.EDFFileName)
//	data/processed/edf/cycNN/.snakemake_complete                   sentinel (key=value, stage=edf)
//
// Bad input is an error wrapping ErrInput that names the file or config
// key: a missing decon sentinel, channel directory or plane; planes of
// different sizes; a non-16-bit or corrupt TIFF; two channels of the cycle
// with the same output name; a channel whose stack fails the quality gate
// (fewer than quality_gate.min_valid_slices valid slices: an empty or
// saturated stack, for example). The original logged such a channel and
// went on; here the cycle fails with nothing written, because registration
// needs every marker's plane and a silent hole surfaces only later.
//
// Memory: the stage plans from Options.MemBudget (memory.go): on the GPU
// the planes go to the device stack as they are read (edf.DeviceStack), so the
// host holds a few planes, not a channel; the CPU reference holds one or two
// channel stacks. A budget below the smallest working set is a
// *membudget.NeedError naming resources.mem_edf (exit 2), before any output.
//
// Adding a stage (a fifth, e.g. background subtraction): copy this
// package's shape, as every stage package has it; internal/README.md has
// the whole recipe. In short: the engine interface is the stage's own (or
// its algorithm package's), with host types only, and *gpu.Engine satisfies
// it as it is (no stage imports internal/gpu); a richer device-buffer form
// is an interface found by assertion; the memory model (memory.go) takes
// what the engine reports (membudget.EngineMemoryOf: data on the device or
// not, fixed host bytes); the executable resolves the device once through
// internal/cliutil/stagecli; Run is a few steps (checks and memory plan
// before any output, staging, the work, sentinel, commit).
//
// Template pieces here: Options.Engine, an edf.Fuser, with Streamer (the
// device-buffer form: edf.DeviceStack, pipeline.go) found by assertion;
// edf.CPU the reference; memory.go (cpuEngineMemory, newMemModel, choose);
// Run in steps (newCycleRun, planMemory, fuseAllStreamed or fuseStacked,
// done).
package edfstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or configuration; it is
// staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// InputDir is deconvolved/cycNN of a project (layout.Deconvolved).
func InputDir(project string, cycle int) string { return layout.Deconvolved(project, cycle) }

// OutDir is edf/cycNN of a project (layout.EDFOut).
func OutDir(project string, cycle int) string { return layout.EDFOut(project, cycle) }

// Options configure Run.
type Options struct {
	Config  *config.Config
	Cycle   int
	Engine  edf.Fuser // the device: edf.CPU, or the CUDA engine (a Streamer)
	Workers int
	Logger  *slog.Logger
	// MemBudget is the host memory (resident set, bytes) the stage may use
	// (cliutil.MemBudget: --mem-budget, SLURM, cgroup, physical memory):
	// the stage plans its read-ahead within it (memory.go) and refuses a
	// budget below its smallest working set with a *membudget.NeedError
	// naming ConfigKeyMem before any output. 0: no budget (the preferred
	// plan).
	MemBudget int64
	// MemBudgetSource says where MemBudget came from, for logs and errors.
	MemBudgetSource string
}

// Channel is one channel's outcome.
type Channel struct {
	Channel int
	File    string // output name
	Planes  int
	Used    []int // 0-based plane indices fused
	ReadS   float64
	EDFS    float64
	WriteS  float64
}

// Result is a cycle's outcome.
type Result struct {
	OutDir   string
	Channels []Channel
	Seconds  float64
	// MemPlan is the memory plan taken (memory.go) and MemPlanned the
	// budget it needs, bytes.
	MemPlan    string
	MemPlanned int64
}

// Stack lists one channel's input planes: deconv_*.tif, sorted by name.
func Stack(project string, cycle, ch int) ([]string, error) {
	dir := filepath.Join(InputDir(project, cycle), layout.ChannelDir(ch))
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, staging.Inputf("channel %d: no deconvolved directory %s", ch, dir)
	}
	files, err := filepath.Glob(filepath.Join(dir, layout.DeconPlaneGlob))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, staging.Inputf("channel %d: no deconv_*.tif planes in %s", ch, dir)
	}
	sort.Strings(files)
	return files, nil
}

// ReadPlanes reads uint16 planes (one per file) on workers goroutines and
// checks that they all have the first one's size; errors name the file.
func ReadPlanes(ctx context.Context, files []string, workers int) ([]*raster.Gray16, error) {
	planes := make([]*raster.Gray16, len(files))
	err := par.ForEach(ctx, len(files), workers, func(i int) error {
		g, err := tiffio.ReadGray16(files[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInput, err)
		}
		planes[i] = g
		return nil
	})
	if err != nil {
		return nil, err
	}
	return planes, checkSizes(planes, files)
}

func checkSizes(planes []*raster.Gray16, names []string) error {
	for i, p := range planes {
		if p.W != planes[0].W || p.H != planes[0].H {
			return staging.Inputf("%s is %d x %d px, %s is %d x %d (W x H): the planes of a stack must have one size",
				names[i], p.W, p.H, names[0], planes[0].W, planes[0].H)
		}
	}
	return nil
}

// ReadStackPath reads a z-stack given as a directory of single-plane TIFFs
// (*.tif and *.tiff, sorted by name) or as one multi-page TIFF.
func ReadStackPath(ctx context.Context, path string, workers int) ([]*raster.Gray16, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, staging.Inputf("--in %s: %v", path, err)
	}
	if !st.IsDir() {
		pages, err := tiffio.ReadGray16Pages(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		names := make([]string, len(pages))
		for i := range names {
			names[i] = fmt.Sprintf("%s page %d", path, i+1)
		}
		return pages, checkSizes(pages, names)
	}
	var files []string
	for _, pat := range []string{"*.tif", "*.tiff"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, staging.Inputf("--in %s: no *.tif planes in the directory", path)
	}
	sort.Strings(files)
	return ReadPlanes(ctx, files, workers)
}

// Run runs the stage for one cycle: the checks and the memory plan before
// any output (newCycleRun, planMemory), every channel fused (streamed
// through the engine's device stack, or as whole stacks read ahead:
// fuseStacked) and written (done), then the sentinel and the commit.
func Run(ctx context.Context, o Options) (*Result, error) {
	t0 := time.Now()
	r, err := newCycleRun(o)
	if err != nil {
		return nil, err
	}
	mm, mp, err := r.planMemory()
	if err != nil {
		return nil, err
	}
	defer membudget.SetGoLimit(mm.goLimit())()

	cfg, p, lg := r.cfg, r.p, r.lg
	final := OutDir(cfg.ProjectDir, o.Cycle)
	stage, err := staging.NewContext(ctx, final)
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	r.stageDir = stage.Path
	lg.Info("edf", "cycle", o.Cycle, "channels", cfg.Channels, "method", p.Method, "engine", o.Engine.Name(),
		"sigma", p.Sigma, "radius_x", p.RadiusX, "radius_y", p.RadiusY, "z_smooth_sigma", p.ZSmoothSigma)
	lg.Info("memory plan", "cycle", o.Cycle, "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"plan", mp.String(), "planned", membudget.Format(mm.need(mp)), "fixed", membudget.Format(mm.fixed),
		"go_limit", membudget.Format(mm.goLimit()), "plane", fmt.Sprintf("%dx%d px, %s", mm.W, mm.H, membudget.Format(mm.plane())),
		"planes_per_channel", mm.N)
	r.res = &Result{OutDir: final, MemPlan: mp.String(), MemPlanned: mm.need(mp)}
	if mp.Streamed {
		err = r.fuseAllStreamed(ctx, streamerOf(o.Engine), mp.Readers)
	} else {
		err = fuseStacked(ctx, o, r.stacks, mp, r.g, p, r.collect, r.fuseErr, r.done)
	}
	if err != nil {
		return nil, err
	}
	r.res.Seconds = time.Since(t0).Seconds()
	if err := writeSentinel(layout.Sentinel(stage.Path), o, p, r.res); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	lg.Info("cycle done", "cycle", o.Cycle, "out", final, "seconds", f2(r.res.Seconds))
	return r.res, nil
}

// cycleRun is one Run's state, step to step.
type cycleRun struct {
	o        Options
	cfg      *config.Config
	lg       *slog.Logger
	p        edf.Params
	g        edf.Gate
	stacks   [][]string // per channel, its planes in z order
	dims     [][2]int   // per channel, H, W px
	stageDir string
	res      *Result
}

// newCycleRun checks the settings, the decon sentinel and the channels'
// output names (unique within the cycle) and lists every channel's planes.
func newCycleRun(o Options) (*cycleRun, error) {
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	cfg := r.cfg
	in := InputDir(cfg.ProjectDir, o.Cycle)
	if err := staging.RequireSentinel(in, o.Cycle, "decon"); err != nil {
		return nil, err
	}
	if err := r.checkNames(); err != nil {
		return nil, err
	}
	r.stacks = make([][]string, len(cfg.Channels))
	for i, ch := range cfg.Channels {
		files, err := Stack(cfg.ProjectDir, o.Cycle, ch)
		if err != nil {
			return nil, err
		}
		r.stacks[i] = files
	}
	return r, nil
}

// newRun is a cycleRun with its settings checked, before its input.
func newRun(o Options) (*cycleRun, error) {
	r := &cycleRun{o: o, cfg: o.Config, lg: o.Logger}
	if r.lg == nil {
		r.lg = slog.Default()
	}
	r.p = Params(r.cfg.EDF)
	if err := r.p.Validate(); err != nil {
		return nil, staging.Inputf("%s: %w", r.cfg.Path, err)
	}
	r.g = Gate(r.cfg.QualityGate)
	return r, nil
}

// checkNames checks that the channels' output names are unique within the
// cycle.
func (r *cycleRun) checkNames() error {
	cfg, o := r.cfg, r.o
	names := map[string]int{}
	for _, ch := range cfg.Channels {
		name := cfg.EDFFileName(o.Cycle, ch)
		if prev, dup := names[name]; dup {
			return staging.Inputf("%s: key channel_names.%d: channels %d and %d of cycle %d both give the output name %s",
				cfg.Path, o.Cycle, prev, ch, o.Cycle, name)
		}
		names[name] = ch
	}
	return nil
}

// planMemory chooses the memory plan from the planes' TIFF headers (the
// largest channel counts): a budget below the smallest working set stops
// here, before any output.
func (r *cycleRun) planMemory() (memModel, memPlan, error) {
	o := r.o
	r.dims = make([][2]int, len(r.stacks))
	maxN, maxH, maxW := 0, 0, 0
	for i, files := range r.stacks {
		info, err := tiffio.ReadInfo(files[0])
		if err != nil {
			return memModel{}, memPlan{}, fmt.Errorf("%w: %w", ErrInput, err)
		}
		r.dims[i] = [2]int{info.Height, info.Width}
		maxN = max(maxN, len(files))
		if int64(info.Height)*int64(info.Width) > int64(maxH)*int64(maxW) {
			maxH, maxW = info.Height, info.Width
		}
	}
	mm := newMemModel(o.Engine, maxN, maxH, maxW, o.Workers, r.p, membudget.RSS(), o.MemBudget, o.MemBudgetSource)
	mp, err := mm.choose()
	return mm, mp, err
}

// collect collects garbage (planes fused or sent to the device) under a
// budget as soon as it is made instead of when the heap nears the Go
// limit.
func (r *cycleRun) collect() {
	if r.o.MemBudget > 0 {
		runtime.GC()
	}
}

// done fuses nothing: it writes channel i's result and logs it.
func (r *cycleRun) done(i int, res *edf.Result, nPlanes int, readS, edfS float64) error {
	cfg, o := r.cfg, r.o
	ch := cfg.Channels[i]
	c := Channel{Channel: ch, File: cfg.EDFFileName(o.Cycle, ch), Planes: nPlanes, Used: res.Used,
		ReadS: readS, EDFS: edfS}
	t := time.Now()
	if err := tiffio.WriteGray16(filepath.Join(r.stageDir, c.File), res.Out); err != nil {
		return err
	}
	c.WriteS = time.Since(t).Seconds()
	zeros := edf.StatsOf(res.Out.Pix).ZeroFrac()
	if zeros > 0.05 {
		r.lg.Warn("edf output has more than 5% zero pixels", "channel", ch, "file", c.File, "zero_fraction", zeros)
	}
	r.lg.Info("channel done", "cycle", o.Cycle, "channel", ch, "file", c.File, "planes", c.Planes,
		"used", sliceRange(res.Used), "read_s", f2(c.ReadS), "edf_s", f2(c.EDFS), "write_s", f2(c.WriteS))
	r.res.Channels = append(r.res.Channels, c)
	return nil
}

// fuseErr names channel i and its directory in a fusion error; a gate
// failure is bad input.
func (r *cycleRun) fuseErr(i int, err error) error {
	ch, dir := r.cfg.Channels[i], filepath.Join(InputDir(r.cfg.ProjectDir, r.o.Cycle), layout.ChannelDir(r.cfg.Channels[i]))
	if r.stacks != nil {
		dir = filepath.Dir(r.stacks[i][0])
	}
	if errors.Is(err, edf.ErrTooFewSlices) {
		return staging.Inputf("channel %d (%s): %w", ch, dir, err)
	}
	return fmt.Errorf("channel %d (%s): %w", ch, dir, err)
}

// fuseAllStreamed fuses the channels one at a time on st's device stack,
// readers planes read at once.
func (r *cycleRun) fuseAllStreamed(ctx context.Context, st Streamer, readers int) error {
	for i := range r.stacks {
		t := time.Now()
		res, readS, err := fuseStreamed(ctx, st, r.stacks[i], r.dims[i][0], r.dims[i][1], readers, r.g, r.p, r.collect)
		if err != nil {
			return r.fuseErr(i, err)
		}
		if err := r.done(i, res, len(r.stacks[i]), readS, time.Since(t).Seconds()-readS); err != nil {
			return err
		}
		res = nil
		r.collect()
	}
	return nil
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// sliceRange prints 0-based plane indices as 1-based slice numbers, e.g. "2-19" or "2,4,5".
func sliceRange(used []int) string {
	contiguous := true
	for i := 1; i < len(used); i++ {
		if used[i] != used[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(used) > 1 {
		return fmt.Sprintf("%d-%d", used[0]+1, used[len(used)-1]+1)
	}
	s := make([]string, len(used))
	for i, u := range used {
		s[i] = fmt.Sprint(u + 1)
	}
	return strings.Join(s, ",")
}

func writeSentinel(path string, o Options, p edf.Params, r *Result) error {
	chs := make([]string, len(r.Channels))
	used := make([]string, len(r.Channels))
	for i, c := range r.Channels {
		chs[i] = fmt.Sprint(c.Channel)
		used[i] = fmt.Sprintf("CH%d:%s", c.Channel, sliceRange(c.Used))
	}
	return staging.WriteSentinel(path, [][2]string{
		{"stage", "edf"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"successful", strings.Join(chs, ",")},
		{"skipped", ""},
		{"method", p.Method},
		{"slices_used", strings.Join(used, ";")},
		{"duration_minutes", fmt.Sprintf("%.2f", r.Seconds/60)},
		{"engine", o.Engine.Name()},
		{"workers", fmt.Sprint(o.Workers)},
	})
}
