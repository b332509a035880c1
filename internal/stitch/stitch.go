// Package stitch runs the stitch stage of one cycle: for every channel x
// z-plane a fresh BaSiC fit (never cached across planes or channels), the
// correction of every tile, the tile alignment (once per cycle, on the first
// channel at the middle z-plane) and the sigmoid blending, written in the
// original's layout:
//
//	data/processed/stitched/cycNN/CH{c}/{z:02d}.tif            uint16 mosaic
//	data/processed/stitched/cycNN/CH{c}/basic/{z:02d}_flatfield.tif  float32, mean 1
//	data/processed/stitched/cycNN/CH{c}/basic/{z:02d}_darkfield.tif  float32, counts
//	data/processed/stitched/cycNN/tile_positions.csv            tile,row,col,y_pos,x_pos (px)
//	data/processed/stitched/cycNN/.snakemake_complete           sentinel (key=value)
//
// Everything is written into a staging directory beside cycNN and renamed into
// place when the whole cycle succeeded, so a failure leaves no partial output.
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
// Template pieces here: Engine (engine.go; CPUEngine the reference),
// memory.go (cpuEngineMemory, engineMemory, memModel.choose), Run in steps
// (newCycleRun, alignReference, planPipeline, pipeline, batchPlanes).
package stitch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// Options configure one run of the stage.
type Options struct {
	Config  *config.Config
	Cycle   int
	Engine  Engine
	Workers int // goroutines for I/O and CPU work
	// Batch is how many planes are read and fitted together (GPU engines
	// batch their fits); 0 means Workers. A memory budget may lower it.
	Batch int
	// MemBudget is the host memory (resident set, bytes) the stage may use
	// (cliutil.MemBudget: --mem-budget, SLURM, cgroup, physical memory):
	// the read-ahead, the batch and the write-behind are sized from it (see
	// memory.go), and a budget below the smallest working set is a
	// *membudget.NeedError before any work (no output). 0: no budget (the
	// batch as asked, one batch read ahead, one write slot per worker).
	MemBudget int64
	// MemBudgetSource says where MemBudget came from, for logs and errors.
	MemBudgetSource string
	Logger          *slog.Logger
	// Sink, when set, receives every blended plane before it is written
	// (the fused cycle, internal/cyclestage, hands them to the decon
	// stage); nil: none.
	Sink Sink
	// NoPlanes leaves the mosaic planes unwritten (the fused cycle with
	// keep_intermediates: false); the profiles, tile_positions.csv and the
	// sentinel are written as always.
	NoPlanes bool
}

// Sink receives a cycle's blended planes in the stage's order: the
// config's channels in order, z ascending within each channel. Begin is
// called once, after the alignment, with the stage's staging directory
// (files the sink writes there are committed with the stage), the mosaic
// size (H x W px) and the z-plane numbers; Plane with each plane (ch the
// channel number, z the z-plane number, 1-based), which it must not change
// (the writer may still be encoding it; the stage never reuses it). An
// error from either stops the stage. End is called after the last plane,
// before the sentinel and the commit: the sink finishes what it writes into
// the staging directory. Reserve is the host memory (bytes) the sink holds
// at once for mosaics of h x w px, n planes per channel: the stage plans
// its own within MemBudget less that.
type Sink interface {
	Reserve(h, w, n int) int64
	Begin(ctx context.Context, dir string, h, w int, zs []int) error
	Plane(ctx context.Context, ch, z int, img *raster.Gray16) error
	End(ctx context.Context) error
}

// DeviceSink is a Sink that takes blended planes on the engine's device
// (the fused cycle on the GPU: straight into the decon stage's device
// stack), used when the engine is a TileEngine. PlaneDevice is Plane for a
// mosaic on the device, which it only reads and the stage frees after it;
// taken false: the sink did nothing with it (its decon is not on the
// device) and the stage hands the plane to Plane from the host instead.
// Either way each plane reaches the sink once.
type DeviceSink interface {
	Sink
	PlaneDevice(ctx context.Context, ch, z int, p raster.DeviceGray16) (taken bool, err error)
}

// Timings are the wall-clock seconds spent per step (steps overlap: reading
// runs ahead of compute and writing behind it).
type Timings struct {
	Read, Fit, Align, CorrectBlend, Write, Total float64
}

// Result describes a finished cycle.
type Result struct {
	OutDir    string
	Positions []raster.Point
	Planes    int
	Timings   Timings
	// PlanesInMemory is the most planes of raw tiles held at once (read,
	// not yet blended), at most the memory plan's.
	PlanesInMemory int
}

type plane struct{ ch, z int }

// Params derived from the config.
func basicParams(c *config.Config) basic.Params {
	p := basic.Production()
	p.MaxIterations = c.BasicMaxIterations
	p.OptimizationTol = c.BasicOptimizationTolerance
	p.MaxReweightIterations = c.BasicMaxReweight
	p.ReweightTol = c.BasicReweightTolerance
	p.Darkfield = c.BasicDarkfield
	return p
}

// OutDir is the stage's output directory of a cycle (layout.Stitched).
func OutDir(project string, cycle int) string { return layout.Stitched(project, cycle) }

// Run stitches one cycle: discovery and the memory check (newCycleRun),
// the reference plane's fit and the alignment (alignReference), the plan
// with the measured mosaic (planPipeline), every plane read ahead, fitted,
// blended and written behind (pipeline), then the sentinel and the commit.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	r, err := newCycleRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer membudget.SetGoLimit(r.mm.goLimit())()

	final := OutDir(r.cfg.ProjectDir, o.Cycle)
	stage, err := staging.NewContext(ctx, final)
	if err != nil {
		return nil, err
	}
	// Background writes must finish before a failed cycle's staging
	// directory is removed, or a late write would recreate it.
	defer func() {
		if r.w != nil {
			r.w.wait()
		}
		stage.Abort()
	}()
	// The first planes are read while the reference plane is fitted and
	// the tiles aligned, within what the alignment leaves of the plan.
	rd := r.startReader(ctx)
	defer rd.stop()
	if err := r.alignReference(ctx, stage.Path); err != nil {
		return nil, err
	}
	mp, err := r.planPipeline()
	if err != nil {
		return nil, err
	}
	rd.slots.setLimit(mp.Planes)
	r.w = newWriter(mp.Writes)
	if o.Sink != nil {
		if err := o.Sink.Begin(ctx, stage.Path, r.geom.MosaicH, r.geom.MosaicW, r.cyc.Z); err != nil {
			return nil, err
		}
	}
	inMem, err := r.pipeline(ctx, mp, rd, stage.Path, start)
	if err != nil {
		return nil, err
	}
	if o.Sink != nil {
		if err := o.Sink.End(ctx); err != nil {
			return nil, err
		}
	}
	r.tm.Write = r.w.seconds()
	r.tm.Total = since(start)
	if err := r.writeSentinel(layout.Sentinel(stage.Path)); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	tm := r.tm
	r.lg.Info("cycle stitched", "cycle", o.Cycle, "out", final, "planes", r.nPlanes,
		"read_s", f2(tm.Read), "fit_s", f2(tm.Fit), "align_s", f2(tm.Align), "correct_blend_s", f2(tm.CorrectBlend), "write_s", f2(tm.Write), "total_s", f2(tm.Total))
	return &Result{OutDir: final, Positions: r.pos, Planes: r.nPlanes, Timings: tm, PlanesInMemory: inMem}, nil
}

// cycleRun is one Run's state, step to step.
type cycleRun struct {
	o        Options
	cfg      *config.Config
	lg       *slog.Logger
	workers  int
	batch    int // planes fitted together, as asked (the plan may lower it)
	cyc      *dataset.Cycle
	nPlanes  int
	geom     geometry
	resident int64 // resident set with the engine open, bytes
	mm       memModel
	nominal  memPlan // the plan at the nominal mosaic size (before the alignment)
	bp       basic.Params

	ref     plane           // the reference plane (fitted first, aligned on)
	refProf []basic.Profile // its profile
	pos     []raster.Point  // tile positions, px
	tm      Timings
	refits  int // profiles replaced by a refit (refitUniform)
	// fallbacks counts planes whose flatfield came back uniform.
	fallbacks int
	// blank holds the planes whose tiles are all zero (not fitted: fit).
	blank map[plane]bool
	w     *writer

	// mode is stitching.profile_mode; with basic.ModeEnvelopeDarkfield
	// darks holds each channel's darkfield (basic.ChannelDarkfield, from
	// every z-plane of the channel; made at its first fit).
	mode  basic.ProfileMode
	darks map[int]basic.Darkfield
}

// newCycleRun discovers the cycle and checks the memory plan from the
// nominal mosaic size: a budget below the smallest working set stops here,
// before any output.
func newCycleRun(ctx context.Context, o Options) (*cycleRun, error) {
	r := &cycleRun{o: o, cfg: o.Config, lg: o.Logger, workers: max(1, o.Workers), batch: o.Batch}
	if r.lg == nil {
		r.lg = slog.Default()
	}
	if r.batch <= 0 {
		r.batch = r.workers
	}
	cfg := r.cfg
	cyc, err := dataset.Discover(ctx, cfg.ProjectDir, o.Cycle, dataset.Options{
		Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: cfg.Channels, NZPlanes: cfg.NZPlanes, Workers: r.workers})
	if err != nil {
		return nil, err
	}
	r.cyc = cyc
	r.lg.Info("cycle found", "cycle", o.Cycle, "dir", cyc.Dir, "tiles", cyc.Tiles(), "grid", fmt.Sprintf("%dx%d", cyc.Rows, cyc.Cols),
		"tile_px", fmt.Sprintf("%dx%d", cyc.W, cyc.H), "z", len(cyc.Z), "channels", cyc.Channels, "engine", o.Engine.Name())

	r.nPlanes = len(cyc.Channels) * len(cyc.Z)
	r.bp = basicParams(cfg)
	if r.mode, err = basic.ParseProfileMode(cfg.Stitching.ProfileMode); err != nil {
		return nil, staging.Inputf("config %s: key stitching.profile_mode: %v", cfg.Path, err)
	}
	r.darks = map[int]basic.Darkfield{}
	r.geom = geometry{Tiles: cyc.Tiles(), H: cyc.H, W: cyc.W, Workers: r.workers, WorkingDim: r.bp.WorkingSize}
	r.geom.MosaicH, r.geom.MosaicW = nominalMosaic(cyc.Rows, cyc.H, cfg), nominalMosaic(cyc.Cols, cyc.W, cfg)
	r.resident = membudget.RSS() // the engine is open: its context and libraries are in
	r.mm = r.memModel()
	if r.nominal, err = r.mm.choose(min(r.batch, r.nPlanes)); err != nil {
		return nil, err
	}
	// Reference plane: first channel (DAPI) at the middle z-plane, 1-based
	// n//2 as in the original (20 planes -> Z10).
	r.ref = plane{cyc.Channels[0], cyc.Z[max(1, len(cyc.Z)/2)-1]}
	return r, nil
}

// budget is the memory budget of the stage's own plan: MemBudget less what
// the sink holds (Sink.Reserve, at the current mosaic size), at least one
// byte when there is a budget (0: none).
func (r *cycleRun) budget() int64 {
	b := r.o.MemBudget
	if b <= 0 || r.o.Sink == nil {
		return b
	}
	return max(1, b-r.o.Sink.Reserve(r.geom.MosaicH, r.geom.MosaicW, len(r.cyc.Z)))
}

// memModel is the memory model at the current geometry: with the envelope
// darkfield a fit also holds a darkfield-subtracted copy of each plane's
// raw tiles (basic.FitWithDarkfield).
func (r *cycleRun) memModel() memModel {
	mm := newMemModel(r.o.Engine, r.geom, r.resident, r.budget(), r.o.MemBudgetSource)
	if r.o.Sink != nil && r.o.MemBudget > 0 {
		mm.reserve = r.o.Sink.Reserve(r.geom.MosaicH, r.geom.MosaicW, len(r.cyc.Z))
		mm.jobBudget = r.o.MemBudget
	}
	if r.mode == basic.ModeEnvelopeDarkfield {
		mm.e.Fit += mm.raw
	}
	return mm
}

// fit fits planes (ids name them) and refits those the darkest-image rule
// did not converge on (refitUniform); with the envelope darkfield
// (stitching.profile_mode) each plane's flatfield is fitted with its
// channel's darkfield known instead (no refit: that rule is not used).
// dev, when not nil, holds the planes' tiles on a TileEngine's device,
// fitted from there (the same profiles).
//
// A plane whose tiles are all zero (nothing reached the camera: a shutter
// that stayed closed, a channel or z-plane not acquired) is not fitted:
// BaSiC is undefined on it (its images have norm 0; the original divides
// by zero). It gets the identity profile (flatfield 1, darkfield 0), so its
// mosaic is the zeros it holds, and a warning; the EDF stage's quality gate
// then leaves it out (zeros above quality_gate.max_zero_pct), as it does
// any mostly-empty slice. Before, one such plane stopped the cycle (exit 1).
func (r *cycleRun) fit(ctx context.Context, planes [][]*raster.Gray16, dev []basic.DeviceTiles, ids []plane) ([]basic.Profile, error) {
	var fit [][]*raster.Gray16
	var fitDev []basic.DeviceTiles
	var fitIDs []plane
	var at, blank []int // indices in planes of the planes fitted and of the blank ones
	for i, tiles := range planes {
		if blankTiles(tiles) {
			blank = append(blank, i)
			continue
		}
		fit, fitIDs, at = append(fit, tiles), append(fitIDs, ids[i]), append(at, i)
		if dev != nil {
			fitDev = append(fitDev, dev[i])
		}
	}
	profs := make([]basic.Profile, len(planes))
	if len(at) > 0 {
		fitted, err := r.fitPlanes(ctx, fit, fitDev, fitIDs)
		if err != nil {
			return nil, err
		}
		for k, i := range at {
			profs[i] = fitted[k]
		}
	}
	for _, i := range blank {
		if r.blank == nil {
			r.blank = map[plane]bool{}
		}
		profs[i] = identityProfile(r.cyc.W, r.cyc.H, r.bp.WorkingSize)
		r.blank[ids[i]] = true
		r.lg.Warn("every tile of the plane is zero: not fitted, passed through uncorrected (the EDF quality gate leaves such slices out)",
			"cycle", r.o.Cycle, "channel", ids[i].ch, "z", ids[i].z, "tiles", len(planes[i]))
	}
	return profs, nil
}

// blankTiles reports whether every pixel of every tile is zero. It stops at
// the first pixel that is not, which in a real plane is among the first.
func blankTiles(tiles []*raster.Gray16) bool {
	for _, t := range tiles {
		if !raster.AllZero16(t.Pix) {
			return false
		}
	}
	return true
}

// identityProfile is the profile that changes nothing: flatfield 1 and
// darkfield 0 over w x h px and over the working size ps x ps.
func identityProfile(w, h, ps int) basic.Profile {
	p := basic.Profile{W: w, H: h, Flatfield: make([]float32, w*h), Darkfield: make([]float32, w*h),
		WorkFlat: make([]float32, ps*ps), WorkDark: make([]float32, ps*ps)}
	for i := range p.Flatfield {
		p.Flatfield[i] = 1
	}
	for i := range p.WorkFlat {
		p.WorkFlat[i] = 1
	}
	return p
}

// fitPlanes is fit for planes that are not blank.
func (r *cycleRun) fitPlanes(ctx context.Context, planes [][]*raster.Gray16, dev []basic.DeviceTiles, ids []plane) ([]basic.Profile, error) {
	if r.mode == basic.ModeEnvelopeDarkfield {
		darks := make([]basic.Darkfield, len(ids))
		for i, id := range ids {
			d, err := r.darkfield(ctx, id.ch)
			if err != nil {
				return nil, err
			}
			darks[i] = d
		}
		return basic.FitWithDarkfield(ctx, r.o.Engine, planes, darks, r.bp)
	}
	var profs []basic.Profile
	var err error
	if te, ok := r.o.Engine.(TileEngine); ok && dev != nil {
		profs, err = te.FitTiles(ctx, dev, r.bp)
	} else {
		profs, err = r.o.Engine.Fit(ctx, planes, r.bp)
	}
	if err != nil {
		return nil, err
	}
	n, err := refitUniform(ctx, r.o.Engine, planes, ids, profs, r.bp, r.lg)
	r.refits += n
	return profs, err
}

// darkfield is channel ch's envelope darkfield (basic.ChannelDarkfield
// over every z-plane of the channel, its raw tiles read once more), made
// at the channel's first fit.
func (r *cycleRun) darkfield(ctx context.Context, ch int) (basic.Darkfield, error) {
	if d, ok := r.darks[ch]; ok {
		return d, nil
	}
	t0 := time.Now()
	cyc := r.cyc
	d, err := basic.ChannelDarkfield(ctx, len(cyc.Z), cyc.H, cyc.W, r.bp, r.workers, func(ctx context.Context, i int) ([]*raster.Gray16, error) {
		return cyc.ReadPlane(ctx, cyc.Z[i], ch, r.workers)
	})
	if err != nil {
		return d, fmt.Errorf("cycle %d CH%d: envelope darkfield: %w", r.o.Cycle, ch, err)
	}
	var sum float64
	for _, v := range d.Full {
		sum += float64(v)
	}
	r.lg.Info("envelope darkfield", "cycle", r.o.Cycle, "channel", ch, "planes", len(cyc.Z),
		"mean_counts", fmt.Sprintf("%.1f", sum/float64(max(1, len(d.Full)))*65535), "seconds", f2(since(t0)))
	r.darks[ch] = d
	return d, nil
}

// gc collects garbage now under a budget: a collection of this mostly
// pointer-free heap takes milliseconds, and a plane's worth of allocations
// arriving during a late collection would overshoot the Go limit.
func (r *cycleRun) gc() {
	if r.o.MemBudget > 0 {
		runtime.GC()
	}
}

// alignReference reads and fits the reference plane, aligns the cycle's
// tiles on it and writes tile_positions.csv into dir.
func (r *cycleRun) alignReference(ctx context.Context, dir string) error {
	o, ref := r.o, r.ref
	t0 := time.Now()
	refTiles, err := r.cyc.ReadPlane(ctx, ref.z, ref.ch, r.workers)
	if err != nil {
		return err
	}
	if refTiles, err = r.unblankReference(ctx, refTiles); err != nil {
		return err
	}
	ref = r.ref
	r.tm.Read += since(t0)
	t0 = time.Now()
	r.refProf, err = r.fit(ctx, [][]*raster.Gray16{refTiles}, nil, []plane{ref})
	if err != nil {
		return fmt.Errorf("cycle %d CH%d Z%d: basic fit: %w", o.Cycle, ref.ch, ref.z, err)
	}
	r.tm.Fit += since(t0)
	r.gc() // the fit's copies, before the alignment's
	t0 = time.Now()
	r.pos, err = alignTiles(ctx, o, r.cyc, refTiles, &r.refProf[0], r.workers)
	if err != nil {
		return err
	}
	r.tm.Align = since(t0)
	r.lg.Info("tiles aligned", "cycle", o.Cycle, "ref_channel", ref.ch, "ref_z", ref.z, "seconds", fmt.Sprintf("%.2f", r.tm.Align))
	if err := writePositions(filepath.Join(dir, "tile_positions.csv"), r.cyc, r.pos); err != nil {
		return err
	}
	// The reference plane is read again in its turn: holding it through
	// the first channel would cost a plane of the budget.
	refTiles = nil
	r.gc() // the alignment's working set, before the pipeline's
	return nil
}

// unblankReference returns the reference plane's tiles, or, when every
// one of them is zero (nothing to align on: the positions would stay
// nominal), those of the nearest z-plane of the reference channel that is
// not blank (the lower one first at equal distance), which becomes the
// reference (r.ref), with a warning. A channel blank in every plane keeps
// its reference.
func (r *cycleRun) unblankReference(ctx context.Context, tiles []*raster.Gray16) ([]*raster.Gray16, error) {
	ref := r.ref
	if !blankTiles(tiles) {
		return tiles, nil
	}
	zs := slices.Clone(r.cyc.Z)
	slices.SortStableFunc(zs, func(a, b int) int { return cmp.Compare(abs(a-ref.z), abs(b-ref.z)) })
	for _, z := range zs[1:] {
		t, err := r.cyc.ReadPlane(ctx, z, ref.ch, r.workers)
		if err != nil {
			return nil, err
		}
		if !blankTiles(t) {
			r.lg.Warn("every tile of the reference plane is zero: the tiles are aligned on the nearest plane of the channel that is not",
				"cycle", r.o.Cycle, "channel", ref.ch, "reference_z", ref.z, "aligned_on_z", z)
			r.ref = plane{ref.ch, z}
			return t, nil
		}
	}
	return tiles, nil
}

// abs is |v|.
func abs(v int) int { return max(v, -v) }

// planPipeline chooses the plan again with the measured mosaic size and
// logs it.
func (r *cycleRun) planPipeline() (memPlan, error) {
	o, geom := r.o, &r.geom
	geom.MosaicH, geom.MosaicW = mosaicSize(r.pos, r.cyc.H, r.cyc.W)
	r.mm = r.memModel()
	mm := r.mm
	mp, err := mm.choose(min(r.batch, r.nPlanes))
	if err != nil {
		return mp, err
	}
	r.lg.Info("memory plan", "cycle", o.Cycle, "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"batch", mp.Batch, "planes_in_memory", mp.Planes, "write_slots", mp.Writes,
		"planned", membudget.Format(mm.need(mp)), "fixed", membudget.Format(mm.e.Fixed), "go_limit", membudget.Format(mm.goLimit()),
		"raw_plane", membudget.Format(mm.raw), "mosaic", fmt.Sprintf("%dx%d px, %s", geom.MosaicW, geom.MosaicH, membudget.Format(mm.mosaic)))
	return mp, nil
}

// planeData is one plane read ahead: its raw tiles, or the error reading
// them.
type planeData struct {
	pl    plane
	tiles []*raster.Gray16
	dev   basic.DeviceTiles // the tiles on a TileEngine's device (uploader); nil otherwise
	err   error
}

// reader reads planes ahead of compute into at most a plan's plane slots:
// a slot is taken before a plane is read and given back (done) as soon as
// the plane is blended, so raw tiles never exceed the plan.
type reader struct {
	ready    chan planeData
	slots    *slots
	cancel   context.CancelFunc
	finished chan struct{}
	secs     float64      // reading time; read after stop
	inMem    atomic.Int64 // planes read and not yet blended
	maxInMem atomic.Int64
}

// startReader starts reading the cycle's planes in the stage's order
// (channels in order, z ascending), each on r.workers goroutines into
// tiles from the engine (raster.NewPlane: on the GPU page-locked memory,
// sent to the card without a staging copy; given back with
// raster.FreePlanes). It starts before the alignment with earlyPlanes
// slots; planPipeline's plan sets the limit (slots.setLimit).
func (r *cycleRun) startReader(ctx context.Context) *reader {
	cyc, engine, workers := r.cyc, r.o.Engine, r.workers
	var planes []plane
	for _, ch := range cyc.Channels {
		for _, z := range cyc.Z {
			planes = append(planes, plane{ch, z})
		}
	}
	rd := &reader{ready: make(chan planeData, len(planes)), slots: newSlots(r.earlyPlanes()), finished: make(chan struct{})}
	readCtx, cancel := context.WithCancel(ctx)
	rd.cancel = cancel
	go func() {
		defer close(rd.finished)
		for _, pl := range planes {
			if rd.slots.acquire(readCtx) != nil {
				return
			}
			if n := rd.inMem.Add(1); n > rd.maxInMem.Load() {
				rd.maxInMem.Store(n) // only this goroutine stores
			}
			t0 := time.Now()
			tiles := make([]*raster.Gray16, cyc.Tiles())
			var err error
			for i := range tiles {
				if tiles[i], err = raster.NewPlane(readCtx, engine, cyc.W, cyc.H); err != nil {
					break
				}
			}
			if err == nil {
				err = cyc.ReadPlaneInto(readCtx, pl.z, pl.ch, workers, tiles)
			}
			if err != nil {
				raster.FreePlanes(engine, tiles)
				tiles = nil
			}
			rd.secs += since(t0)
			rd.ready <- planeData{pl: pl, tiles: tiles, err: err}
			if err != nil {
				return
			}
		}
	}()
	return rd
}

// earlyPlanes is how many planes may be read during the alignment: what
// the plan at the nominal mosaic size (r.nominal) leaves beside the
// alignment's own heap (memModel.alignLive), at most one batch and the
// plan's planes; at least 0. Read errors of these planes surface in their
// turn, after the alignment, as any plane's.
func (r *cycleRun) earlyPlanes() int {
	mm, p := r.mm, r.nominal
	room := int((mm.live(p) - mm.alignLive()) / max(1, mm.raw))
	return max(0, min(room, p.Batch, p.Planes))
}

// slots bounds the planes the reader holds: acquire blocks while held
// reaches the limit, which the plan may change while the reader runs.
type slots struct {
	mu          sync.Mutex
	held, limit int
	wake        chan struct{} // closed and replaced on every change
}

func newSlots(limit int) *slots { return &slots{limit: limit, wake: make(chan struct{})} }

// acquire takes a slot, waiting for one; ctx's error when it ends first.
func (s *slots) acquire(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.held < s.limit {
			s.held++
			s.mu.Unlock()
			return nil
		}
		w := s.wake
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives a slot back.
func (s *slots) release() { s.change(func() { s.held-- }) }

// setLimit sets the most slots held at once (planes already held above
// it stay until they are done).
func (s *slots) setLimit(n int) { s.change(func() { s.limit = n }) }

func (s *slots) change(f func()) {
	s.mu.Lock()
	f()
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// next returns the next plane read, in order.
func (rd *reader) next(ctx context.Context) (planeData, error) { return nextPlane(ctx, rd.ready) }

// nextPlane receives the next plane from ch, with its error; ctx's error
// when ctx ends first.
func nextPlane(ctx context.Context, ch <-chan planeData) (planeData, error) {
	select {
	case d := <-ch:
		return d, d.err
	case <-ctx.Done():
		return planeData{}, ctx.Err()
	}
}

// done gives a blended plane's slot back.
func (rd *reader) done() {
	rd.inMem.Add(-1)
	rd.slots.release()
}

// stop stops the reader and waits for it to end.
func (rd *reader) stop() {
	rd.cancel()
	<-rd.finished
}

// uploader sends each plane the reader hands over to a TileEngine's
// device as soon as it is read (TileEngine.UploadTiles), so that its copy
// runs beside the GPU's work on the planes before it instead of in front
// of its own fit. It holds no plane of its own: the planes on the device
// are those the reader's slots allow (read and not yet blended).
type uploader struct {
	out      chan planeData
	cancel   context.CancelFunc
	finished chan struct{}
}

// startUploader starts uploading the next n planes of rd to te's device.
func (r *cycleRun) startUploader(ctx context.Context, te TileEngine, rd *reader, n int) *uploader {
	ctx, cancel := context.WithCancel(ctx)
	u := &uploader{out: make(chan planeData, n), cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(u.finished)
		for range n {
			d, err := rd.next(ctx)
			if err == nil {
				if d.dev, err = te.UploadTiles(ctx, d.tiles); err != nil {
					err = fmt.Errorf("cycle %d CH%d Z%d: tiles to the device: %w", r.o.Cycle, d.pl.ch, d.pl.z, err)
				}
			}
			if d.err == nil {
				d.err = err
			}
			u.out <- d
			if d.err != nil {
				return
			}
		}
	}()
	return u
}

// next returns the next plane uploaded, in order.
func (u *uploader) next(ctx context.Context) (planeData, error) { return nextPlane(ctx, u.out) }

// stop stops the uploader and frees the device tiles of the planes it
// uploaded that were not taken.
func (u *uploader) stop() {
	u.cancel()
	<-u.finished
	for {
		select {
		case d := <-u.out:
			freeDevTiles([]planeData{d})
		default:
			return
		}
	}
}

// freeDevTiles frees the device tiles of the planes in b that have them
// (a batch left before its fit).
func freeDevTiles(b []planeData) {
	for _, d := range b {
		if d.dev != nil {
			d.dev.Free()
		}
	}
}

// pipeline runs every plane of the cycle under mp, from reader rd: read
// ahead (on a TileEngine sent to its device as read: uploader), fitted in
// batches (the reference plane keeps its profile), corrected and blended,
// and written behind into dir. It returns the most planes of raw tiles
// held at once.
func (r *cycleRun) pipeline(ctx context.Context, mp memPlan, rd *reader, dir string, start time.Time) (int, error) {
	total := r.nPlanes
	done := 0
	next := rd.next
	if te, ok := r.o.Engine.(TileEngine); ok {
		up := r.startUploader(ctx, te, rd, total)
		defer up.stop()
		next = up.next
	}
	for lo, n := 0, 0; lo < total; lo += n {
		n = min(mp.Batch, total-lo)
		if r.o.Sink != nil {
			n = channelBatch(lo, len(r.cyc.Z), mp.Batch)
		}
		b := make([]planeData, 0, n)
		for range n {
			d, err := next(ctx)
			if err != nil {
				freeDevTiles(b)
				return 0, err
			}
			b = append(b, d)
		}
		if err := r.batchPlanes(ctx, b, rd, dir, &done, total); err != nil {
			return 0, err
		}
		r.lg.Info("progress", "cycle", r.o.Cycle, "planes", fmt.Sprintf("%d/%d", done, total), "elapsed_s", fmt.Sprintf("%.1f", since(start)))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := r.w.wait(); err != nil {
		return 0, err
	}
	rd.stop()
	r.tm.Read += rd.secs
	return int(rd.maxInMem.Load()), nil
}

// channelBatch is the size of the batch that starts at plane lo (of the
// stage's order: nz planes per channel) when a sink takes the planes: the
// batches end at the channel's end and split its planes into batches of
// near-equal size, at most batch each (20 planes in batches of at most 8:
// 7, 7, 6), so that a channel's last plane goes to the sink without
// waiting for the fit of the next channel's first planes, and no batch is
// much smaller than the others (a batch's planes share one set of inner
// iterations, basic.Fitter: a small batch saves little of a fit's time).
func channelBatch(lo, nz, batch int) int {
	rem := nz - lo%nz
	k := (rem + batch - 1) / batch // batches left in the channel
	return (rem + k - 1) / k
}

// batchPlanes fits a batch's planes (all but the reference, already
// fitted), then corrects, blends and hands each to the writer, giving its
// slot back as soon as it is blended; done counts the planes finished of
// total.
func (r *cycleRun) batchPlanes(ctx context.Context, b []planeData, rd *reader, dir string, done *int, total int) error {
	o, ref := r.o, r.ref
	t0 := time.Now()
	// With a TileEngine each plane's tiles went to the device once, as
	// read (uploader), for the fit and the blending; they are freed as each
	// plane is blended.
	te, onDevice := o.Engine.(TileEngine)
	var dts []basic.DeviceTiles
	if onDevice {
		dts = make([]basic.DeviceTiles, len(b))
		defer func() {
			for _, d := range dts {
				if d != nil {
					d.Free()
				}
			}
		}()
		for i := range b {
			dts[i], b[i].dev = b[i].dev, nil
		}
		for i, d := range dts {
			if d == nil {
				return fmt.Errorf("cycle %d CH%d Z%d: tiles not on the device", o.Cycle, b[i].pl.ch, b[i].pl.z)
			}
		}
	}
	var fitPlanes [][]*raster.Gray16
	var fitDev []basic.DeviceTiles
	var fitIDs []plane
	for i, d := range b {
		if d.pl != ref {
			fitPlanes = append(fitPlanes, d.tiles)
			fitIDs = append(fitIDs, d.pl)
			if onDevice {
				fitDev = append(fitDev, dts[i])
			}
		}
	}
	var profs []basic.Profile
	if len(fitPlanes) > 0 {
		var err error
		if profs, err = r.fit(ctx, fitPlanes, fitDev, fitIDs); err != nil {
			return fmt.Errorf("cycle %d: basic fit of %v: %w", o.Cycle, fitIDs, err)
		}
	}
	fitPlanes = nil
	r.gc()
	r.tm.Fit += since(t0)
	blendP := blend.Params{Sigma: r.cfg.BlendSigma, OverlapY: r.cfg.TileOverlap, OverlapX: r.cfg.TileOverlap}
	flatMin := float32(r.cfg.BasicFlatfieldMin)
	k := 0
	for i := range b {
		pl := b[i].pl
		prof := &r.refProf[0]
		if pl != ref {
			prof = &profs[k]
			k++
		}
		if uniformFlat(prof) && !r.blank[pl] {
			// BaSiC's own guard (a flatfield with negative values is
			// replaced by ones): the plane is corrected for darkfield only.
			r.fallbacks++
			r.lg.Warn("BaSiC flatfield fell back to uniform (the fit gave negative values); plane corrected for darkfield only",
				"cycle", o.Cycle, "channel", pl.ch, "z", pl.z, "basic_rounds", prof.Reweights, "basic_iterations", prof.Iterations)
		}
		t0 := time.Now()
		var mosaic *raster.Gray16
		var err error
		sunk := false // the sink has the plane
		if onDevice {
			mosaic, sunk, err = r.blendOnDevice(ctx, te, dts[i], pl, prof, flatMin, blendP)
			dts[i].Free()
			dts[i] = nil
		} else {
			mosaic, err = o.Engine.CorrectAndBlend(ctx, b[i].tiles, prof, flatMin, r.pos, blendP)
		}
		if err != nil {
			return fmt.Errorf("cycle %d CH%d Z%d: correct and blend: %w", o.Cycle, pl.ch, pl.z, err)
		}
		r.tm.CorrectBlend += since(t0)
		// The plane's raw tiles are no longer needed: free its slot.
		raster.FreePlanes(o.Engine, b[i].tiles)
		b[i].tiles = nil
		r.gc()
		rd.done()
		if o.Sink != nil && !sunk {
			if err := o.Sink.Plane(ctx, pl.ch, pl.z, mosaic); err != nil {
				return err
			}
		}
		chDir := filepath.Join(dir, layout.ChannelDir(pl.ch))
		planePath := filepath.Join(chDir, layout.StitchedPlane(pl.z))
		if o.NoPlanes {
			planePath = ""
		}
		// The writer gives the mosaic back to the engine's host planes
		// (raster.FreePlane) when nothing else holds it: no sink, or one
		// that took the device copy.
		var release func(*raster.Gray16)
		if o.Sink == nil || sunk {
			release = func(g *raster.Gray16) { raster.FreePlane(o.Engine, g) }
		}
		r.w.plane(planePath, mosaic, filepath.Join(chDir, layout.BaSiCDir, layout.BaSiCStem(pl.z)), prof, release)
		mosaic = nil
		if err := r.w.err(); err != nil {
			return err
		}
		*done++
		r.lg.Debug("plane done", "cycle", o.Cycle, "channel", pl.ch, "z", pl.z, "done", *done, "of", total,
			"basic_rounds", prof.Reweights, "basic_iterations", prof.Iterations)
	}
	return nil
}

// blendOnDevice corrects and blends a plane's tiles on the device. With a
// DeviceSink the mosaic goes to the sink there (sunk: it took it), and
// comes to the host only when it is written or the sink did not take it
// (mosaic nil otherwise). A mosaic only written (no sink, or one that took
// the device copy) comes by DMA into the engine's page-locked planes
// (raster.NewPlane), which the writer gives back; one a sink may keep is
// Go memory.
func (r *cycleRun) blendOnDevice(ctx context.Context, te TileEngine, dt basic.DeviceTiles, pl plane, prof *basic.Profile, flatMin float32, bp blend.Params) (mosaic *raster.Gray16, sunk bool, err error) {
	if r.o.Sink == nil {
		mosaic, err = te.CorrectAndBlendTiles(ctx, dt, prof, flatMin, r.pos, bp)
		return mosaic, false, err
	}
	dm, err := te.CorrectAndBlendTilesDevice(ctx, dt, prof, flatMin, r.pos, bp)
	if err != nil {
		return nil, false, err
	}
	defer dm.Free()
	if ds, ok := r.o.Sink.(DeviceSink); ok {
		if sunk, err = ds.PlaneDevice(ctx, pl.ch, pl.z, dm); err != nil {
			return nil, false, err
		}
	}
	if sunk && r.o.NoPlanes {
		return nil, true, nil
	}
	w, h := dm.Size()
	if sunk {
		mosaic, err = raster.NewPlane(ctx, te, w, h)
	} else {
		mosaic = raster.NewGray16(w, h)
	}
	if err != nil {
		return nil, false, err
	}
	if err := dm.Download(ctx, mosaic); err != nil {
		raster.FreePlane(te, mosaic)
		return nil, false, err
	}
	return mosaic, sunk, nil
}

// alignTiles corrects the reference plane on the CPU and aligns its tiles.
func alignTiles(ctx context.Context, o Options, cyc *dataset.Cycle, tiles []*raster.Gray16, prof *basic.Profile, workers int) ([]raster.Point, error) {
	corr, err := Correct(ctx, tiles, prof, float32(o.Config.BasicFlatfieldMin), workers)
	if err != nil {
		return nil, err
	}
	grid := make([]align.GridPos, len(tiles))
	for k := range tiles {
		grid[k].Row, grid[k].Col = dataset.Grid(k, cyc.Cols)
	}
	res, err := align.Align(ctx, o.Engine.Translator(), corr, cyc.Rows, cyc.Cols, grid, align.Params{
		Overlap: o.Config.TileOverlap, NCCThreshold: o.Config.NCCThreshold, POU: o.Config.POU, Subpixel: true,
		Global: o.Config.Stitching.GlobalRefinement})
	if err != nil {
		return nil, fmt.Errorf("cycle %d: align tiles: %w", o.Cycle, err)
	}
	if res.Accepted != nil && o.Logger != nil {
		o.Logger.Info("global tile refinement", "cycle", o.Cycle, "pairs", len(res.Pairs), "accepted", count(res.Accepted),
			"outliers", count(res.Outlier), "remeasured", count(res.Remeasured))
	}
	return res.Positions, nil
}

// refitUniform handles fits under the darkest-image darkfield rule that did
// not converge (all reweighting rounds used, or stopped early as stagnating:
// basic.RoundStop) or whose flatfield came back
// uniform (BaSiC's guard against negative values): each such plane is fitted
// again, with the same quality settings, under the original rule, which
// converges where the darkest-image level oscillates (measured on dense DAPI
// stacks of small tiles). The refit replaces the profile when it converged
// and gave a real flatfield. Every refit is logged. It returns how many
// profiles were replaced.
func refitUniform(ctx context.Context, eng Engine, planes [][]*raster.Gray16, ids []plane, profs []basic.Profile, bp basic.Params, lg *slog.Logger) (int, error) {
	if bp.DarkfieldMethod != basic.DarkfieldDarkest {
		return 0, nil
	}
	alt := bp
	alt.DarkfieldMethod = basic.DarkfieldOriginal
	n := 0
	for i := range profs {
		if !uniformFlat(&profs[i]) && !profs[i].Stalled && profs[i].Reweights < bp.MaxReweightIterations {
			continue
		}
		re, err := eng.Fit(ctx, planes[i:i+1], alt)
		if err != nil {
			return n, fmt.Errorf("CH%d Z%d: basic refit: %w", ids[i].ch, ids[i].z, err)
		}
		lg.Warn("BaSiC fit with the darkest-image darkfield rule did not converge; refitted with the original rule",
			"channel", ids[i].ch, "z", ids[i].z, "rounds", profs[i].Reweights, "iterations", profs[i].Iterations, "stalled", profs[i].Stalled,
			"uniform", uniformFlat(&profs[i]), "refit_rounds", re[0].Reweights, "refit_iterations", re[0].Iterations,
			"refit_uniform", uniformFlat(&re[0]))
		// A refit that did not converge still replaces a first fit that
		// went NaN (its darkfield would zero the corrected plane).
		if !uniformFlat(&re[0]) && (!re[0].Stalled && re[0].Reweights < bp.MaxReweightIterations || !finiteDark(&profs[i])) {
			profs[i] = re[0]
			n++
		}
	}
	return n, nil
}

// finiteDark reports whether a fit's darkfield is finite everywhere.
func finiteDark(p *basic.Profile) bool {
	for _, v := range p.Darkfield {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}

// uniformFlat reports whether a fit returned the all-ones flatfield.
func uniformFlat(p *basic.Profile) bool {
	for _, v := range p.Flatfield {
		if v != 1 {
			return false
		}
	}
	return true
}

// nominalMosaic is the mosaic's extent along an axis of n tiles of size px
// at the configured overlap, with room for stage jitter (pou % of a tile per
// step, at least 2 %): the memory check's estimate before the alignment.
func nominalMosaic(n, size int, cfg *config.Config) int {
	step := float64(size) * (1 - cfg.TileOverlap)
	slack := max(0.02, cfg.POU/100) * float64(size) * float64(n-1)
	return int(math.Ceil(step*float64(n-1)+slack)) + size
}

// mosaicSize is the blended mosaic's height and width for positions (as
// blend.NewLayout: rounded positions plus one tile).
func mosaicSize(pos []raster.Point, h, w int) (int, int) {
	var mh, mw int
	for _, p := range pos {
		mh = max(mh, int(math.Round(max(0, p.Y)))+h)
		mw = max(mw, int(math.Round(max(0, p.X)))+w)
	}
	return mh, mw
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

// count is the number of true values.
func count(v []bool) int {
	n := 0
	for _, b := range v {
		if b {
			n++
		}
	}
	return n
}
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// sentinel lines in the original's key=value form.
func (r *cycleRun) writeSentinel(path string) error {
	o, cyc := r.o, r.cyc
	chs := make([]string, len(cyc.Channels))
	for i, c := range cyc.Channels {
		chs[i] = fmt.Sprint(c)
	}
	kv := [][2]string{
		{"stage", "stitch"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"zplanes", fmt.Sprint(len(cyc.Z))},
		{"skipped", ""},
		{"duration_minutes", fmt.Sprintf("%.2f", r.tm.Total/60)},
		{"engine", o.Engine.Name()},
		{"workers", fmt.Sprint(o.Workers)},
		{"basic_refits", fmt.Sprint(r.refits)},
		{"basic_uniform_fallbacks", fmt.Sprint(r.fallbacks)},
		{"blank_planes", fmt.Sprint(len(r.blank))},
	}
	if r.mode != basic.ModeCompatible {
		kv = append(kv, [2]string{"profile_mode", basic.ProfileModeNames[r.mode]})
	}
	return staging.WriteSentinel(path, kv)
}

var errWriterFailed = errors.New("output writer failed")

// writer writes planes and profiles on background goroutines so that TIFF
// encoding overlaps compute; at most `slots` writes are queued.
type writer struct {
	wg    sync.WaitGroup
	sem   chan struct{}
	mu    sync.Mutex
	first error
	secs  float64
}

func newWriter(slots int) *writer {
	return &writer{sem: make(chan struct{}, max(1, slots))}
}

func (w *writer) do(fn func() error) {
	w.sem <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.sem; w.wg.Done() }()
		t0 := time.Now()
		err := fn()
		w.mu.Lock()
		w.secs += since(t0)
		if err != nil && w.first == nil {
			w.first = err
		}
		w.mu.Unlock()
	}()
}

// plane writes one stitched plane and its profiles (prefix_flatfield.tif,
// mean 1, and prefix_darkfield.tif in counts) as one job: a write slot
// holds one plane's outputs. path "": the profiles only. release, when
// not nil, takes img back after its write, whether or not it succeeded.
func (w *writer) plane(path string, img *raster.Gray16, prefix string, p *basic.Profile, release func(*raster.Gray16)) {
	flat := &raster.Float32{W: p.W, H: p.H, Pix: p.Flatfield}
	dark := &raster.Float32{W: p.W, H: p.H, Pix: make([]float32, len(p.Darkfield))}
	for i, v := range p.Darkfield {
		dark.Pix[i] = v * 65535
	}
	w.do(func() error {
		if path != "" {
			err := writeGray16(path, img)
			if release != nil && img != nil {
				release(img)
			}
			if err != nil {
				return err
			}
		}
		if err := writeFloat32(prefix+"_flatfield.tif", flat); err != nil {
			return err
		}
		return writeFloat32(prefix+"_darkfield.tif", dark)
	})
}

func (w *writer) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

func (w *writer) wait() error {
	w.wg.Wait()
	return w.err()
}

func (w *writer) seconds() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.secs
}
