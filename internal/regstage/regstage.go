// Package regstage is the registration stage of a project: every cycle's
// EDF images are aligned to the reference cycle on DAPI (internal/register)
// and every channel is warped at full resolution, written in the
// original's layout, atomically for the whole registered/ directory
// (internal/staging).
//
//	data/processed/edf/cycNN/.snakemake_complete                     input sentinel (required, every cycle)
//	data/processed/edf/cycNN/*.tif                                   input, uint16, one per channel
//	data/processed/registered/cycNN/<same name>.tif                   output, uint16, reference size
//	data/processed/registered/registration_data/cycNN_transform.json  rigid parameters + field geometry
//	data/processed/registered/registration_data/cycNN_field_{dy,dx}.tif  float32 field nodes, px
//	data/processed/registered/qc/cycNN_metrics.json                   NCC before/rigid/non-rigid, field stats
//	data/processed/registered/qc/cycNN_overlay.png                    reference (magenta) + cycle (green)
//	data/processed/registered/registered.ome.tif                      pyramidal OME-TIFF, every cycle x channel (internal/ometiff)
//	data/processed/registered/markers.csv                             MCMICRO marker table of the OME-TIFF's channels, in its order
//	data/processed/registered/.snakemake_complete                     sentinel (key=value, stage=registration)
//
// Every cycle is registered on its channel registration.reference_channel
// (default 1, the DAPI channel of a CODEX experiment): the EDF image
// cfg.EDFFileName(cycle, reference_channel), which must exist in every
// cycle. (The original accepts the key but ignores it and always takes the
// first DAPI*.tif, else the first *.tif; with DAPI in channel 1 both pick
// the same image.) The reference cycle is registration.reference_cycle.
// The "DAPI" of the comments below is that registration channel. Images of different sizes are zero-padded at
// the bottom and right to the largest height and width, as the original
// does; a size that differs from the largest by more than MaxPadPx or
// MaxPadFrac of the dimension (whichever is larger) is refused. With one
// cycle, its EDF images are copied (the original's behaviour).
//
// Memory: the stage sizes its pipeline from the job's budget
// (Options.MemBudget; memory.go has the model) and stops before any output
// with a *membudget.NeedError naming ConfigKeyMem when even the smallest
// working set does not fit. The reference DAPI image is read once and kept
// only as its downsampled levels; then one cycle at a time: its DAPI is
// read and registered while the next channels are read ahead, every
// channel is warped one at a time (the DAPI first, so that it is dropped
// before the next channel comes in) and handed to a bounded write-behind,
// and the cycle's transform, metrics and overlay are written as soon as it
// is done. The OME-TIFF re-reads the registered images, each as soon as
// it is written (beside the registration, when the plan's budget holds
// both; else after it).
//
// Bad input is an error wrapping ErrInput that names the file, cycle or
// config key: a missing EDF sentinel, directory or image; the reference
// cycle not among the cycles; sizes beyond the padding rule; a cycle whose
// registration leaves its DAPI agreeing worse with the reference than
// before (NCC after < NCC before), with its metrics. Nothing is written
// then (no silent copy of unregistered images).
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
// Template pieces here: Options.Engine, a register.Backend (register.CPU the
// reference, the CUDA engine's Registrar); memory.go (cpuEngineMemory,
// engineMemory, deviceName, choose); Run in steps (discover, checkSizes,
// the memory plan, registerAll, writeOME, the sentinel).
package regstage

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or configuration; it is
// staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// The padding rule: an image may be smaller than the largest by at most
// max(MaxPadPx, MaxPadFrac x the largest) px in each dimension (the
// original's example pads 7472 x 12662 and 7479 x 12660 to one size).
const (
	MaxPadPx   = 64
	MaxPadFrac = 0.02
)

// MinSidePx is the smallest image side registration accepts.
const MinSidePx = 64

// NCCTolerance is how much lower than before a cycle's final DAPI NCC may
// be before the cycle is refused (rounding only: any real loss fails).
const NCCTolerance = 1e-4

// EDFDir is edf/cycNN of a project (layout.EDFOut).
func EDFDir(project string, cycle int) string { return layout.EDFOut(project, cycle) }

// OutDir is the registered/ directory of a project (layout.Registered).
func OutDir(project string) string { return layout.Registered(project) }

// Options configure Run.
type Options struct {
	Config *config.Config
	// Engine registers and warps on one device (register.CPU, or the
	// CUDA engine's Registrar); what it reports of its memory
	// (membudget.MemoryReporter) picks the memory model and the sentinel's
	// device ("gpu" for data on the device, else "cpu").
	Engine  register.Backend
	Workers int
	Logger  *slog.Logger
	// MemBudget is the host memory (resident set, bytes) the stage may use
	// (cliutil.MemBudget: --mem-budget, SLURM, cgroup, physical memory):
	// the read-ahead and write-behind are sized from it, and a budget below
	// the smallest working set is an error (*membudget.NeedError naming
	// ConfigKeyMem) before any output. 0: no budget (the preferred plan).
	MemBudget int64
	// MemBudgetSource says where MemBudget came from, for logs and errors.
	MemBudgetSource string

	plan memPlan // tests: the plan to use instead of the chosen one
}

// CycleResult is one cycle's outcome.
type CycleResult struct {
	Cycle   int
	Files   []string
	Metrics *register.Metrics // nil for the reference and a copied single cycle
	Seconds float64
}

// Result is the stage's outcome.
type Result struct {
	OutDir    string
	Reference int
	H, W      int
	Cycles    []CycleResult
	Seconds   float64
	// PlanesInMemory is the most full-size planes held at once by the
	// pipeline (read and not yet warped, or warped and not yet written),
	// at most the memory plan's.
	PlanesInMemory int
}

// cycleInput is one cycle's EDF files.
type cycleInput struct {
	cycle int
	dir   string
	files []string // base names, sorted
	dapi  string   // base name of the registration image (channel registration.reference_channel)
}

// Discover lists every cycle's EDF images, checks the sentinel, the
// reference cycle and the reference channel, and picks each cycle's
// registration image.
func discover(cfg *config.Config) ([]cycleInput, error) {
	ref := cfg.Registration.ReferenceCycle
	found := false
	for _, c := range cfg.Cycles {
		found = found || c == ref
	}
	if !found {
		return nil, staging.Inputf("config %s: key registration.reference_cycle: %d is not among the cycles %v", cfg.Path, ref, cfg.Cycles)
	}
	refCh := cfg.Registration.ReferenceChannel
	if !slices.Contains(cfg.Channels, refCh) {
		return nil, staging.Inputf("config %s: key registration.reference_channel: %d is not among the channels %v", cfg.Path, refCh, cfg.Channels)
	}
	var out []cycleInput
	for _, c := range cfg.Cycles {
		dir := EDFDir(cfg.ProjectDir, c)
		if err := staging.RequireSentinel(dir, c, "edf"); err != nil {
			return nil, err
		}
		paths, err := filepath.Glob(filepath.Join(dir, "*.tif"))
		if err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, staging.Inputf("cycle %d: no *.tif EDF images in %s", c, dir)
		}
		ci := cycleInput{cycle: c, dir: dir}
		for _, p := range paths {
			ci.files = append(ci.files, filepath.Base(p))
		}
		sort.Strings(ci.files)
		ci.dapi = cfg.EDFFileName(c, refCh)
		if !slices.Contains(ci.files, ci.dapi) {
			return nil, staging.Inputf("config %s: key registration.reference_channel: channel %d of cycle %d is %s, which is not in %s (found %s)",
				cfg.Path, refCh, c, ci.dapi, dir, strings.Join(ci.files, ", "))
		}
		for _, ch := range cfg.Channels {
			if f := cfg.EDFFileName(c, ch); !slices.Contains(ci.files, f) {
				return nil, staging.Inputf("cycle %d: channel %d's EDF image %s is missing from %s (found %s)", c, ch, f, dir, strings.Join(ci.files, ", "))
			}
		}
		out = append(out, ci)
	}
	return out, nil
}

// checkSizes reads every image's size and returns the padded size.
func checkSizes(cycles []cycleInput) (h, w int, pad bool, err error) {
	type sz struct {
		path string
		h, w int
	}
	var all []sz
	for _, ci := range cycles {
		for _, f := range ci.files {
			p := filepath.Join(ci.dir, f)
			info, err := tiffio.ReadInfo(p)
			if err != nil {
				return 0, 0, false, staging.Inputf("%w", err)
			}
			if info.BitsPerSample != 16 || info.SampleFormat == 3 || info.SamplesPerPixel != 1 {
				return 0, 0, false, staging.Inputf("%s: %d-bit, sample format %d, %d samples per pixel: want single-channel uint16", p, info.BitsPerSample, info.SampleFormat, info.SamplesPerPixel)
			}
			if info.Height < MinSidePx || info.Width < MinSidePx {
				return 0, 0, false, staging.Inputf("%s is %d x %d (w x h): registration needs at least %d px per side", p, info.Width, info.Height, MinSidePx)
			}
			all = append(all, sz{p, info.Height, info.Width})
			h, w = max(h, info.Height), max(w, info.Width)
		}
	}
	limH := max(MaxPadPx, int(MaxPadFrac*float64(h)))
	limW := max(MaxPadPx, int(MaxPadFrac*float64(w)))
	for _, s := range all {
		if h-s.h > limH || w-s.w > limW {
			return 0, 0, false, staging.Inputf("%s is %d x %d (w x h), the largest image is %d x %d: more than the %d x %d px padding allowed (max(%d px, %g of the size))",
				s.path, s.w, s.h, w, h, limW, limH, MaxPadPx, MaxPadFrac)
		}
		pad = pad || s.h != h || s.w != w
	}
	return h, w, pad, nil
}

// Pad returns g zero-padded at the bottom and right to h x w (g itself
// when it already has that size).
func Pad(g *raster.Gray16, h, w int) *raster.Gray16 {
	if g.H == h && g.W == w {
		return g
	}
	o := raster.NewGray16(w, h)
	for y := 0; y < min(g.H, h); y++ {
		copy(o.Pix[y*w:y*w+min(g.W, w)], g.Pix[y*g.W:])
	}
	return o
}

func readPadded(path string, h, w int) (*raster.Gray16, error) {
	g, err := tiffio.ReadGray16(path)
	if err != nil {
		return nil, staging.Inputf("%w", err)
	}
	return Pad(g, h, w), nil
}

// planes hands out the stage's h x w planes: from the backend where it
// keeps planes of its own (raster.NewPlane: the GPU's page-locked memory,
// which it moves to and from the card without a staging copy, and which is
// not zeroed first), reused once given back.
type planes struct {
	be   register.Backend
	h, w int
}

// read reads path into a plane, zero-padded at the bottom and right (the
// stage's rule, as readPadded).
func (p planes) read(ctx context.Context, path string) (*raster.Gray16, error) {
	dst, err := raster.NewPlane(ctx, p.be, p.w, p.h)
	if err != nil {
		return nil, err
	}
	g, err := tiffio.ReadGray16Into(path, dst)
	if err != nil {
		p.free(dst)
		return nil, staging.Inputf("%w", err)
	}
	if g != dst { // smaller than the frame: pad
		clear(dst.Pix)
		for y := 0; y < min(g.H, p.h); y++ {
			copy(dst.Pix[y*p.w:y*p.w+min(g.W, p.w)], g.Pix[y*g.W:])
		}
	}
	return dst, nil
}

// free gives a plane back (it must not be used afterwards).
func (p planes) free(g *raster.Gray16) { raster.FreePlane(p.be, g) }

// Run registers every cycle of the project.
func Run(ctx context.Context, o Options) (*Result, error) {
	t0 := time.Now()
	cfg := o.Config
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	workers := max(1, o.Workers)
	p := Params(cfg.Registration)
	p.Workers = workers
	if err := p.Check(); err != nil {
		return nil, staging.Inputf("config %s: registration: %w", cfg.Path, err)
	}
	cycles, err := discover(cfg)
	if err != nil {
		return nil, err
	}
	h, w, pad, err := checkSizes(cycles)
	if err != nil {
		return nil, err
	}
	// The memory plan: a budget below the smallest working set stops
	// here, before any output.
	geom := geometry{H: h, W: w, Pad: pad, Workers: workers, Levels: levelFactors(p, h, w)}
	for _, ci := range cycles {
		geom.Channels = max(geom.Channels, len(ci.files))
	}
	mm := newMemModel(o.Engine, geom, membudget.RSS(), o.MemBudget, o.MemBudgetSource)
	plan, err := mm.choose()
	if err != nil {
		return nil, err
	}
	if o.plan != (memPlan{}) {
		plan = o.plan
	}
	defer membudget.SetGoLimit(mm.goLimit())()
	lg.Info("memory plan", "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"planes_read", plan.In, "planes_written", plan.Out, "ome_tiff_beside", plan.Beside, "planes_in_memory", plan.Planes(),
		"planned", membudget.Format(mm.need(plan)), "fixed", membudget.Format(mm.e.Fixed), "go_limit", membudget.Format(mm.goLimit()),
		"plane", fmt.Sprintf("%dx%d px, %s", w, h, membudget.Format(mm.plane)), "padding", pad)

	final := OutDir(cfg.ProjectDir)
	d, err := staging.NewContext(ctx, final)
	if err != nil {
		return nil, err
	}
	defer d.Abort()
	res := &Result{OutDir: final, Reference: cfg.Registration.ReferenceCycle, H: h, W: w}
	method := "rigid+non-rigid"
	if p.RigidOnly {
		method = "rigid"
	}
	lg.Info("registration", "cycles", len(cycles), "reference", res.Reference, "size", fmt.Sprintf("%dx%d", w, h),
		"backend", o.Engine.Name(), "method", method, "workers", workers)

	// The OME-TIFF is written beside the registration when the plan allows
	// (each channel once its registered image is), else after it.
	files := map[int][]string{}
	for _, ci := range cycles {
		files[ci.cycle] = ci.files
	}
	coder := omeCoder(o.Engine, workers) // the GPU codes the OME-TIFF's tiles on few cpus
	var written *fileSignals
	var omeWait func() error // the OME-TIFF writer beside: its result, once it has returned
	if plan.Beside && len(cycles) > 1 {
		written = newFileSignals()
		octx, ocancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- writeOME(octx, cfg, d.Path, files, planes{o.Engine, h, w}, workers, coder, lg, written.wait(octx))
		}()
		var once sync.Once
		var omeErr error
		omeWait = func() error {
			once.Do(func() { omeErr = <-done })
			return omeErr
		}
		defer func() {
			ocancel()
			omeWait() // the writer has stopped before the staging directory may go
		}()
	}
	if len(cycles) == 1 {
		method = "copy_single_cycle"
		ci := cycles[0]
		for _, f := range ci.files {
			if err := copyFile(filepath.Join(ci.dir, f), filepath.Join(d.Path, layout.CycleName(ci.cycle), f)); err != nil {
				return nil, err
			}
		}
		res.Cycles = append(res.Cycles, CycleResult{Cycle: ci.cycle, Files: ci.files})
		lg.Info("single cycle: EDF images copied", "cycle", ci.cycle)
	} else {
		if err := registerAll(ctx, o, p, plan, cycles, h, w, d.Path, res, written); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, c := range res.Cycles {
		names = append(names, strconv.Itoa(c.Cycle))
	}
	if omeWait != nil {
		err = omeWait()
	} else {
		err = writeOME(ctx, cfg, d.Path, files, planes{o.Engine, h, w}, workers, coder, lg, nil)
	}
	if err != nil {
		return nil, err
	}
	res.Seconds = time.Since(t0).Seconds()
	if err := staging.WriteSentinel(layout.Sentinel(d.Path), [][2]string{
		{"stage", "registration"}, {"cycles", strings.Join(names, ",")}, {"reference_cycle", strconv.Itoa(res.Reference)},
		{"method", method}, {"device", deviceName(o.Engine)}, {"backend", o.Engine.Name()}, {"size", fmt.Sprintf("%dx%d", w, h)},
		{"seconds", fmt.Sprintf("%.1f", res.Seconds)},
	}); err != nil {
		return nil, err
	}
	if err := d.Commit(); err != nil {
		return nil, err
	}
	lg.Info("registration done", "out", final, "seconds", fmt.Sprintf("%.1f", res.Seconds))
	return res, nil
}

// levelFactors are the distinct level factors of registration, coarse
// first.
func levelFactors(p register.Params, h, w int) []int {
	kc, kr, kn := p.Levels(h, w)
	ks := []int{kc}
	for _, k := range []int{kr, kn} {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// pipeline holds the plan's plane slots: in for planes read and not yet
// warped, out for warped planes being produced or written, and the
// write-behind's goroutines.
type pipeline struct {
	in, out chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	held    int          // planes in slots now
	most    int          // the most at once
	written *fileSignals // registered images written, for the OME-TIFF beside (nil: none)
	planes  planes
}

// write writes a registered image, gives its plane back and signals it
// written.
func (pl *pipeline) write(path string, g *raster.Gray16) error {
	err := writeGray16(path, g)
	pl.planes.free(g)
	if err != nil {
		return err
	}
	if pl.written != nil {
		pl.written.done(path)
	}
	return nil
}

// fileSignals says which files are written: one channel per path, closed
// once it is.
type fileSignals struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func newFileSignals() *fileSignals { return &fileSignals{m: map[string]chan struct{}{}} }

func (f *fileSignals) ch(path string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[path]
	if !ok {
		c = make(chan struct{})
		f.m[path] = c
	}
	return c
}

// done marks path written (once).
func (f *fileSignals) done(path string) { close(f.ch(path)) }

// wait returns a function that waits until its path is written or ctx is
// done (its error).
func (f *fileSignals) wait(ctx context.Context) func(path string) error {
	return func(path string) error {
		select {
		case <-f.ch(path):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func newPipeline(p memPlan) *pipeline {
	return &pipeline{in: make(chan struct{}, p.In), out: make(chan struct{}, p.Out)}
}

// take takes a slot of sem (pl.in or pl.out), waiting for one.
func (pl *pipeline) take(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	pl.mu.Lock()
	pl.held++
	pl.most = max(pl.most, pl.held)
	pl.mu.Unlock()
	return nil
}

// give gives a slot of sem back.
func (pl *pipeline) give(sem chan struct{}) {
	pl.mu.Lock()
	pl.held--
	pl.mu.Unlock()
	<-sem
}

// background runs fn on a goroutine holding one out slot (taken by the
// caller), which it gives back when fn returns; the first error is kept
// for wait.
func (pl *pipeline) background(fn func() error) {
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		err := fn()
		pl.give(pl.out)
		if err != nil {
			pl.mu.Lock()
			if pl.err == nil {
				pl.err = err
			}
			pl.mu.Unlock()
		}
	}()
}

// failed is the first background error so far.
func (pl *pipeline) failed() error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.err
}

// wait waits for the background writes and returns their first error.
func (pl *pipeline) wait() error {
	pl.wg.Wait()
	return pl.failed()
}

// readResult is one channel read ahead.
type readResult struct {
	g   *raster.Gray16
	err error
}

// readAhead reads files (but skip) of ci in order on one goroutine, each
// into an in slot, and sends them on the returned channel (buffered: the
// reader never blocks on it). It stops at the first error or when ctx is
// done; done is closed when it has returned.
func (pl *pipeline) readAhead(ctx context.Context, ci cycleInput, skip string, h, w int) (<-chan readResult, <-chan struct{}) {
	ch := make(chan readResult, len(ci.files))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, f := range ci.files {
			if f == skip {
				continue
			}
			if err := pl.take(ctx, pl.in); err != nil {
				ch <- readResult{err: err}
				return
			}
			g, err := pl.planes.read(ctx, filepath.Join(ci.dir, f))
			if err != nil {
				pl.give(pl.in)
			}
			ch <- readResult{g, err}
			if err != nil {
				return
			}
		}
	}()
	return ch, done
}

func registerAll(ctx context.Context, o Options, p register.Params, plan memPlan, cycles []cycleInput, h, w int, out string, res *Result, written *fileSignals) (err error) {
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(ctx)
	pl := newPipeline(plan)
	pl.written = written
	pl.planes = planes{be: o.Engine, h: h, w: w}
	// Background writes end before the staging directory may be removed.
	defer func() {
		cancel()
		if werr := pl.wait(); err == nil {
			err = werr
		}
		res.PlanesInMemory = pl.most
	}()
	var refIn cycleInput
	for _, ci := range cycles {
		if ci.cycle == res.Reference {
			refIn = ci
		}
	}
	t0 := time.Now()
	refImg, err := pl.planes.read(ctx, filepath.Join(refIn.dir, refIn.dapi))
	if err != nil {
		return err
	}
	ref, err := register.NewReference(ctx, o.Engine, refImg, p)
	if err != nil {
		return err
	}
	_, _, kn := p.Levels(h, w)
	refOverlay := overlayLevel(refImg, w, h)
	pl.planes.free(refImg)
	refImg = nil
	// The reference cycle: its padded images, unchanged, each read and
	// written in an out slot.
	for _, f := range refIn.files {
		if err := pl.take(ctx, pl.out); err != nil {
			return err
		}
		if err := pl.failed(); err != nil {
			pl.give(pl.out)
			return err
		}
		src, dst := filepath.Join(refIn.dir, f), filepath.Join(out, layout.CycleName(refIn.cycle), f)
		pl.background(func() error {
			g, err := pl.planes.read(ctx, src)
			if err != nil {
				return err
			}
			return pl.write(dst, g)
		})
	}
	res.Cycles = append(res.Cycles, CycleResult{Cycle: refIn.cycle, Files: refIn.files, Seconds: time.Since(t0).Seconds()})
	lg.Info("reference cycle", "cycle", refIn.cycle, "dapi", refIn.dapi, "levels_nonrigid", kn, "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))

	for _, ci := range cycles {
		if ci.cycle == res.Reference {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := registerCycle(ctx, o, p, pl, ci, h, w, out, refOverlay, ref, res, lg); err != nil {
			return err
		}
	}
	sort.Slice(res.Cycles, func(a, b int) bool { return res.Cycles[a].Cycle < res.Cycles[b].Cycle })
	return nil
}

// registerCycle registers one cycle's DAPI, warps every channel (the DAPI
// first, then the others as they are read ahead) into the write-behind,
// and writes the cycle's transform, metrics and overlay.
func registerCycle(ctx context.Context, o Options, p register.Params, pl *pipeline, ci cycleInput, h, w int, out string,
	refOverlay *raster.Float32, ref *register.Reference, res *Result, lg *slog.Logger) error {
	t1 := time.Now()
	if err := pl.take(ctx, pl.in); err != nil {
		return err
	}
	dapi, err := pl.planes.read(ctx, filepath.Join(ci.dir, ci.dapi))
	if err != nil {
		pl.give(pl.in)
		return err
	}
	// The other channels are read ahead while the DAPI is registered.
	cctx, cancel := context.WithCancel(ctx)
	reads, readDone := pl.readAhead(cctx, ci, ci.dapi, h, w)
	defer func() {
		cancel()
		<-readDone
	}()
	r, err := register.Register(ctx, o.Engine, ref, dapi, p)
	if err != nil {
		return fmt.Errorf("cycle %d: %w", ci.cycle, err)
	}
	m := r.Metrics
	lg.Info("registered", "cycle", ci.cycle, "rotation_deg", fmt.Sprintf("%.4f", m.RotationDeg),
		"translation", fmt.Sprintf("(%.2f, %.2f)", m.TranslationY, m.TranslationX),
		"ncc", fmt.Sprintf("%.4f -> %.4f -> %.4f", m.NCCBefore, m.NCCRigid, m.NCCNonRigid),
		"field_max_px", fmt.Sprintf("%.2f", m.DispMaxPx), "jacobian_min", fmt.Sprintf("%.3f", m.JacobianMin), "non_rigid_dropped", m.NonRigidDropped)
	if m.NCCFinal < m.NCCBefore-NCCTolerance {
		return staging.Inputf("cycle %d: registration makes DAPI (%s) agree worse with the reference cycle %d: NCC %.4f before, %.4f after rigid, %.4f after non-rigid (rotation %.3f°, translation (%.1f, %.1f) px); nothing written",
			ci.cycle, filepath.Join(ci.dir, ci.dapi), res.Reference, m.NCCBefore, m.NCCRigid, m.NCCNonRigid, m.RotationDeg, m.TranslationY, m.TranslationX)
	}
	name := layout.CycleName(ci.cycle)
	// warp warps one read plane (holding an in slot) into an out slot,
	// calls look (if not nil) with the result and hands it to the
	// write-behind, which gives its plane back; the read plane and the in
	// slot are given back.
	warp := func(g *raster.Gray16, file string, look func(*raster.Gray16)) error {
		if err := pl.take(ctx, pl.out); err != nil {
			return err
		}
		if err := pl.failed(); err != nil {
			pl.give(pl.out)
			return err
		}
		warped, err := o.Engine.Warp(ctx, []*raster.Gray16{g}, &r.Mapping, h, w)
		pl.planes.free(g)
		pl.give(pl.in)
		if err != nil {
			pl.give(pl.out)
			return fmt.Errorf("cycle %d: warp %s: %w", ci.cycle, file, err)
		}
		if look != nil {
			look(warped[0])
		}
		path := filepath.Join(out, name, file)
		pl.background(func() error { return pl.write(path, warped[0]) })
		return nil
	}
	var cycOverlay *raster.Float32
	if err := warp(dapi, ci.dapi, func(g *raster.Gray16) { cycOverlay = overlayLevel(g, w, h) }); err != nil {
		return err
	}
	dapi = nil
	for _, f := range ci.files {
		if f == ci.dapi {
			continue
		}
		rr := <-reads
		if rr.err != nil {
			return rr.err
		}
		if err := warp(rr.g, f, nil); err != nil {
			return err
		}
	}
	if err := WriteTransform(filepath.Join(out, layout.RegistrationDataDir), name, r, h, w); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(out, layout.RegisteredQCDir, layout.MetricsName(ci.cycle)), cycleMetrics{Cycle: ci.cycle, Reference: res.Reference, DAPI: ci.dapi, Metrics: m}); err != nil {
		return err
	}
	if err := writeOverlay(filepath.Join(out, layout.RegisteredQCDir, name+"_overlay.png"), refOverlay, cycOverlay); err != nil {
		return err
	}
	mm := m
	res.Cycles = append(res.Cycles, CycleResult{Cycle: ci.cycle, Files: ci.files, Metrics: &mm, Seconds: time.Since(t1).Seconds()})
	lg.Info("cycle warped", "cycle", ci.cycle, "channels", len(ci.files), "seconds", fmt.Sprintf("%.1f", time.Since(t1).Seconds()))
	return nil
}

type cycleMetrics struct {
	Cycle     int              `json:"cycle"`
	Reference int              `json:"reference_cycle"`
	DAPI      string           `json:"dapi"`
	Metrics   register.Metrics `json:"metrics"`
}

func writeGray16(path string, g *raster.Gray16) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	return tiffio.WriteGray16(path, g)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, append(b, '\n'), 0o666)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o777); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return staging.Inputf("%w", err)
	}
	defer in.Close()
	return atomicfile.Write(dst, 0o666, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// overlayMax is the long side of the overlay pictures, px.
const overlayMax = 1024

// overlayLevel box-downsamples g to at most overlayMax px.
func overlayLevel(g *raster.Gray16, w, h int) *raster.Float32 {
	k := max(1, (max(w, h)+overlayMax-1)/overlayMax)
	lv, err := register.CPU{}.Downsample(context.Background(), g, []int{k})
	if err != nil {
		return raster.NewFloat32(1, 1)
	}
	return lv[0]
}

// writeOverlay writes an RGB PNG: the reference in magenta (red + blue),
// the registered cycle in green, each scaled to its 99.5th percentile;
// aligned tissue appears white.
func writeOverlay(path string, ref, cyc *raster.Float32) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	w, h := min(ref.W, cyc.W), min(ref.H, cyc.H)
	sr, sc := scaleOf(ref), scaleOf(cyc)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := to8(float64(ref.Pix[y*ref.W+x]) * sr)
			b := to8(float64(cyc.Pix[y*cyc.W+x]) * sc)
			img.SetRGBA(x, y, color.RGBA{R: a, G: b, B: a, A: 255})
		}
	}
	return atomicfile.Write(path, 0o666, func(wr io.Writer) error { return png.Encode(wr, img) })
}

func scaleOf(f *raster.Float32) float64 {
	v := make([]float64, 0, len(f.Pix)/7+1)
	for i := 0; i < len(f.Pix); i += 7 {
		v = append(v, float64(f.Pix[i]))
	}
	sort.Float64s(v)
	hi := v[int(0.995*float64(len(v)-1))]
	if !(hi > 0) {
		return 0
	}
	return 255 / hi
}

func to8(v float64) uint8 {
	return uint8(math.Max(0, math.Min(255, math.Round(v))))
}
