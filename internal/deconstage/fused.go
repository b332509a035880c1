package deconstage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
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
// mosaic size, once known: the jobs and the memory plan), per channel Put
// for every plane then Channel, then Commit; Abort on any failure (a no-op
// after Commit). A channel's Put calls come from one goroutine; Channel of
// one channel may run while the next channel's planes are Put (on another
// goroutine), never two Channel calls at once.
type Fused struct {
	r      *cycleRun
	stage  *staging.Dir
	start  time.Time
	planes bool // write the deconvolved planes (keep_intermediates)

	done  int          // channels deconvolved
	input []fusedInput // per channel, its planes handed in so far
	block int          // > 0: measure the planes on the device in blocks of block px (MeasureOnDevice)
	maxes [][2]*raster.Gray16
}

// meteredStack is a device stack that measures its planes on the device as
// they go in and come out (the GPU engine's).
type meteredStack interface {
	NewMeter(ctx context.Context, block int) (planestats.Meter, error)
	PutGray16Measured(ctx context.Context, z int, pg *raster.Gray16, m planestats.Meter) (*planestats.Measure, error)
	GetGray16Into(ctx context.Context, z int, to edf.DeviceStack, dst *raster.Gray16, m planestats.Meter) (*planestats.Measure, error)
}

// deviceInput is a device stack that takes planes already on its engine's
// device (the GPU engine's: blended mosaics), measured with m when m is
// not nil.
type deviceInput interface {
	PutDeviceGray16Measured(ctx context.Context, z int, src raster.DeviceGray16, m planestats.Meter) (*planestats.Measure, error)
}

// Plane is a rounded deconvolved plane handed on by Fused.Channel: Gray
// (nil when it did not come to the host: not written, measured on the
// device and already in the target), its Measure when measured on the
// device (MeasureOnDevice; else nil), and InTarget when it was rounded
// straight into Channel's target device stack.
type Plane struct {
	Gray     *raster.Gray16
	Measure  *planestats.Measure
	InTarget bool
}

// fusedInput is a channel's input being handed in: its device stack
// (plane form) or its host stack (stack form); neither: not begun.
type fusedInput struct {
	dev   decon.DeviceStack
	st    *raster.Stack
	meter planestats.Meter // measures the planes handed in (MeasureOnDevice)
}

// MeasureOnDevice asks for every plane's QC measure (planestats, in blocks
// of block px) where the planes are on the device: the planes handed in
// (Put's result) and the rounded planes handed on (out's m), and per
// channel the maximum of each (Maxima). Channels whose planes are not on
// a device that measures get nil measures: the caller measures those.
func (f *Fused) MeasureOnDevice(block int) { f.block = block }

// Maxima returns channel index i's pixelwise maximum over z of the planes
// handed in and of the rounded planes, after its Channel, each when those
// planes were measured on the device (else nil).
func (f *Fused) Maxima(i int) (in, out *raster.Gray16) { return f.maxes[i][0], f.maxes[i][1] }

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
	return &Fused{r: r, stage: stage, start: time.Now(), planes: planes, input: make([]fusedInput, len(r.jobs)), maxes: make([][2]*raster.Gray16, len(r.jobs))}, nil
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
// h x w px, planes in any order. pg is only read. The plane's measure is
// returned when it was measured on the device (MeasureOnDevice), else nil.
func (f *Fused) Put(ctx context.Context, i, z int, pg *raster.Gray16) (*planestats.Measure, error) {
	j, in := f.r.jobs[i], &f.input[i]
	if err := j.fits(z, pg.W, pg.H); err != nil {
		return nil, err
	}
	if in.dev == nil && in.st == nil {
		if err := f.begin(ctx, j, in); err != nil {
			return nil, fmt.Errorf("channel %d: %w", j.ch, algInput(err))
		}
	}
	if in.meter != nil {
		return in.dev.(meteredStack).PutGray16Measured(ctx, z, pg, in.meter)
	}
	if in.dev != nil {
		return nil, in.dev.PutGray16(ctx, z, pg)
	}
	toCounts(in.st.Plane(z), pg.Pix)
	return nil, nil
}

// PutDevice is Put for a plane on the engine's device (src, only read):
// where channel index i's planes go to a device stack that takes device
// planes (and, when the planes are measured on the device, measures them
// there) it puts it there without a trip through the host (ok); otherwise
// it does nothing (ok false: the caller Puts the plane from the host).
func (f *Fused) PutDevice(ctx context.Context, i, z int, src raster.DeviceGray16) (m *planestats.Measure, ok bool, err error) {
	j, in := f.r.jobs[i], &f.input[i]
	w, h := src.Size()
	if err := j.fits(z, w, h); err != nil {
		return nil, false, err
	}
	if j.mode != modePlane {
		return nil, false, nil
	}
	if in.dev == nil {
		if err := f.begin(ctx, j, in); err != nil {
			return nil, false, fmt.Errorf("channel %d: %w", j.ch, algInput(err))
		}
	}
	di, isDev := in.dev.(deviceInput)
	if !isDev || (f.block > 0 && in.meter == nil) {
		return nil, false, nil
	}
	m, err = di.PutDeviceGray16Measured(ctx, z, src, in.meter)
	return m, err == nil, err
}

// fits checks that plane z (0-based) of w x h px is one of the job's.
func (j *job) fits(z, w, h int) error {
	if w != j.w || h != j.h || z < 0 || z >= j.n {
		return fmt.Errorf("channel %d: plane %d of %dx%d, want 0..%d of %dx%d", j.ch, z, w, h, j.n-1, j.w, j.h)
	}
	return nil
}

// begin makes channel j's input: a device stack (plane form, with its
// meter when measuring on a device that can) or a host stack.
func (f *Fused) begin(ctx context.Context, j *job, in *fusedInput) error {
	if j.mode != modePlane {
		in.st = raster.NewStack(j.n, j.h, j.w)
		return nil
	}
	d, err := f.r.pe.DeconDeviceStack(ctx, j.n, j.h, j.w)
	if err != nil {
		return err
	}
	in.dev = d
	if ms, ok := d.(meteredStack); ok && f.block > 0 {
		if in.meter, err = ms.NewMeter(ctx, f.block); err != nil {
			return err
		}
	}
	return nil
}

// Channel deconvolves channel index i from the planes Put and hands each
// rounded plane z (0-based) to out (which must not keep its Gray changed,
// nor keep it at all after returning when Plane.InTarget: that Gray is the
// engine's page-locked plane, given back; out may be called from several
// goroutines at once), after writing it when the planes are kept. to, when
// not nil, is the EDF stage's device stack of the channel: where the
// result is on a device stack of the same engine,
// each plane is rounded straight into it (Plane.InTarget) and comes to the
// host only to be written or measured there.
func (f *Fused) Channel(ctx context.Context, i int, to edf.DeviceStack, out func(z int, p Plane) error) error {
	r, j, in := f.r, f.r.jobs[i], f.input[i]
	f.input[i] = fusedInput{}
	if in.dev == nil && in.st == nil {
		return fmt.Errorf("channel %d: no planes handed in", j.ch)
	}
	c := &r.res.Channels[i]
	*c = Channel{Channel: j.ch, Planes: j.n, W: j.w, H: j.h, PSF: j.k.String(), Info: j.info}
	chDir := filepath.Join(f.stage.Path, layout.ChannelDir(j.ch))
	if err := os.MkdirAll(chDir, 0o777); err != nil {
		return err
	}
	emit := func(z int, p Plane) error {
		if f.planes {
			if err := tiffio.WriteGray16(filepath.Join(chDir, layout.DeconPlane(z+1)), p.Gray); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		return out(z, p)
	}
	var err error
	if in.dev != nil {
		err = f.devChannel(ctx, i, j, in, to, c, emit)
	} else {
		err = f.hostChannel(ctx, j, in.st, c, emit)
	}
	if err != nil {
		return fmt.Errorf("channel %d: %w", j.ch, algInput(err))
	}
	f.done++
	r.logChannel(*c)
	return nil
}

// devChannel is Channel on the device-buffer form (runPlanes' path) of
// channel index i; with a meter on the input it measures the rounded
// planes too and keeps both maxima (Maxima).
func (f *Fused) devChannel(ctx context.Context, i int, j *job, in fusedInput, to edf.DeviceStack, c *Channel, emit func(int, Plane) error) error {
	var inMax *raster.Gray16
	if in.meter != nil {
		var err error
		inMax, err = in.meter.MaxProjection(ctx)
		in.meter.Free()
		if err != nil {
			in.dev.Free()
			return err
		}
	}
	res, err := deconvolveOnDevice(ctx, f.r.pe, j, in.dev, c)
	if err != nil {
		return err
	}
	defer res.Free()
	var dt target
	if ms, ok := res.(meteredStack); ok {
		dt.to = to
		if in.meter != nil {
			if dt.meter, err = ms.NewMeter(ctx, f.block); err != nil {
				return err
			}
			defer dt.meter.Free()
		}
		dt.deviceOnly = !f.planes && dt.meter != nil && to != nil
		if to != nil { // out keeps no plane: the EDF has it on the device
			dt.host = f.r.pe
		}
	}
	t2 := time.Now()
	err = downloadEach(ctx, res, j, f.r.io, dt, emit)
	c.WriteSec = time.Since(t2).Seconds()
	f.maxes[i][0] = inMax
	if err != nil || dt.meter == nil {
		return err
	}
	f.maxes[i][1], err = dt.meter.MaxProjection(ctx)
	return err
}

// hostChannel is Channel on the host stack (runStack's path).
func (f *Fused) hostChannel(ctx context.Context, j *job, st *raster.Stack, c *Channel, emit func(int, Plane) error) error {
	pages, err := f.r.runStack(ctx, j, input{st: st}, c)
	if err != nil {
		return err
	}
	t2 := time.Now()
	err = par.ForEach(ctx, len(pages), f.r.workers, func(z int) error {
		err := emit(z, Plane{Gray: pages[z]})
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

// Abort frees the device stacks still held and removes the staging
// directory (nothing after Commit). No Put or Channel may be running.
func (f *Fused) Abort() {
	for i := range f.input {
		if d := f.input[i].dev; d != nil {
			d.Free()
		}
		if m := f.input[i].meter; m != nil {
			m.Free()
		}
		f.input[i] = fusedInput{}
	}
	f.stage.Abort()
}

// Dir is the stage's staging directory: files written there are committed
// with the stage.
func (f *Fused) Dir() string { return f.stage.Path }

// Result is the stage's outcome, complete after Commit.
func (f *Fused) Result() *Result { return f.r.res }
