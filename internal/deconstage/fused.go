package deconstage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Fused is the stage fed plane by plane by the stitch stage in the same
// process (internal/cyclestage, kintsugi-cycle) instead of reading
// stitched/cycNN: the settings, checks, engine forms, rounding and outputs
// of Run, byte for byte, with each channel's stitched planes handed in by
// Put and its deconvolved planes handed on by Channel's out. On an engine
// with the device-buffer form (PlaneEngine, a channel that does not stream)
// the planes go straight to the device stack and the result stays there
// until each plane comes back rounded; otherwise (the CPU, or a channel
// whose iterates stream through pinned memory) they fill a host float32
// stack, as Run's stack form.
//
// Use: NewFused (every check, the staging directory), Geometry (the
// mosaic size, once known: the jobs and the memory plan), per channel in
// config order Put for every plane then Channel, then Commit; Abort on any
// failure (a no-op after Commit).
type Fused struct {
	r      *cycleRun
	stage  *staging.Dir
	start  time.Time
	planes bool // write the deconvolved planes (keep_intermediates)

	done int               // channels deconvolved
	cur  int               // the channel being filled; -1: none
	dev  decon.DeviceStack // its device stack (plane form)
	st   *raster.Stack     // its host stack (stack form)
}

// NewFused checks the settings (a bad one wraps ErrInput) and opens the
// stage's staging directory; planes says whether the deconvolved planes are
// written (false: only DECONV_parameters.txt and the sentinel, for
// keep_intermediates: false).
func NewFused(ctx context.Context, o Options, planes bool) (*Fused, error) {
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	stage, err := staging.NewContext(ctx, OutDir(r.cfg.ProjectDir, o.Cycle))
	if err != nil {
		return nil, err
	}
	r.stageDir = stage.Path
	return &Fused{r: r, stage: stage, start: time.Now(), planes: planes, cur: -1}, nil
}

// Geometry makes every channel's job for n planes of h x w px and chooses
// the memory plan (a budget below the smallest working set is a
// *membudget.NeedError naming ConfigKeyMem).
func (f *Fused) Geometry(ctx context.Context, n, h, w int) error {
	r := f.r
	for i, ch := range r.cfg.Channels {
		err := r.newJob(ctx, i, ch, func() ([]string, int, int, int, error) { return nil, n, h, w, nil })
		if err != nil {
			return err
		}
	}
	if _, err := r.planMemory(); err != nil {
		return err
	}
	r.res.Channels = make([]Channel, len(r.jobs))
	r.lg.Info("deconvolving cycle (fused)", "cycle", r.o.Cycle, "channels", r.cfg.Channels, "engine", r.o.Engine.Name(),
		"workers", r.workers, "psf_model", psfModel(r.cfg), "algorithm", r.cfg.Decon.Algorithm, "iterations", r.cfg.Decon.Iterations)
	return nil
}

// Put hands in plane z (0-based) of channel index i (config order) of
// h x w px; channels come one after the other, planes in any order. pg is
// only read.
func (f *Fused) Put(ctx context.Context, i, z int, pg *raster.Gray16) error {
	j := f.r.jobs[i]
	if pg.W != j.w || pg.H != j.h || z < 0 || z >= j.n {
		return fmt.Errorf("channel %d: plane %d of %dx%d, want 0..%d of %dx%d", j.ch, z, pg.W, pg.H, j.n-1, j.w, j.h)
	}
	if f.cur != i {
		if f.cur >= 0 {
			return fmt.Errorf("channel %d: a plane before channel %d was deconvolved", j.ch, f.r.jobs[f.cur].ch)
		}
		f.cur = i
		if j.mode == modePlane {
			d, err := f.r.pe.DeconDeviceStack(ctx, j.n, j.h, j.w)
			if err != nil {
				return fmt.Errorf("channel %d: %w", j.ch, algInput(err))
			}
			f.dev = d
		} else {
			f.st = raster.NewStack(j.n, j.h, j.w)
		}
	}
	if f.dev != nil {
		return f.dev.PutGray16(ctx, z, pg)
	}
	dst := f.st.Plane(z)
	for k, v := range pg.Pix {
		dst[k] = float32(v)
	}
	return nil
}

// Channel deconvolves channel index i from the planes Put and hands each
// rounded plane z (0-based) to out (which must not keep it changed; it may
// be called from several goroutines at once), after writing it when the
// planes are kept.
func (f *Fused) Channel(ctx context.Context, i int, out func(z int, pg *raster.Gray16) error) error {
	r, j := f.r, f.r.jobs[i]
	if f.cur != i {
		return fmt.Errorf("channel %d: no planes handed in", j.ch)
	}
	c := &r.res.Channels[i]
	*c = Channel{Channel: j.ch, Planes: j.n, W: j.w, H: j.h, PSF: j.k.String(), Info: j.info}
	chDir := filepath.Join(f.stage.Path, layout.ChannelDir(j.ch))
	if err := os.MkdirAll(chDir, 0o777); err != nil {
		return err
	}
	emit := func(z int, pg *raster.Gray16) error {
		if f.planes {
			if err := tiffio.WriteGray16(filepath.Join(chDir, layout.DeconPlane(z+1)), pg); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		return out(z, pg)
	}
	var err error
	if f.dev != nil {
		err = f.devChannel(ctx, j, c, emit)
	} else {
		err = f.hostChannel(ctx, j, c, emit)
	}
	f.cur, f.dev, f.st = -1, nil, nil
	if err != nil {
		return fmt.Errorf("channel %d: %w", j.ch, algInput(err))
	}
	f.done++
	r.logChannel(*c)
	return nil
}

// devChannel is Channel on the device-buffer form (runPlanes' path).
func (f *Fused) devChannel(ctx context.Context, j *job, c *Channel, emit func(int, *raster.Gray16) error) error {
	d := f.dev
	t1 := time.Now()
	res, s, err := f.r.pe.DeconvolveDeviceStack(ctx, d, j.k, j.p)
	d.Free()
	if err != nil {
		return err
	}
	defer res.Free()
	c.Stats = s
	c.Seconds = time.Since(t1).Seconds()
	t2 := time.Now()
	err = par.ForEach(ctx, j.n, f.r.io, func(z int) error {
		pg := raster.NewGray16(j.w, j.h)
		if err := res.GetGray16(ctx, z, pg); err != nil {
			return err
		}
		return emit(z, pg)
	})
	c.WriteSec = time.Since(t2).Seconds()
	return err
}

// hostChannel is Channel on the host stack (runStack's path).
func (f *Fused) hostChannel(ctx context.Context, j *job, c *Channel, emit func(int, *raster.Gray16) error) error {
	st := f.st
	f.st = nil
	pages, err := f.r.runStack(ctx, j, input{st: st}, c)
	if err != nil {
		return err
	}
	t2 := time.Now()
	err = par.ForEach(ctx, len(pages), f.r.workers, func(z int) error {
		err := emit(z, pages[z])
		pages[z] = nil
		return err
	})
	c.WriteSec = time.Since(t2).Seconds()
	return err
}

// Commit writes DECONV_parameters.txt and the sentinel and renames the
// stage's directory into place.
func (f *Fused) Commit() error {
	if f.r.res == nil || f.done != len(f.r.jobs) {
		return fmt.Errorf("decon: commit after %d of %d channels", f.done, len(f.r.jobs))
	}
	f.r.res.Seconds = time.Since(f.start).Seconds()
	if err := f.r.finish(f.stage.Path); err != nil {
		return err
	}
	if err := f.stage.Commit(); err != nil {
		return err
	}
	f.r.lg.Info("cycle deconvolved", "cycle", f.r.o.Cycle, "dir", f.r.res.Dir, "seconds", fmt.Sprintf("%.1f", f.r.res.Seconds))
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
