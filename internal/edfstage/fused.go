package edfstage

import (
	"context"
	"fmt"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// Fused is the stage fed plane by plane by the decon stage in the same
// process (internal/cyclestage, kintsugi-cycle) instead of reading
// deconvolved/cycNN: Run's settings, checks, engine forms and outputs,
// byte for byte. On an engine with the streamed form (Streamer) each plane
// goes to the channel's device stack as it is handed in; otherwise the
// planes are kept for the engine's EDF, as Run's stacked form.
//
// Use: NewFused (every check, the staging directory), Geometry, per
// channel in config order Put for every plane then Channel, then Commit;
// Abort on any failure (a no-op after Commit).
type Fused struct {
	r     *cycleRun
	stage *staging.Dir
	start time.Time
	st    Streamer
	n     int // planes per channel

	cur   int              // the channel being filled; -1: none
	dev   edf.DeviceStack  // its device stack (streamed form)
	pages []*raster.Gray16 // its planes (stacked form)
}

// NewFused checks the settings and the channels' output names (a bad one
// wraps ErrInput) and opens the stage's staging directory.
func NewFused(ctx context.Context, o Options) (*Fused, error) {
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	if err := r.checkNames(); err != nil {
		return nil, err
	}
	stage, err := staging.NewContext(ctx, OutDir(r.cfg.ProjectDir, o.Cycle))
	if err != nil {
		return nil, err
	}
	r.stageDir = stage.Path
	r.res = &Result{OutDir: OutDir(r.cfg.ProjectDir, o.Cycle)}
	return &Fused{r: r, stage: stage, start: time.Now(), cur: -1}, nil
}

// Geometry chooses the memory plan for n planes of h x w px per channel (a
// budget below the smallest working set is a *membudget.NeedError naming
// ConfigKeyMem).
func (f *Fused) Geometry(n, h, w int) error {
	r, o := f.r, f.r.o
	mm := newMemModel(o.Engine, n, h, w, o.Workers, r.p, membudget.RSS(), o.MemBudget, o.MemBudgetSource)
	mp, err := mm.choose()
	if err != nil {
		return err
	}
	f.n = n
	r.dims = make([][2]int, len(r.cfg.Channels))
	for i := range r.dims {
		r.dims[i] = [2]int{h, w}
	}
	if mp.Streamed {
		f.st = streamerOf(o.Engine)
	}
	r.res.MemPlan, r.res.MemPlanned = mp.String()+" (fused)", mm.need(mp)
	r.lg.Info("edf (fused)", "cycle", o.Cycle, "channels", r.cfg.Channels, "method", r.p.Method, "engine", o.Engine.Name(),
		"plan", r.res.MemPlan, "planes_per_channel", n, "plane", fmt.Sprintf("%dx%d px", w, h))
	return nil
}

// Put hands in plane z (0-based) of channel index i (config order);
// channels come one after the other, planes in any order, from several
// goroutines at once. The stacked form keeps pg: the caller must not
// change it.
func (f *Fused) Put(ctx context.Context, i, z int, pg *raster.Gray16) error {
	h, w := f.r.dims[i][0], f.r.dims[i][1]
	if pg.W != w || pg.H != h || z < 0 || z >= f.n {
		return fmt.Errorf("edf channel %d: plane %d of %dx%d, want 0..%d of %dx%d", f.r.cfg.Channels[i], z, pg.W, pg.H, f.n-1, w, h)
	}
	if f.cur != i {
		return fmt.Errorf("edf channel %d: not begun", f.r.cfg.Channels[i])
	}
	if f.dev != nil {
		return f.dev.Put(ctx, z, pg)
	}
	f.pages[z] = pg
	return nil
}

// Begin starts channel index i: its device stack or its plane slots. It
// must be called before the channel's first Put (Put may then run on
// several goroutines).
func (f *Fused) Begin(ctx context.Context, i int) error {
	if f.cur >= 0 {
		return fmt.Errorf("edf channel %d: begun before channel %d was fused", f.r.cfg.Channels[i], f.r.cfg.Channels[f.cur])
	}
	f.cur = i
	if f.st != nil {
		d, err := f.st.EDFDeviceStack(ctx, f.n, f.r.dims[i][0], f.r.dims[i][1])
		if err != nil {
			return f.r.fuseErr(i, err)
		}
		f.dev = d
		return nil
	}
	f.pages = make([]*raster.Gray16, f.n)
	return nil
}

// DeviceStack is the begun channel's device stack (nil for the stacked
// form, or before Begin): its planes may be filled on the device, by an
// engine of the same device, instead of by Put.
func (f *Fused) DeviceStack() edf.DeviceStack { return f.dev }

// Channel fuses channel index i from the planes Put and writes its output
// plane.
func (f *Fused) Channel(ctx context.Context, i int) error {
	r := f.r
	if f.cur != i {
		return fmt.Errorf("edf channel %d: not begun", r.cfg.Channels[i])
	}
	t := time.Now()
	var res *edf.Result
	var err error
	if f.dev != nil {
		res, err = f.dev.Fuse(ctx, r.g, r.p)
		f.dev.Free()
	} else {
		for z, pg := range f.pages {
			if pg == nil {
				return fmt.Errorf("edf channel %d: plane %d not handed in", r.cfg.Channels[i], z)
			}
		}
		res, err = r.o.Engine.EDF(ctx, f.pages, r.g, r.p)
	}
	f.cur, f.dev, f.pages = -1, nil, nil
	if err != nil {
		return r.fuseErr(i, err)
	}
	err = r.done(i, res, f.n, 0, time.Since(t).Seconds())
	r.collect()
	return err
}

// Commit writes the sentinel and renames the stage's directory into place.
func (f *Fused) Commit() error {
	r := f.r
	if len(r.res.Channels) != len(r.cfg.Channels) {
		return fmt.Errorf("edf: commit after %d of %d channels", len(r.res.Channels), len(r.cfg.Channels))
	}
	r.res.Seconds = time.Since(f.start).Seconds()
	if err := writeSentinel(layout.Sentinel(f.stage.Path), r.o, r.p, r.res); err != nil {
		return err
	}
	if err := f.stage.Commit(); err != nil {
		return err
	}
	r.lg.Info("cycle done", "cycle", r.o.Cycle, "out", r.res.OutDir, "seconds", f2(r.res.Seconds))
	return nil
}

// Abort frees a device stack still held and removes the staging directory
// (nothing after Commit).
func (f *Fused) Abort() {
	if f.dev != nil {
		f.dev.Free()
		f.dev = nil
	}
	f.stage.Abort()
}

// Result is the stage's outcome, complete after Commit.
func (f *Fused) Result() *Result { return f.r.res }
