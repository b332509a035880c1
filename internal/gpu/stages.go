package gpu

import (
	"context"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// The stages' contracts. Each stage package declares the small engine
// interface it needs (stitch.Engine, deconstage.Engine and PlaneEngine,
// edf.Fuser with edfstage's device-stack form, register.Backend); *Engine
// satisfies them structurally, with methods whose signatures use only the
// algorithm packages' types, so that no stage imports this package and
// this package imports no stage. This file holds what only the contracts
// need, in both builds (without the cuda tag every method below fails with
// ErrNoCUDA through the methods it calls).

// EngineMemory reports the engine's host memory to the stages' memory
// models (membudget.CUDAEngine: data on the device).
func (*Engine) EngineMemory() membudget.EngineMemory { return membudget.CUDAEngine }

// Deconvolve implements decon.Deconvolver (Deconvolver's), so that the
// engine is a deconstage.Engine as it is.
func (e *Engine) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, error) {
	return e.Deconvolver().Deconvolve(ctx, in, k, p)
}

// deconStack is a DevStack as a decon.DeviceStack.
type deconStack struct {
	e *Engine
	d *DevStack
}

func (s *deconStack) Dims() (n, h, w int) { return s.d.Dims() }

func (s *deconStack) PutGray16(ctx context.Context, z int, pg *raster.Gray16) error {
	return s.e.UploadPlaneGray16(ctx, s.d, z, pg)
}

func (s *deconStack) GetGray16(ctx context.Context, z int, dst *raster.Gray16) error {
	return s.e.DownloadPlaneGray16(ctx, s.d, z, dst)
}

func (s *deconStack) Free() { s.e.FreeStack(s.d) }

// NewMeter returns a plane meter (PlaneMeter) for this stack's planes, in
// blocks of block px.
func (s *deconStack) NewMeter(ctx context.Context, block int) (planestats.Meter, error) {
	_, h, w := s.d.Dims()
	m, err := s.e.NewPlaneMeter(ctx, h, w, block)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// PutGray16Measured is PutGray16 that also measures the plane on the device
// with m (a meter from NewMeter).
func (s *deconStack) PutGray16Measured(ctx context.Context, z int, pg *raster.Gray16, m planestats.Meter) (*planestats.Measure, error) {
	pm, err := s.meter(m)
	if err != nil {
		return nil, err
	}
	return s.e.UploadPlaneGray16Measured(ctx, s.d, z, pg, pm)
}

// PutDeviceGray16Measured is PutGray16Measured from a plane on the device
// (a *DevGray16 of this engine, e.g. a blended mosaic), which is only read;
// m may be nil (no measure, nil result) (PutPlaneFromDevice).
func (s *deconStack) PutDeviceGray16Measured(ctx context.Context, z int, src raster.DeviceGray16, m planestats.Meter) (*planestats.Measure, error) {
	pm, err := s.meter(m)
	if err != nil {
		return nil, err
	}
	p, ok := src.(*DevGray16)
	if !ok {
		return nil, fmt.Errorf("%w: a device plane of another kind (%T)", decon.ErrInput, src)
	}
	return s.e.PutPlaneFromDevice(ctx, s.d, z, p, pm)
}

// GetGray16Into rounds plane z on the device into plane z of to (an EDF
// device stack of this engine from EDFDeviceStack; nil: none), measures it
// there with m (a meter from NewMeter; nil: none) and copies it into dst
// (nil: not to the host) (RoundPlaneInto).
func (s *deconStack) GetGray16Into(ctx context.Context, z int, to edf.DeviceStack, dst *raster.Gray16, m planestats.Meter) (*planestats.Measure, error) {
	pm, err := s.meter(m)
	if err != nil {
		return nil, err
	}
	var es *EDFStack
	if to != nil {
		var ok bool
		if es, ok = to.(*EDFStack); !ok {
			return nil, fmt.Errorf("%w: an EDF device stack of another kind (%T)", decon.ErrInput, to)
		}
	}
	return s.e.RoundPlaneInto(ctx, s.d, z, es, dst, pm)
}

func (s *deconStack) meter(m planestats.Meter) (*PlaneMeter, error) {
	if m == nil {
		return nil, nil
	}
	pm, ok := m.(*PlaneMeter)
	if !ok {
		return nil, fmt.Errorf("%w: a plane meter of another kind (%T)", decon.ErrInput, m)
	}
	return pm, nil
}

// DeconDeviceStack allocates an n x h x w float32 device stack (AllocStack)
// to be filled plane by plane (deconstage's plane form).
// On a lane (Lane) the stack is its feeder's, which fills it.
func (e *Engine) DeconDeviceStack(ctx context.Context, n, h, w int) (decon.DeviceStack, error) {
	owner := e.stackOwner()
	d, err := owner.AllocStack(ctx, n, h, w)
	if err != nil {
		return nil, err
	}
	return &deconStack{e: owner, d: d}, nil
}

// DeconvolveDeviceStack deconvolves a stack of this engine (on a lane: of
// its feeder, from DeconDeviceStack) on the device (DeconvolveDevice); the
// result stays there. in is kept (the caller frees it). A feeder's stack
// is read after the work the feeder has queued (its planes), and the call
// returns with the lane's work done, so that the stack may then be freed.
func (e *Engine) DeconvolveDeviceStack(ctx context.Context, in decon.DeviceStack, k *psf.Kernel, p decon.Params) (decon.DeviceStack, decon.Stats, error) {
	s, ok := in.(*deconStack)
	if !ok || s.e != e && s.e != e.stackOwner() {
		return nil, decon.Stats{}, fmt.Errorf("%w: a device stack of another engine (%T)", decon.ErrInput, in)
	}
	if s.e != e {
		if err := e.afterFeeder(ctx); err != nil {
			return nil, decon.Stats{}, err
		}
		defer e.drain()
	}
	out, st, err := e.DeconvolveDevice(ctx, s.d, k, p)
	if err != nil {
		return nil, st, err
	}
	return &deconStack{e: e, d: out}, st, nil
}

// EDFDeviceStack allocates an n x h x w uint16 device stack (NewEDFStack)
// to be filled plane by plane and fused on the device (edfstage's streamed
// form).
func (e *Engine) EDFDeviceStack(ctx context.Context, n, h, w int) (edf.DeviceStack, error) {
	s, err := e.NewEDFStack(ctx, n, h, w)
	if err != nil {
		return nil, err
	}
	return s, nil
}
