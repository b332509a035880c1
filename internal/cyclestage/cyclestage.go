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
// channel is fused and written while the stitch stage goes on with the
// next channel's planes (read ahead within its memory plan).
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
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
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
	s := &sink{df: df, ef: ef, lg: lg, cycle: o.Cycle, workers: max(1, o.Workers),
		onDevice: membudget.EngineMemoryOf(o.Engines.Decon, membudget.EngineMemory{}).OnDevice}
	s.index = make(map[int]int, len(o.Config.Channels))
	for i, ch := range o.Config.Channels {
		s.index[ch] = i
	}
	sres, err := stitch.Run(ctxs["stitch"], stitch.Options{Config: o.Config, Cycle: o.Cycle, Engine: o.Engines.Stitch,
		Workers: o.Workers, Batch: o.Batch, MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource, Logger: lg,
		Sink: s, NoPlanes: !o.KeepIntermediates})
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
	lg       *slog.Logger
	cycle    int
	workers  int
	onDevice bool        // the decon engine keeps its data on the device
	index    map[int]int // channel number -> config index
	zs       map[int]int // z-plane number -> 0-based index
	n        int         // planes per channel
	got      int         // planes of the current channel handed in
	done     int         // channels finished
}

// Reserve is the host memory the fused decon and EDF hold at once for
// mosaics of h x w px, n planes per channel: on the device forms the
// planes in flight between them (one per worker each way, and the plane
// being handed in); on the host forms a channel's float32 stack and its
// result, the rounded planes, decon.CPU's window budget and the EDF's
// planes.
func (s *sink) Reserve(h, w, n int) int64 {
	plane := int64(h) * int64(w) * 2
	if s.onDevice {
		return int64(2*s.workers+1) * plane
	}
	return int64(n)*plane*(2+2+1+1) + deconstage.DefaultCPUBudget
}

// Begin sizes the decon and EDF stages for the mosaic.
func (s *sink) Begin(ctx context.Context, h, w int, zs []int) error {
	s.n = len(zs)
	s.zs = make(map[int]int, len(zs))
	for i, z := range zs {
		s.zs[z] = i
	}
	if err := s.df.Geometry(ctx, s.n, h, w); err != nil {
		return memKey(err)
	}
	return memKey(s.ef.Geometry(s.n, h, w))
}

// Plane hands a blended plane to the decon stage; after a channel's last
// plane it deconvolves the channel into the EDF stage and fuses it.
func (s *sink) Plane(ctx context.Context, ch, z int, img *raster.Gray16) error {
	i, ok := s.index[ch]
	zi, okz := s.zs[z]
	if !ok || !okz {
		return fmt.Errorf("cycle %d: plane CH%d Z%d not in the cycle", s.cycle, ch, z)
	}
	if err := s.df.Put(ctx, i, zi, img); err != nil {
		return err
	}
	if s.got++; s.got < s.n {
		return nil
	}
	s.got = 0
	if err := s.ef.Begin(ctx, i); err != nil {
		return err
	}
	if err := s.df.Channel(ctx, i, func(z int, pg *raster.Gray16) error { return s.ef.Put(ctx, i, z, pg) }); err != nil {
		return err
	}
	if err := s.ef.Channel(ctx, i); err != nil {
		return err
	}
	s.done++
	return nil
}

// Name describes the engines for logs (the stitch engine's: on the GPU the
// one engine of all three).
func (e Engines) Name() string { return e.Stitch.Name() }
