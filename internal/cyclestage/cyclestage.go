// Package cyclestage is the fused cycle: stitch, decon and EDF of one
// cycle in one process on one engine (kintsugi-cycle run), the raw tiles
// read once and every later stage fed from memory instead of from the
// files of the one before. It writes what the three stages write, byte for
// byte (the stages' own code does the work: stitch.Options.Sink,
// deconstage.Fused, edfstage.Fused):
//
//	data/processed/stitched/cycNN/...      as internal/stitch (planes only with KeepIntermediates)
//	data/processed/deconvolved/cycNN/...   as internal/deconstage (planes only with KeepIntermediates)
//	data/processed/edf/cycNN/...           as internal/edfstage
//
// each directory staged and committed as its stage does (stitch, then
// decon, then EDF; a failure leaves the stages before it committed and the
// rest absent, as a chain of three jobs would).
//
// Data flow per channel (config order): every blended plane goes to the
// decon stage as it is made (on the GPU straight into the channel's device
// stack); after the channel's last plane the channel is deconvolved, each
// rounded plane goes to the EDF stage (the GPU's EDF device stack) and the
// channel is fused and written on a second goroutine, while the stitch
// stage goes on with the next channel's planes (at most one channel
// behind: the next channel's end waits for it).
//
// Memory: the stitch stage plans within MemBudget less what the fused
// decon and EDF hold at once (reserve: planes in flight on the device
// forms, a channel's stacks on the host forms). A budget too small for the
// smallest plan is a *membudget.NeedError naming ConfigKeyMem.
package cyclestage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
)

// ConfigKeyMem is the config key of the fused job's memory (MB), named by
// a *membudget.NeedError.
const ConfigKeyMem = "resources.mem_cycle"

// ErrInput marks errors caused by the input data or config (exit code 2).
var ErrInput = staging.ErrInput

// Engines are the three stages' engines: on the GPU one *gpu.Engine in
// every field; on the CPU each stage's reference.
type Engines struct {
	Stitch stitch.Engine
	Decon  deconstage.Engine
	EDF    edf.Fuser
}

// Options of a run.
type Options struct {
	Config  *config.Config
	Cycle   int
	Engines Engines
	Workers int
	Batch   int // stitch.Options.Batch
	// KeepIntermediates writes the stitched and deconvolved planes (the
	// config's keep_intermediates); false writes only what registration
	// and the QC need.
	KeepIntermediates bool
	// MemBudget is the job's host memory (bytes; 0: none) and
	// MemBudgetSource where it came from.
	MemBudget       int64
	MemBudgetSource string
	Logger          *slog.Logger
	// Lock, when set, returns the context carrying a stage's output-lock
	// options (cliutil.LockContext) for stage "stitch", "decon" or "edf";
	// nil: ctx as it is.
	Lock func(ctx context.Context, stage string) (context.Context, error)
}

// Result of a run.
type Result struct {
	Stitch  *stitch.Result
	Decon   *deconstage.Result
	EDF     *edfstage.Result
	Seconds float64
}

// Run runs the fused cycle: the decon and EDF stages opened (every check
// of their settings before any work), the stitch stage run with a sink
// that deconvolves and fuses each channel as its planes are made, then the
// decon and EDF stages committed.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	lg := o.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lock := o.Lock
	if lock == nil {
		lock = func(ctx context.Context, _ string) (context.Context, error) { return ctx, nil }
	}
	ctxs := map[string]context.Context{}
	for _, st := range []string{"decon", "edf", "stitch"} {
		c, err := lock(ctx, st)
		if err != nil {
			return nil, err
		}
		ctxs[st] = c
	}
	df, err := deconstage.NewFused(ctxs["decon"], deconstage.Options{Config: o.Config, Cycle: o.Cycle, Engine: o.Engines.Decon,
		Workers: o.Workers, Logger: lg}, o.KeepIntermediates)
	if err != nil {
		return nil, err
	}
	defer df.Abort()
	ef, err := edfstage.NewFused(ctxs["edf"], edfstage.Options{Config: o.Config, Cycle: o.Cycle, Engine: o.Engines.EDF,
		Workers: o.Workers, Logger: lg})
	if err != nil {
		return nil, err
	}
	defer ef.Abort()
	s := &sink{df: df, ef: ef, cfg: o.Config, cycle: o.Cycle, workers: max(1, o.Workers), summary: !o.KeepIntermediates,
		onDevice: membudget.EngineMemoryOf(o.Engines.Decon, membudget.EngineMemory{}).OnDevice}
	s.index = make(map[int]int, len(o.Config.Channels))
	for i, ch := range o.Config.Channels {
		s.index[ch] = i
	}
	sres, err := stitch.Run(ctxs["stitch"], stitch.Options{Config: o.Config, Cycle: o.Cycle, Engine: o.Engines.Stitch,
		Workers: o.Workers, Batch: o.Batch, MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource, Logger: lg,
		Sink: s, NoPlanes: !o.KeepIntermediates})
	if s.sum != nil { // a channel cut short by a failure
		s.sum.wg.Wait()
	}
	if werr := s.wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, memKey(err)
	}
	if s.done != len(o.Config.Channels) {
		return nil, fmt.Errorf("cycle %d: %d of %d channels deconvolved and fused", o.Cycle, s.done, len(o.Config.Channels))
	}
	if err := df.Commit(); err != nil {
		return nil, err
	}
	if err := ef.Commit(); err != nil {
		return nil, err
	}
	res := &Result{Stitch: sres, Decon: df.Result(), EDF: ef.Result(), Seconds: time.Since(start).Seconds()}
	lg.Info("cycle done (fused)", "cycle", o.Cycle, "keep_intermediates", o.KeepIntermediates, "seconds", fmt.Sprintf("%.2f", res.Seconds))
	return res, nil
}

// memKey names the fused job's memory key in a stage's NeedError.
func memKey(err error) error {
	var ne *membudget.NeedError
	if errors.As(err, &ne) {
		ne.Stage = "cycle (" + ne.Stage + ")"
		ne.ConfigKey = ConfigKeyMem
	}
	return err
}

// sink takes the stitch stage's planes (stitch.Sink) to the decon and EDF
// stages, channel by channel.
type sink struct {
	df       *deconstage.Fused
	ef       *edfstage.Fused
	cfg      *config.Config
	cycle    int
	workers  int
	onDevice bool        // the decon engine keeps its data on the device
	summary  bool        // planes not written: their QC summaries are (qc.Summarizer)
	index    map[int]int // channel number -> config index
	zi       map[int]int // z-plane number -> 0-based index
	n, h, w  int         // planes per channel, mosaic size px
	dir      string      // the stitch stage's staging directory
	got      int         // planes of the current channel handed in
	done     int         // channels finished (written by the goroutine behind, read after wait)
	behind   chan error  // the channel being deconvolved and fused behind; nil: none

	sum *pending      // the current channel's stitched planes' summary (summary)
	sem chan struct{} // bounds the Adds in flight (workers)
}

// pending is a channel's summary with its Adds in flight.
type pending struct {
	sum *qc.Summarizer
	wg  sync.WaitGroup
}

// Reserve is the host memory the fused decon and EDF hold at once for
// mosaics of h x w px, n planes per channel: on the device forms the
// planes in flight between them (one per worker each way, and the plane
// being handed in); on the host forms the channel being filled (float32)
// and the channel behind: its float32 stack and result, the rounded
// planes and the EDF's planes (8 uint16 channels), and decon.CPU's
// windows (5 float32 arrays of the padded stack, about 12 uint16 channels,
// at most deconstage.DefaultCPUBudget); without intermediates also the
// planes being summarised (one per worker) and two maximum projections.
func (s *sink) Reserve(h, w, n int) int64 {
	plane := int64(h) * int64(w) * 2
	var sum int64
	if s.summary {
		sum = int64(s.workers+2) * plane
	}
	if s.onDevice {
		return int64(2*s.workers+1)*plane + sum
	}
	ch := int64(n) * plane
	return 8*ch + min(12*ch, deconstage.DefaultCPUBudget) + sum
}

// Begin sizes the decon and EDF stages for the mosaic.
func (s *sink) Begin(ctx context.Context, dir string, h, w int, zs []int) error {
	s.dir, s.n, s.h, s.w = dir, len(zs), h, w
	s.zi = make(map[int]int, len(zs))
	for i, z := range zs {
		s.zi[z] = i
	}
	s.sem = make(chan struct{}, s.workers)
	if s.summary {
		s.df.MeasureOnDevice(qc.Block(w, h))
	}
	if err := s.df.Geometry(ctx, s.n, h, w); err != nil {
		return memKey(err)
	}
	return memKey(s.ef.Geometry(s.n, h, w))
}

// Plane hands a blended plane to the decon stage (and, without
// intermediates, to its QC summary); after a channel's last plane it
// deconvolves the channel into the EDF stage and fuses it, behind.
func (s *sink) Plane(ctx context.Context, ch, z int, img *raster.Gray16) error {
	i, zi, err := s.plane(ch, z)
	if err != nil {
		return err
	}
	m, err := s.df.Put(ctx, i, zi, img)
	if err != nil {
		return err
	}
	return s.handed(ctx, i, ch, zi, z, m, img)
}

// PlaneDevice is Plane for a mosaic on the device (stitch.DeviceSink): it
// goes into the decon stage's device stack, measured there without
// intermediates, when the channel's decon is on that device (taken);
// otherwise nothing is done and the stage calls Plane.
func (s *sink) PlaneDevice(ctx context.Context, ch, z int, p raster.DeviceGray16) (bool, error) {
	i, zi, err := s.plane(ch, z)
	if err != nil {
		return false, err
	}
	m, ok, err := s.df.PutDevice(ctx, i, zi, p)
	if err != nil || !ok {
		return false, err
	}
	if s.summary && m == nil {
		return false, fmt.Errorf("cycle %d: plane CH%d Z%d put on the device without its measure", s.cycle, ch, z)
	}
	return true, s.handed(ctx, i, ch, zi, z, m, nil)
}

// plane returns the config index of channel ch and the 0-based index of
// z-plane z.
func (s *sink) plane(ch, z int) (i, zi int, err error) {
	i, ok := s.index[ch]
	zi, okz := s.zi[z]
	if !ok || !okz {
		return 0, 0, fmt.Errorf("cycle %d: plane CH%d Z%d not in the cycle", s.cycle, ch, z)
	}
	return i, zi, nil
}

// handed books plane z (index zi) of channel ch (index i), put into the
// decon stage: without intermediates its measure m (from the device) or,
// when m is nil, img itself goes to the channel's summary; after the
// channel's last plane the channel is deconvolved and fused behind.
func (s *sink) handed(ctx context.Context, i, ch, zi, z int, m *planestats.Measure, img *raster.Gray16) error {
	if s.summary {
		if s.got == 0 {
			s.sum = &pending{sum: qc.NewSummarizer(s.n, s.h, s.w)}
		}
		file := s.rel(layout.Stitched(s.cfg.ProjectDir, s.cycle), ch, layout.StitchedPlane(z))
		if m != nil {
			s.sum.sum.AddMeasure(zi, z, file, m)
		} else {
			s.add(s.sum, zi, z, file, img)
		}
	}
	if s.got++; s.got < s.n {
		return nil
	}
	s.got = 0
	if err := s.wait(); err != nil {
		return err
	}
	s.behind = make(chan error, 1)
	go func(ch chan error, sum *pending) { ch <- s.finish(ctx, i, sum) }(s.behind, s.sum)
	s.sum = nil
	return nil
}

// add adds a plane to sum on a goroutine of its own (at most workers at
// once).
func (s *sink) add(p *pending, i, z int, file string, g *raster.Gray16) {
	s.sem <- struct{}{}
	p.wg.Add(1)
	go func() {
		defer func() { <-s.sem; p.wg.Done() }()
		p.sum.Add(i, z, file, g)
	}()
}

// rel is the path, relative to the project, of file in channel ch's
// directory of a stage's output dir.
func (s *sink) rel(dir string, ch int, file string) string {
	p := filepath.Join(dir, layout.ChannelDir(ch), file)
	if r, err := filepath.Rel(s.cfg.ProjectDir, p); err == nil {
		return r
	}
	return p
}

// finish deconvolves channel index i into the EDF stage and fuses it;
// without intermediates it writes the QC summaries of the channel's
// stitched planes (stitchSum) and of its deconvolved planes.
func (s *sink) finish(ctx context.Context, i int, stitchSum *pending) error {
	ch := s.cfg.Channels[i]
	if err := s.ef.Begin(ctx, i); err != nil {
		return err
	}
	var deconSum *qc.Summarizer
	if s.summary {
		deconSum = qc.NewSummarizer(s.n, s.h, s.w)
	}
	deconDir := layout.Deconvolved(s.cfg.ProjectDir, s.cycle)
	out := func(z int, p deconstage.Plane) error {
		if deconSum != nil {
			file := s.rel(deconDir, ch, layout.DeconPlane(z+1))
			if p.Measure != nil {
				deconSum.AddMeasure(z, z+1, file, p.Measure)
			} else {
				deconSum.Add(z, z+1, file, p.Gray)
			}
		}
		if p.InTarget {
			return nil
		}
		return s.ef.Put(ctx, i, z, p.Gray)
	}
	if err := s.df.Channel(ctx, i, s.ef.DeviceStack(), out); err != nil {
		return err
	}
	if err := s.ef.Channel(ctx, i); err != nil {
		return err
	}
	if s.summary {
		stitchSum.wg.Wait()
		in, out := s.df.Maxima(i) // those measured on the device
		if in != nil {
			stitchSum.sum.SetMaxProjection(in)
		}
		if out != nil {
			deconSum.SetMaxProjection(out)
		}
		if err := stitchSum.sum.Write(filepath.Join(s.dir, layout.ChannelDir(ch))); err != nil {
			return err
		}
		if err := deconSum.Write(filepath.Join(s.df.Dir(), layout.ChannelDir(ch))); err != nil {
			return err
		}
	}
	s.done++
	return nil
}

// End waits for the last channel, deconvolved and fused behind (it writes
// its stitched planes' summary into the stitch stage's directory).
func (s *sink) End(context.Context) error { return s.wait() }

// wait waits for the channel behind, if any, and returns its error.
func (s *sink) wait() error {
	if s.behind == nil {
		return nil
	}
	err := <-s.behind
	s.behind = nil
	return err
}

// Name describes the engines for logs (the stitch engine's: on the GPU the
// one engine of all three).
func (e Engines) Name() string { return e.Stitch.Name() }
