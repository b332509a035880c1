// Package deconstage is the deconvolution stage of one cycle: it reads the
// stitched planes of every channel, deconvolves each channel's z-stack with
// the original's PSF and Richardson-Lucy settings (internal/psf,
// internal/decon) on the engine it is given, and writes the original's
// layout atomically (internal/staging):
//
//	data/processed/stitched/cycNN/CH{c}/{z:02d}.tif             input, uint16 (needs stitched/cycNN/.snakemake_complete)
//	data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif  output, uint16, k = 1.. in z order
//	data/processed/deconvolved/cycNN/DECONV_parameters.txt      settings, PSF and iterations per channel
//	data/processed/deconvolved/cycNN/.snakemake_complete        sentinel (key=value, stage=decon)
//
// Stacks are (z, y, x), x fastest, in counts. Channels run one after the
// other (each uses the whole device); planes are read and written by
// goroutines. Bad input (planes of different sizes, a missing or extra
// plane, no stitch sentinel, missing or non-physical optics keys, an
// all-zero channel) is an error wrapping ErrInput that names the file or
// key, found before anything is written.
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
// Template pieces here: Engine, with Gray16Engine and PlaneEngine (the
// device-buffer form: decon.DeviceStack, planes.go) found by assertion;
// CPUEngine the reference; memory.go (cpuEngineMemory, newMemModel,
// choose); Run in steps (newCycleRun, planMemory, channel, runStack,
// finish).
package deconstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or config (exit code 2);
// it is staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// Engine is a device that deconvolves stacks. The CUDA engine
// (*gpu.Engine) satisfies it and its two richer forms below, found by
// interface assertion; an engine may also report its host memory
// (membudget.MemoryReporter, see memory.go).
type Engine interface {
	decon.Deconvolver
	Name() string
	Close() error
}

// Gray16Engine is an Engine that also rounds to uint16 itself (the GPU,
// which then copies half the bytes back); the result equals
// decon.Quantize of Deconvolve's.
type Gray16Engine interface {
	Engine
	DeconvolveGray16(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) ([]*raster.Gray16, decon.Stats, error)
}

// PlaneEngine is an Engine with the device-buffer form (the GPU): a
// channel's planes go to a device stack as they are read, are
// deconvolved there and come back one rounded plane at a time, so the
// host holds the planes in flight, not the stack (runPlanes). DeconStreams
// says, before any work, whether a stack would instead stream its iterates
// through pinned host memory (then the stage hands it a host stack) and
// how many bytes that pins.
type PlaneEngine interface {
	Engine
	DeconStreams(ctx context.Context, n, h, w int, k *psf.Kernel, p decon.Params) (streamed bool, pinned int64, err error)
	DeconDeviceStack(ctx context.Context, n, h, w int) (decon.DeviceStack, error)
	DeconvolveDeviceStack(ctx context.Context, in decon.DeviceStack, k *psf.Kernel, p decon.Params) (decon.DeviceStack, decon.Stats, error)
}

// CPUEngine is the reference engine (decon.CPU on Workers goroutines).
type CPUEngine struct {
	decon.CPU
	Workers int
}

// Name describes the engine for logs and the sentinel.
func (c CPUEngine) Name() string { return fmt.Sprintf("cpu (%d workers)", c.Workers) }

// Close does nothing.
func (CPUEngine) Close() error { return nil }

// EngineMemory reports the CPU engine's host memory to the memory model.
func (CPUEngine) EngineMemory() membudget.EngineMemory { return cpuEngineMemory }

// onHost reports whether eng keeps its data in host memory (the CPU
// engine, or any engine that reports nothing): its windows then default to
// DefaultCPUBudget and shrink under the memory budget.
func onHost(eng Engine) bool { return !membudget.EngineMemoryOf(eng, cpuEngineMemory).OnDevice }

// DefaultCPUBudget bounds the CPU's per-window temporaries (5 float32
// arrays of a window): 2 GiB keeps a production channel (12676 x 7493 x 20)
// near 36 GB of host memory in all.
const DefaultCPUBudget = 2 << 30

// Options of a run.
type Options struct {
	Config  *config.Config
	Cycle   int
	Engine  Engine
	Workers int
	Logger  *slog.Logger
	// MemBudget is the host memory (resident set, bytes) the stage may use
	// (cliutil.MemBudget: --mem-budget, SLURM, cgroup, physical memory):
	// the stage sizes its read-ahead, write-behind and (CPU) windows from
	// it (memory.go) and refuses a budget below its smallest working set
	// before writing anything. 0: no budget (the preferred plan).
	MemBudget int64
	// MemBudgetSource says where MemBudget came from, for logs and errors.
	MemBudgetSource string

	// plan, when set (tests), replaces the chosen plan, to run every
	// pipeline form on small data.
	plan *memPlan
}

// Channel is one channel's outcome.
type Channel struct {
	Channel  int
	Planes   int
	W, H     int
	PSF      string
	Info     psf.Info
	Stats    decon.Stats
	Seconds  float64 // deconvolution, excluding I/O
	ReadSec  float64
	WriteSec float64
}

// Result of a run.
type Result struct {
	Dir      string
	Channels []Channel
	Seconds  float64
	// ChannelsInFlight is the memory plan's channels held at once (read
	// ahead, deconvolving, written behind); PlannedBytes its need; Plan
	// the plan in words.
	ChannelsInFlight int
	PlannedBytes     int64
	Plan             string
}

// InputDir is the stitched directory of a cycle (layout.Stitched).
func InputDir(project string, cycle int) string { return layout.Stitched(project, cycle) }

// OutDir is the stage's output directory of a cycle (layout.Deconvolved).
func OutDir(project string, cycle int) string { return layout.Deconvolved(project, cycle) }

// Params returns the decon settings of the config.
func Params(cfg *config.Config) (decon.Params, error) {
	d := cfg.Decon
	p := decon.Params{Algorithm: d.Algorithm, Iterations: d.Iterations, StopCriterion: d.StopCriterion,
		Damping: d.Damping, HistClip: d.HistClip, TV: d.TVLambda, Boundary: d.Boundary, MemoryBudget: int64(d.MemoryBudgetMB) << 20}
	if err := p.Validate(); err != nil {
		return p, &config.Error{File: cfg.Path, Key: "decon", Msg: err.Error()}
	}
	return p, nil
}

// Kernel computes the PSF of channel ch from the config's microscope keys,
// wavelengths and decon.psf_model, or, when decon.psf_file is set, makes it
// from that measured PSF (MeasuredKernel) for every channel; errors name
// the key. Both engines receive this kernel: the GPU's as the CPU's.
func Kernel(cfg *config.Config, ch int) (*psf.Kernel, psf.Info, error) {
	if cfg.Decon.PSFFile != "" {
		return MeasuredKernel(cfg)
	}
	ex, em, err := cfg.Wavelength(ch)
	if err != nil {
		return nil, psf.Info{}, err
	}
	o := psf.Optics{DXY: cfg.XYPixelSize, DZ: cfg.ZStepSize, NA: cfg.NumericalAperture, RI: cfg.TissueRefractiveIndex,
		ExNM: ex, EmNM: em, SlitMM: cfg.Decon.SlitAperture, FCylMM: cfg.Decon.FCyl}
	k, info, err := psf.Make(cfg.Decon.PSFModel, o)
	if err != nil {
		var oe *psf.OpticsError
		if errors.As(err, &oe) {
			key := oe.Key
			if strings.HasPrefix(key, "wavelengths") {
				key = fmt.Sprintf("wavelengths.%d", ch)
			}
			return nil, info, &config.Error{File: cfg.Path, Key: key, Msg: oe.Msg}
		}
		return nil, info, fmt.Errorf("channel %d PSF: %w", ch, err)
	}
	return k, info, nil
}

// MeasuredKernel reads decon.psf_file (a multi-page TIFF, pages z of
// y x x, any integer or float type; at most psf.MaxMeasuredSide per side,
// checked on its header before its pixels are read) and makes the kernel
// on the data's grid (psf.FromMeasured: background, centre by
// decon.psf_center, resampling from decon.psf_voxel_xy_nm /
// psf_voxel_z_nm to xy_pixel_size / z_step_size, sum 1). Every error names
// decon.psf_file and the file.
func MeasuredKernel(cfg *config.Config) (*psf.Kernel, psf.Info, error) {
	path := cfg.PSFFilePath()
	bad := func(format string, args ...any) (*psf.Kernel, psf.Info, error) {
		return nil, psf.Info{}, &config.Error{File: cfg.Path, Key: "decon.psf_file", Msg: path + ": " + fmt.Sprintf(format, args...)}
	}
	info, err := tiffio.ReadInfo(path)
	if err != nil {
		return bad("%v", err)
	}
	if info.SamplesPerPixel != 1 {
		return bad("%d samples per pixel: want a grey z-stack", info.SamplesPerPixel)
	}
	if info.Width > psf.MaxMeasuredSide || info.Height > psf.MaxMeasuredSide || info.Pages > psf.MaxMeasuredSide {
		return bad("%d x %d px x %d pages: at most %d per side", info.Width, info.Height, info.Pages, psf.MaxMeasuredSide)
	}
	pages, err := tiffio.ReadFloat32Pages(path)
	if err != nil {
		return bad("%v", err)
	}
	m := psf.Measured{NZ: len(pages), NY: pages[0].H, NX: pages[0].W, DXY: cfg.XYPixelSize, DZ: cfg.ZStepSize, Center: cfg.Decon.PSFCenter}
	m.VoxelXY, m.VoxelZ = cfg.PSFVoxel()
	m.Data = make([]float32, 0, m.NZ*m.NY*m.NX)
	for i, p := range pages {
		if p.W != m.NX || p.H != m.NY {
			return bad("page %d is %d x %d, page 1 %d x %d: want one size", i+1, p.W, p.H, m.NX, m.NY)
		}
		m.Data = append(m.Data, p.Pix...)
	}
	k, pi, err := psf.FromMeasured(m)
	if err != nil {
		return bad("%v", err)
	}
	return k, pi, nil
}

// psfModel names the PSF for logs, the sentinel and DECONV_parameters.txt:
// decon.psf_model, or "measured" with decon.psf_file.
func psfModel(cfg *config.Config) string {
	if cfg.Decon.PSFFile != "" {
		return "measured"
	}
	return cfg.Decon.PSFModel
}

var planeRE = regexp.MustCompile(`^(\d+)\.tif$`)

// Planes lists a channel directory's stitched planes {z:02d}.tif in z
// order and checks that they are consecutive, that there are nz of them
// when nz > 0 (the config's n_zplanes), and that all have one size.
func Planes(dir string, nz int) (paths []string, w, h int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, 0, staging.Inputf("stitched channel directory %s: %v", dir, err)
	}
	type pl struct {
		z    int
		path string
	}
	var ps []pl
	for _, e := range ents {
		m := planeRE.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		z, _ := strconv.Atoi(m[1])
		ps = append(ps, pl{z, filepath.Join(dir, e.Name())})
	}
	if len(ps) == 0 {
		return nil, 0, 0, staging.Inputf("%s: no stitched planes {z:02d}.tif", dir)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].z < ps[j].z })
	for i := 1; i < len(ps); i++ {
		if ps[i].z == ps[i-1].z {
			return nil, 0, 0, staging.Inputf("%s and %s: the same z-plane twice", ps[i-1].path, ps[i].path)
		}
		if ps[i].z != ps[i-1].z+1 {
			return nil, 0, 0, staging.Inputf("%s: missing plane %02d.tif (planes %d..%d present)", dir, ps[i-1].z+1, ps[0].z, ps[len(ps)-1].z)
		}
	}
	if nz > 0 && len(ps) != nz {
		what := "missing"
		if len(ps) > nz {
			what = "extra"
		}
		return nil, 0, 0, staging.Inputf("%s: %d planes (%02d..%02d), n_zplanes is %d: %s plane(s)", dir, len(ps), ps[0].z, ps[len(ps)-1].z, nz, what)
	}
	for i, p := range ps {
		info, err := tiffio.ReadInfo(p.path)
		if err != nil {
			return nil, 0, 0, staging.Inputf("%s: %v", p.path, err)
		}
		if info.SamplesPerPixel != 1 || info.BitsPerSample != 16 || info.SampleFormat == 3 {
			return nil, 0, 0, staging.Inputf("%s: want a uint16 grey plane (%d bits, format %d, %d samples)", p.path, info.BitsPerSample, info.SampleFormat, info.SamplesPerPixel)
		}
		if i == 0 {
			w, h = info.Width, info.Height
		} else if info.Width != w || info.Height != h {
			return nil, 0, 0, staging.Inputf("%s is %dx%d, %s is %dx%d: stitched planes of one channel must have one size", p.path, info.Width, info.Height, ps[0].path, w, h)
		}
		paths = append(paths, p.path)
	}
	return paths, w, h, nil
}

// ReadStack reads planes into a (z, y, x) stack in counts.
func ReadStack(ctx context.Context, paths []string, w, h, workers int) (*raster.Stack, error) {
	st := raster.NewStack(len(paths), h, w)
	err := par.ForEach(ctx, len(paths), workers, func(i int) error {
		img, err := tiffio.ReadGray16(paths[i])
		if err != nil {
			return staging.Inputf("%s: %v", paths[i], err)
		}
		if img.W != w || img.H != h {
			return staging.Inputf("%s is %dx%d, want %dx%d", paths[i], img.W, img.H, w, h)
		}
		toCounts(st.Plane(i), img.Pix)
		return nil
	})
	return st, err
}

// ReadTileStack reads one tile's z-stack: a multi-page TIFF, or a
// directory of single-plane TIFFs in name order.
func ReadTileStack(path string) (*raster.Stack, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, staging.Inputf("--in %s: %v", path, err)
	}
	var pages []*raster.Gray16
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, staging.Inputf("--in %s: %v", path, err)
		}
		var names []string
		for _, e := range ents {
			if n := strings.ToLower(e.Name()); !e.IsDir() && (strings.HasSuffix(n, ".tif") || strings.HasSuffix(n, ".tiff")) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			img, err := tiffio.ReadGray16(filepath.Join(path, n))
			if err != nil {
				return nil, staging.Inputf("%s: %v", filepath.Join(path, n), err)
			}
			pages = append(pages, img)
		}
	} else {
		pages, err = tiffio.ReadGray16Pages(path)
		if err != nil {
			return nil, staging.Inputf("%s: %v", path, err)
		}
	}
	if len(pages) == 0 {
		return nil, staging.Inputf("--in %s: no TIFF planes", path)
	}
	st := raster.NewStack(len(pages), pages[0].H, pages[0].W)
	for i, p := range pages {
		if p.W != st.W || p.H != st.H {
			return nil, staging.Inputf("--in %s: plane %d is %dx%d, plane 1 is %dx%d", path, i+1, p.W, p.H, st.W, st.H)
		}
		toCounts(st.Plane(i), p.Pix)
	}
	return st, nil
}

// ToPages quantises a result (counts) into uint16 planes.
func ToPages(st *raster.Stack) []*raster.Gray16 {
	pages := make([]*raster.Gray16, st.N)
	for z := range pages {
		pages[z] = &raster.Gray16{W: st.W, H: st.H, Pix: decon.Quantize(nil, st.Plane(z))}
	}
	return pages
}

// settings returns the parameters and the PSF for channel ch from the
// config (a bad setting wraps ErrInput), with the worker count and, for an
// engine on the host (cpu: onHost), DefaultCPUBudget unless the config sets
// a budget.
func settings(cfg *config.Config, ch int, cpu bool, workers int) (decon.Params, *psf.Kernel, psf.Info, error) {
	p, err := Params(cfg)
	if err != nil {
		return p, nil, psf.Info{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	k, info, err := Kernel(cfg, ch)
	if err != nil {
		return p, nil, info, fmt.Errorf("%w: %w", ErrInput, err)
	}
	p.Workers = workers
	if cpu && p.MemoryBudget == 0 {
		p.MemoryBudget = DefaultCPUBudget
	}
	return p, k, info, nil
}

// algInput marks the algorithm's input errors (decon.ErrInput) as the
// stage's (ErrInput).
func algInput(err error) error {
	if errors.Is(err, decon.ErrInput) {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	return err
}

// Deconvolve runs one stack with the config's settings for channel ch.
func Deconvolve(ctx context.Context, eng Engine, cfg *config.Config, ch int, st *raster.Stack, workers int) (*raster.Stack, decon.Stats, *psf.Kernel, psf.Info, error) {
	p, k, info, err := settings(cfg, ch, onHost(eng), workers)
	if err != nil {
		return nil, decon.Stats{}, nil, info, err
	}
	out, s, err := eng.Deconvolve(ctx, st, k, p)
	return out, s, k, info, algInput(err)
}

// job is one channel's settings and input.
type job struct {
	ch    int
	paths []string // stitched planes, z order; nil: handed in (Fused)
	n     int      // planes
	w, h  int
	p     decon.Params
	k     *psf.Kernel
	info  psf.Info
	mode  mode
}

// input is a channel read: a float32 stack (modeStack) or, read ahead in
// modePlane, its uint16 planes; nil pages in modePlane: read while
// uploading.
type input struct {
	st    *raster.Stack
	pages []*raster.Gray16
	sec   float64
	err   error
}

// read reads job j's input: the float32 stack, or with hold (modePlane
// read ahead) every uint16 plane; modePlane without hold reads nothing.
func (j *job) read(ctx context.Context, workers int, hold bool) input {
	t0 := time.Now()
	var in input
	switch {
	case j.mode == modeStack:
		in.st, in.err = ReadStack(ctx, j.paths, j.w, j.h, workers)
	case hold:
		in.pages = make([]*raster.Gray16, len(j.paths))
		in.err = par.ForEach(ctx, len(j.paths), workers, func(z int) error {
			pg, err := readPlane(j.paths[z], j.w, j.h)
			in.pages[z] = pg
			return err
		})
	}
	in.sec = time.Since(t0).Seconds()
	return in
}

func readPlane(path string, w, h int) (*raster.Gray16, error) {
	img, err := tiffio.ReadGray16(path)
	if err != nil {
		return nil, staging.Inputf("%s: %v", path, err)
	}
	if img.W != w || img.H != h {
		return nil, staging.Inputf("%s is %dx%d, want %dx%d", path, img.W, img.H, w, h)
	}
	return img, nil
}

// Run deconvolves one cycle: every check and the memory plan before any
// output (newCycleRun, planMemory), then the channels one after the other
// with read-ahead and write-behind (channel), then DECONV_parameters.txt,
// the sentinel and the commit (finish).
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	r, err := newCycleRun(ctx, o)
	if err != nil {
		return nil, err
	}
	mm, err := r.planMemory()
	if err != nil {
		return nil, err
	}
	defer membudget.SetGoLimit(mm.goLimit())()
	stage, err := staging.NewContext(ctx, r.res.Dir)
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	r.stageDir = stage.Path
	cfg := r.cfg
	r.lg.Info("deconvolving cycle", "cycle", o.Cycle, "channels", cfg.Channels, "engine", o.Engine.Name(), "workers", r.workers,
		"psf_model", psfModel(cfg), "psf_file", cfg.PSFFilePath(), "algorithm", cfg.Decon.Algorithm, "iterations", cfg.Decon.Iterations)

	// Goroutines of read-ahead and write-behind end before Run returns
	// (the staging directory is removed on failure only after them).
	ctx, cancel := context.WithCancel(ctx)
	defer r.wg.Wait()
	defer cancel()
	r.res.Channels = make([]Channel, len(r.jobs))
	for i := range r.jobs {
		if err := r.channel(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := r.waitBehind(); err != nil {
		return nil, err
	}
	r.res.Seconds = time.Since(start).Seconds()
	if err := r.finish(stage.Path); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	r.lg.Info("cycle deconvolved", "cycle", o.Cycle, "dir", r.res.Dir, "seconds", fmt.Sprintf("%.1f", r.res.Seconds))
	return r.res, nil
}

// cycleRun is one Run's state, step to step.
type cycleRun struct {
	o       Options
	cfg     *config.Config
	lg      *slog.Logger
	workers int
	cpu     bool        // the engine works on the host (onHost)
	pe      PlaneEngine // the engine's device-buffer form; nil: none
	jobs    []*job
	chans   []chanMem
	modes   []mode
	plan    memPlan
	io      int // goroutines reading (and writing from the device) planes
	res     *Result

	stageDir string
	wg       sync.WaitGroup
	ahead    chan input // the next channel, read ahead
	behind   chan error // the previous channel, written behind
}

// newCycleRun checks the input (stitch sentinel, settings, every
// channel's planes) and makes each channel's job; on an engine with the
// device-buffer form it asks which form each channel takes.
func newCycleRun(ctx context.Context, o Options) (*cycleRun, error) {
	cfg := o.Config
	in := InputDir(cfg.ProjectDir, o.Cycle)
	if err := staging.RequireSentinel(in, o.Cycle, "stitch"); err != nil {
		return nil, err
	}
	// Every check before any output.
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	for i, ch := range cfg.Channels {
		err := r.newJob(ctx, i, ch, func() ([]string, int, int, int, error) {
			paths, w, h, err := Planes(filepath.Join(in, layout.ChannelDir(ch)), cfg.NZPlanes)
			return paths, len(paths), h, w, err
		})
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// newRun is a cycleRun before its jobs: the settings checked (a bad one
// wraps ErrInput) and the engine's forms found.
func newRun(o Options) (*cycleRun, error) {
	r := &cycleRun{o: o, cfg: o.Config, lg: o.Logger, workers: max(1, o.Workers), cpu: onHost(o.Engine)}
	if r.lg == nil {
		r.lg = slog.Default()
	}
	if len(r.cfg.Channels) == 0 {
		return nil, staging.Inputf("config %s: key channels: empty", r.cfg.Path)
	}
	if _, err := Params(r.cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	r.pe, _ = o.Engine.(PlaneEngine)
	n := len(r.cfg.Channels)
	r.jobs, r.chans, r.modes = make([]*job, n), make([]chanMem, n), make([]mode, n)
	return r, nil
}

// newJob makes job i of channel ch with its settings and PSF, then its
// planes from planes (their paths, or none when they are handed in:
// Fused; n planes of h x w px) and, on an engine with the device-buffer
// form, the form it takes.
func (r *cycleRun) newJob(ctx context.Context, i, ch int, planes func() (paths []string, n, h, w int, err error)) error {
	p, k, info, err := settings(r.cfg, ch, r.cpu, r.workers)
	if err != nil {
		return err
	}
	paths, n, h, w, err := planes()
	if err != nil {
		return err
	}
	j := &job{ch: ch, paths: paths, n: n, w: w, h: h, p: p, k: k, info: info}
	r.chans[i] = newChanMem(n, h, w, k, p)
	if r.pe != nil {
		streamed, pinned, err := r.pe.DeconStreams(ctx, n, h, w, k, p)
		if err != nil {
			return fmt.Errorf("channel %d: %w", ch, algInput(err))
		}
		r.chans[i].Streamed, r.chans[i].Pinned = streamed, pinned
		if !streamed {
			j.mode = modePlane
		}
	}
	r.jobs[i], r.modes[i] = j, j.mode
	return nil
}

// planMemory chooses the memory plan, before any output (a budget below
// the smallest working set is refused here), applies it and logs it.
func (r *cycleRun) planMemory() (memModel, error) {
	o := r.o
	mm := newMemModel(membudget.EngineMemoryOf(o.Engine, cpuEngineMemory), r.cpu, r.modes, r.chans, r.workers, membudget.RSS(), o.MemBudget, o.MemBudgetSource)
	plan, err := mm.choose()
	if err != nil {
		return mm, err
	}
	if o.plan != nil {
		plan = *o.plan
	}
	if r.cpu && plan.Window > 0 {
		for _, j := range r.jobs {
			j.p.MemoryBudget = min(j.p.MemoryBudget, plan.Window)
		}
	}
	r.plan, r.io = plan, plan.IO
	res := &Result{Dir: OutDir(r.cfg.ProjectDir, o.Cycle), ChannelsInFlight: 1 + plan.Ahead + plan.Behind, PlannedBytes: mm.need(plan)}
	r.res = res
	res.Plan = fmt.Sprintf("channels_in_flight=%d read_ahead=%d write_behind=%d planes_in_flight=%d planned=%s fixed=%s pinned=%s go_limit=%s budget=%s",
		res.ChannelsInFlight, plan.Ahead, plan.Behind, plan.IO, membudget.Format(res.PlannedBytes), membudget.Format(mm.fixed),
		membudget.Format(mm.pinned()), membudget.Format(mm.goLimit()), membudget.Describe(o.MemBudget, o.MemBudgetSource))
	attrs := []any{"cycle", o.Cycle, "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"channels_in_flight", res.ChannelsInFlight, "read_ahead", plan.Ahead, "write_behind", plan.Behind, "planes_in_flight", plan.IO,
		"planned", membudget.Format(res.PlannedBytes), "fixed", membudget.Format(mm.fixed), "go_limit", membudget.Format(mm.goLimit()),
		"channel_uint16", membudget.Format(r.chans[0].u())}
	switch {
	case r.modes[0] == modePlane:
		attrs = append(attrs, "host_form", "planes to and from the device")
	case r.chans[0].Streamed:
		attrs = append(attrs, "host_form", "float32 stack, iterates streamed through pinned host memory", "pinned", membudget.Format(mm.pinned()))
	default:
		attrs = append(attrs, "host_form", "float32 stack", "padded_array", membudget.Format(r.chans[0].p()))
		if r.cpu {
			attrs = append(attrs, "cpu_window_budget", membudget.Format(plan.Window))
		}
	}
	if r.cpu {
		res.Plan += " cpu_window_budget=" + membudget.Format(plan.Window)
	}
	r.lg.Info("memory plan", attrs...)
	return mm, nil
}

// waitBehind waits for the previous channel's write-behind, if any.
func (r *cycleRun) waitBehind() error {
	if r.behind == nil {
		return nil
	}
	err := <-r.behind
	r.behind = nil
	return err
}

func (r *cycleRun) logChannel(c Channel) {
	s := c.Stats
	r.lg.Info("channel deconvolved", "cycle", r.o.Cycle, "channel", c.Channel, "planes", c.Planes, "size", fmt.Sprintf("%dx%d", c.W, c.H),
		"psf", c.PSF+" (x,y,z)", "iterations", s.Iterations, "stopped", s.Stopped, "chunks", s.Chunks, "streamed", s.Streamed,
		"lo", s.Lo, "hi", s.Hi, "raw_max", s.RawMax, "decon_s", fmt.Sprintf("%.2f", c.Seconds),
		"read_s", fmt.Sprintf("%.2f", c.ReadSec), "write_s", fmt.Sprintf("%.2f", c.WriteSec))
}

// channel deconvolves channel i: its input (read ahead, or now), the next
// channel's read-ahead, the deconvolution in the channel's form, and its
// planes written now, behind, or (plane form) straight from the device.
func (r *cycleRun) channel(ctx context.Context, i int) error {
	j := r.jobs[i]
	c := &r.res.Channels[i]
	*c = Channel{Channel: j.ch, Planes: j.n, W: j.w, H: j.h, PSF: j.k.String(), Info: j.info}
	var cin input
	if r.ahead != nil {
		cin = <-r.ahead
		r.ahead = nil
	} else {
		cin = j.read(ctx, r.io, false)
	}
	if cin.err != nil {
		return cin.err
	}
	c.ReadSec = cin.sec
	if r.plan.Ahead > 0 && i+1 < len(r.jobs) {
		r.ahead = make(chan input, 1)
		next := r.jobs[i+1]
		r.wg.Add(1)
		go func(ch chan input) {
			defer r.wg.Done()
			ch <- next.read(ctx, r.io, true)
		}(r.ahead)
	}
	chDir := filepath.Join(r.stageDir, layout.ChannelDir(j.ch))
	if err := os.MkdirAll(chDir, 0o777); err != nil {
		return err
	}
	planePath := func(z int) string { return filepath.Join(chDir, layout.DeconPlane(z+1)) }
	wrapErr := func(err error) error {
		err = algInput(err)
		if errors.Is(err, ErrInput) {
			return fmt.Errorf("channel %d (%s): %w", j.ch, filepath.Dir(j.paths[0]), err)
		}
		return fmt.Errorf("channel %d: %w", j.ch, err)
	}
	// pages: the channel's result on the host (modeStack, or modePlane
	// written behind); nil: written plane by plane.
	var pages []*raster.Gray16
	var err error
	if j.mode == modePlane {
		if pages, err = runPlanes(ctx, r.pe, j, cin, r.io, r.plan.Behind > 0, c, r.waitBehind, planePath); err != nil {
			return wrapErr(err)
		}
	} else {
		if pages, err = r.runStack(ctx, j, cin, c); err != nil {
			return wrapErr(err)
		}
		if err := r.waitBehind(); err != nil {
			return err
		}
	}
	if pages == nil { // written plane by plane
		r.logChannel(*c)
		return nil
	}
	write := func(pages []*raster.Gray16) error {
		t2 := time.Now()
		err := par.ForEach(ctx, len(pages), r.workers, func(z int) error {
			err := tiffio.WriteGray16(planePath(z), pages[z])
			pages[z] = nil
			return err
		})
		if err != nil {
			return fmt.Errorf("channel %d: write: %w", j.ch, err)
		}
		c.WriteSec = time.Since(t2).Seconds()
		r.logChannel(*c)
		return nil
	}
	if r.plan.Behind == 0 {
		return write(pages)
	}
	r.behind = make(chan error, 1)
	r.wg.Add(1)
	go func(ch chan error, pages []*raster.Gray16) {
		defer r.wg.Done()
		ch <- write(pages)
	}(r.behind, pages)
	return nil
}

// runStack deconvolves job j's host stack (modeStack) on the engine,
// rounded to uint16 by the engine when it can (Gray16Engine).
func (r *cycleRun) runStack(ctx context.Context, j *job, cin input, c *Channel) ([]*raster.Gray16, error) {
	t1 := time.Now()
	st := cin.st
	cin.st = nil
	var pages []*raster.Gray16
	var s decon.Stats
	var err error
	if g, ok := r.o.Engine.(Gray16Engine); ok {
		pages, s, err = g.DeconvolveGray16(ctx, st, j.k, j.p)
	} else {
		var out *raster.Stack
		out, s, err = r.o.Engine.Deconvolve(ctx, st, j.k, j.p)
		if err == nil {
			pages = ToPages(out)
		}
	}
	st = nil
	if err != nil {
		return nil, err
	}
	c.Stats = s
	c.Seconds = time.Since(t1).Seconds()
	return pages, nil
}

// finish writes DECONV_parameters.txt and the sentinel into dir.
func (r *cycleRun) finish(dir string) error {
	cfg, o, res := r.cfg, r.o, r.res
	if err := os.WriteFile(filepath.Join(dir, "DECONV_parameters.txt"), []byte(ParametersText(cfg, o, res)), 0o666); err != nil {
		return err
	}
	chs := make([]string, len(res.Channels))
	for i, c := range res.Channels {
		chs[i] = fmt.Sprint(c.Channel)
	}
	its := make([]string, len(res.Channels))
	for i, c := range res.Channels {
		its[i] = fmt.Sprint(c.Stats.Iterations)
	}
	return staging.WriteSentinel(layout.Sentinel(dir), [][2]string{
		{"stage", "decon"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"successful", strings.Join(chs, ",")},
		{"failed", ""},
		{"duration_minutes", fmt.Sprintf("%.2f", res.Seconds/60)},
		{"engine", o.Engine.Name()},
		{"workers", fmt.Sprint(r.workers)},
		{"psf_model", psfModel(cfg)},
		{"algorithm", cfg.Decon.Algorithm},
		{"iterations", strings.Join(its, ",")},
	})
}

// ElapsedText formats a duration in seconds as the original's
// DECONV_parameters.txt does (Kdecon/main.py: str(timedelta(seconds=
// int(elapsed)))): whole seconds, "H:MM:SS" with unpadded hours, and
// "N day(s), H:MM:SS" from one day on; 45 s is "0:00:45". (This project
// used to print hours and minutes only, so every run under a minute read
// "00:00".)
func ElapsedText(sec float64) string {
	s := int64(max(0, sec))
	d, s := s/86400, s%86400
	hms := fmt.Sprintf("%d:%02d:%02d", s/3600, s%3600/60, s%60)
	switch {
	case d == 1:
		return "1 day, " + hms
	case d > 1:
		return fmt.Sprintf("%d days, %s", d, hms)
	}
	return hms
}

// ParametersText is DECONV_parameters.txt: the original's lines (LsDeconv's
// info file), one block per channel.
func ParametersText(cfg *config.Config, o Options, res *Result) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("deconvolution finished at %s", time.Now().UTC().Format(time.RFC3339))
	w("data processed on: %s", o.Engine.Name())
	w("elapsed time: %s", ElapsedText(res.Seconds))
	w("")
	w("psf model: %s", psfModel(cfg))
	if cfg.Decon.PSFFile != "" {
		xy, z := cfg.PSFVoxel()
		c := cfg.Decon.PSFCenter
		if c == "" {
			c = psf.CenterMaximum
		}
		w("psf file: %s", cfg.PSFFilePath())
		w("psf file voxel size: %g nm x %g nm x %g nm (centred on its %s)", xy, xy, z, c)
	}
	w("algorithm: %s", cfg.Decon.Algorithm)
	if p, err := Params(cfg); err == nil {
		b, tv := p.Boundary, p.TV
		if b == "" {
			b = decon.BoundaryMirror
		}
		w("boundary: %s", b)
		if cfg.Decon.Algorithm == decon.RichardsonLucyTV {
			if tv == 0 {
				tv = decon.DefaultTV
			}
			w("total variation lambda: %g", tv)
		}
	}
	w("focal length of cylinder lens (mm): %g", cfg.Decon.FCyl)
	w("width of slit aperture (mm): %g", cfg.Decon.SlitAperture)
	w("histogram clipping value (%%): %g", cfg.Decon.HistClip)
	w("numerical aperture: %g", cfg.NumericalAperture)
	w("refractive index: %g", cfg.TissueRefractiveIndex)
	w("max. iterations: %d", cfg.Decon.Iterations)
	w("damping factor (%%): %g", cfg.Decon.Damping)
	w("stop criterion (%%): %g", cfg.Decon.StopCriterion)
	w("source data folder: %s", InputDir(cfg.ProjectDir, o.Cycle))
	w("voxel size : %g nm x %g nm x %g nm", cfg.XYPixelSize, cfg.XYPixelSize, cfg.ZStepSize)
	for _, c := range res.Channels {
		ex, em, _ := cfg.Wavelength(c.Channel)
		w("")
		w("channel: %d", c.Channel)
		w("excitation wavelength (nm): %g", ex)
		w("emission wavelength (nm): %g", em)
		w("size of PSF (pixel): %s", strings.ReplaceAll(c.PSF, "x", " x "))
		w("PSF sampling (nm): %g x %g", c.Info.SampleXY, c.Info.SampleZ)
		w("FWHHM of PSF lateral (nm): %g", c.Info.FWHMxy)
		w("FWHHM of PSF axial (nm): %g", c.Info.FWHMz)
		w("Rayleigh range of objective lateral (nm): %g", 0.61*em/cfg.NumericalAperture)
		w("Rayleigh range of objective axial (nm): %g", 2*em*cfg.TissueRefractiveIndex/(cfg.NumericalAperture*cfg.NumericalAperture))
		w("iterations: %d (stopped by criterion: %v)", c.Stats.Iterations, c.Stats.Stopped)
		w("highest intensity value in deconvolved data: %g", c.Stats.RawMax)
		w("clip values (low, high): %g, %g", c.Stats.Lo, c.Stats.Hi)
		w("stack (x y z): %d x %d x %d", c.W, c.H, c.Planes)
	}
	return b.String()
}
