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
package stitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
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

// Run stitches one cycle.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	cfg, lg := o.Config, o.Logger
	if lg == nil {
		lg = slog.Default()
	}
	workers := max(1, o.Workers)
	batch := o.Batch
	if batch <= 0 {
		batch = workers
	}
	cyc, err := dataset.Discover(ctx, cfg.ProjectDir, o.Cycle, dataset.Options{
		Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: cfg.Channels, NZPlanes: cfg.NZPlanes, Workers: workers})
	if err != nil {
		return nil, err
	}
	lg.Info("cycle found", "cycle", o.Cycle, "dir", cyc.Dir, "tiles", cyc.Tiles(), "grid", fmt.Sprintf("%dx%d", cyc.Rows, cyc.Cols),
		"tile_px", fmt.Sprintf("%dx%d", cyc.W, cyc.H), "z", len(cyc.Z), "channels", cyc.Channels, "engine", o.Engine.Name())

	// The memory plan, first from the nominal mosaic size: a budget below
	// the smallest working set stops here, before any output.
	nPlanes := len(cyc.Channels) * len(cyc.Z)
	geom := geometry{Tiles: cyc.Tiles(), H: cyc.H, W: cyc.W, Workers: workers, WorkingDim: basicParams(cfg).WorkingSize}
	geom.MosaicH, geom.MosaicW = nominalMosaic(cyc.Rows, cyc.H, cfg), nominalMosaic(cyc.Cols, cyc.W, cfg)
	resident := membudget.RSS() // the engine is open: its context and libraries are in
	mm := newMemModel(o.Engine, geom, resident, o.MemBudget, o.MemBudgetSource)
	if _, err := mm.choose(min(batch, nPlanes)); err != nil {
		return nil, err
	}
	defer membudget.SetGoLimit(mm.goLimit())()

	final := OutDir(cfg.ProjectDir, o.Cycle)
	stage, err := staging.NewContext(ctx, final)
	if err != nil {
		return nil, err
	}
	// Background writes must finish before a failed cycle's staging
	// directory is removed, or a late write would recreate it.
	var w *writer
	defer func() {
		if w != nil {
			w.wait()
		}
		stage.Abort()
	}()

	// Reference plane: first channel (DAPI) at the middle z-plane, 1-based
	// n//2 as in the original (20 planes -> Z10).
	ref := plane{cyc.Channels[0], cyc.Z[max(1, len(cyc.Z)/2)-1]}
	bp := basicParams(cfg)
	var tm Timings
	t0 := time.Now()
	refTiles, err := cyc.ReadPlane(ctx, ref.z, ref.ch, workers)
	if err != nil {
		return nil, err
	}
	tm.Read += since(t0)
	t0 = time.Now()
	refits := 0
	fit := func(planes [][]*raster.Gray16, ids []plane) ([]basic.Profile, error) {
		profs, err := o.Engine.Fit(ctx, planes, bp)
		if err != nil {
			return nil, err
		}
		n, err := refitUniform(ctx, o.Engine, planes, ids, profs, bp, lg)
		refits += n
		return profs, err
	}
	refProf, err := fit([][]*raster.Gray16{refTiles}, []plane{ref})
	if err != nil {
		return nil, fmt.Errorf("cycle %d CH%d Z%d: basic fit: %w", o.Cycle, ref.ch, ref.z, err)
	}
	tm.Fit += since(t0)
	if o.MemBudget > 0 {
		runtime.GC() // the fit's copies, before the alignment's
	}
	t0 = time.Now()
	pos, err := alignTiles(ctx, o, cyc, refTiles, &refProf[0], workers)
	if err != nil {
		return nil, err
	}
	tm.Align = since(t0)
	lg.Info("tiles aligned", "cycle", o.Cycle, "ref_channel", ref.ch, "ref_z", ref.z, "seconds", fmt.Sprintf("%.2f", tm.Align))
	if err := writePositions(filepath.Join(stage.Path, layout.TilePositionsName), cyc, pos); err != nil {
		return nil, err
	}
	// The reference plane is read again in its turn: holding it through
	// the first channel would cost a plane of the budget.
	refTiles = nil
	if o.MemBudget > 0 {
		runtime.GC() // the alignment's working set, before the pipeline's
	}

	// The plan again with the measured mosaic size.
	geom.MosaicH, geom.MosaicW = mosaicSize(pos, cyc.H, cyc.W)
	mm = newMemModel(o.Engine, geom, resident, o.MemBudget, o.MemBudgetSource)
	mp, err := mm.choose(min(batch, nPlanes))
	if err != nil {
		return nil, err
	}
	lg.Info("memory plan", "cycle", o.Cycle, "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"batch", mp.Batch, "planes_in_memory", mp.Planes, "write_slots", mp.Writes,
		"planned", membudget.Format(mm.need(mp)), "fixed", membudget.Format(mm.e.Fixed), "go_limit", membudget.Format(mm.goLimit()),
		"raw_plane", membudget.Format(mm.raw), "mosaic", fmt.Sprintf("%dx%d px, %s", geom.MosaicW, geom.MosaicH, membudget.Format(mm.mosaic)))
	w = newWriter(mp.Writes)

	var planes []plane
	for _, ch := range cyc.Channels {
		for _, z := range cyc.Z {
			planes = append(planes, plane{ch, z})
		}
	}
	blendP := blend.Params{Sigma: cfg.BlendSigma, OverlapY: cfg.TileOverlap, OverlapX: cfg.TileOverlap}
	flatMin := float32(cfg.BasicFlatfieldMin)

	// Read planes ahead of compute into at most mp.Planes plane slots: a
	// slot is taken before a plane is read and given back as soon as the
	// plane is blended, so raw tiles never exceed the plan.
	type planeData struct {
		pl    plane
		tiles []*raster.Gray16
		err   error
	}
	ready := make(chan planeData, len(planes))
	slots := make(chan struct{}, mp.Planes)
	readCtx, cancelRead := context.WithCancel(ctx)
	defer cancelRead()
	var readSecs float64
	var inMem, maxInMem atomic.Int64 // planes read and not yet blended
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for _, pl := range planes {
			select {
			case slots <- struct{}{}:
			case <-readCtx.Done():
				return
			}
			if n := inMem.Add(1); n > maxInMem.Load() {
				maxInMem.Store(n) // only this goroutine stores
			}
			t0 := time.Now()
			tiles, err := cyc.ReadPlane(readCtx, pl.z, pl.ch, workers)
			readSecs += since(t0)
			ready <- planeData{pl: pl, tiles: tiles, err: err}
			if err != nil {
				return
			}
		}
	}()
	// readSecs is read after the reader is done.
	defer func() { cancelRead(); <-readDone }()

	// Under a budget, garbage (a plane's tiles, the CPU engine's float
	// copies) is collected as soon as it is made instead of when the heap
	// nears the Go limit: a collection of this mostly pointer-free heap
	// takes milliseconds, and a plane's worth of allocations arriving
	// during a late collection would overshoot the limit.
	collect := func() {
		if o.MemBudget > 0 {
			runtime.GC()
		}
	}
	done, fallbacks := 0, 0
	for lo := 0; lo < len(planes); lo += mp.Batch {
		n := min(mp.Batch, len(planes)-lo)
		b := make([]planeData, 0, n)
		for range n {
			var d planeData
			select {
			case d = <-ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if d.err != nil {
				return nil, d.err
			}
			b = append(b, d)
		}
		// Fit every plane of the batch except the reference, already fitted.
		var fitPlanes [][]*raster.Gray16
		var fitIDs []plane
		for _, d := range b {
			if d.pl != ref {
				fitPlanes = append(fitPlanes, d.tiles)
				fitIDs = append(fitIDs, d.pl)
			}
		}
		t0 := time.Now()
		var profs []basic.Profile
		if len(fitPlanes) > 0 {
			if profs, err = fit(fitPlanes, fitIDs); err != nil {
				return nil, fmt.Errorf("cycle %d: basic fit of %v: %w", o.Cycle, fitIDs, err)
			}
		}
		fitPlanes = nil
		collect()
		tm.Fit += since(t0)
		k := 0
		for i := range b {
			pl := b[i].pl
			prof := &refProf[0]
			if pl != ref {
				prof = &profs[k]
				k++
			}
			if uniformFlat(prof) {
				// BaSiC's own guard (a flatfield with negative values is
				// replaced by ones): the plane is corrected for darkfield only.
				fallbacks++
				lg.Warn("BaSiC flatfield fell back to uniform (the fit gave negative values); plane corrected for darkfield only",
					"cycle", o.Cycle, "channel", pl.ch, "z", pl.z, "basic_rounds", prof.Reweights, "basic_iterations", prof.Iterations)
			}
			t0 := time.Now()
			mosaic, err := o.Engine.CorrectAndBlend(ctx, b[i].tiles, prof, flatMin, pos, blendP)
			if err != nil {
				return nil, fmt.Errorf("cycle %d CH%d Z%d: correct and blend: %w", o.Cycle, pl.ch, pl.z, err)
			}
			tm.CorrectBlend += since(t0)
			// The plane's raw tiles are no longer needed: free its slot.
			b[i].tiles = nil
			collect()
			inMem.Add(-1)
			<-slots
			chDir := filepath.Join(stage.Path, layout.ChannelDir(pl.ch))
			w.plane(filepath.Join(chDir, layout.StitchedPlane(pl.z)), mosaic, filepath.Join(chDir, layout.BaSiCDir, layout.BaSiCStem(pl.z)), prof)
			mosaic = nil
			if err := w.err(); err != nil {
				return nil, err
			}
			done++
			lg.Debug("plane done", "cycle", o.Cycle, "channel", pl.ch, "z", pl.z, "done", done, "of", len(planes),
				"basic_rounds", prof.Reweights, "basic_iterations", prof.Iterations)
		}
		profs = nil
		lg.Info("progress", "cycle", o.Cycle, "planes", fmt.Sprintf("%d/%d", done, len(planes)), "elapsed_s", fmt.Sprintf("%.1f", since(start)))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := w.wait(); err != nil {
		return nil, err
	}
	cancelRead()
	<-readDone
	tm.Read += readSecs
	tm.Write = w.seconds()
	tm.Total = since(start)
	if err := writeSentinel(layout.Sentinel(stage.Path), o, cyc, o.Engine.Name(), tm, refits, fallbacks); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	lg.Info("cycle stitched", "cycle", o.Cycle, "out", final, "planes", len(planes),
		"read_s", f2(tm.Read), "fit_s", f2(tm.Fit), "align_s", f2(tm.Align), "correct_blend_s", f2(tm.CorrectBlend), "write_s", f2(tm.Write), "total_s", f2(tm.Total))
	return &Result{OutDir: final, Positions: pos, Planes: len(planes), Timings: tm, PlanesInMemory: int(maxInMem.Load())}, nil
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
func writeSentinel(path string, o Options, cyc *dataset.Cycle, engine string, tm Timings, refits, fallbacks int) error {
	chs := make([]string, len(cyc.Channels))
	for i, c := range cyc.Channels {
		chs[i] = fmt.Sprint(c)
	}
	return staging.WriteSentinel(path, [][2]string{
		{"stage", "stitch"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"zplanes", fmt.Sprint(len(cyc.Z))},
		{"skipped", ""},
		{"duration_minutes", fmt.Sprintf("%.2f", tm.Total/60)},
		{"engine", engine},
		{"workers", fmt.Sprint(o.Workers)},
		{"basic_refits", fmt.Sprint(refits)},
		{"basic_uniform_fallbacks", fmt.Sprint(fallbacks)},
	})
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
// holds one plane's outputs.
func (w *writer) plane(path string, img *raster.Gray16, prefix string, p *basic.Profile) {
	flat := &raster.Float32{W: p.W, H: p.H, Pix: p.Flatfield}
	dark := &raster.Float32{W: p.W, H: p.H, Pix: make([]float32, len(p.Darkfield))}
	for i, v := range p.Darkfield {
		dark.Pix[i] = v * 65535
	}
	w.do(func() error {
		if err := writeGray16(path, img); err != nil {
			return err
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
