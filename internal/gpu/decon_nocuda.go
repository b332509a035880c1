//go:build !cuda

package gpu

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Deconvolver returns a decon.Deconvolver that fails with ErrNoCUDA.
func (*Engine) Deconvolver() decon.Deconvolver { return noDecon{} }

// DevStack is a stack held in device memory; empty in this build.
type DevStack struct{}

// Dims returns the stack's size (z, y, x); zero in this build.
func (*DevStack) Dims() (n, h, w int) { return 0, 0, 0 }

// UploadStack returns ErrNoCUDA.
func (*Engine) UploadStack(context.Context, *raster.Stack) (*DevStack, error) { return nil, ErrNoCUDA }

// DownloadStack returns ErrNoCUDA.
func (*Engine) DownloadStack(context.Context, *DevStack) (*raster.Stack, error) {
	return nil, ErrNoCUDA
}

// FreeStack does nothing.
func (*Engine) FreeStack(*DevStack) {}

// DeconvolveDevice returns ErrNoCUDA.
func (*Engine) DeconvolveDevice(context.Context, *DevStack, *psf.Kernel, decon.Params) (*DevStack, decon.Stats, error) {
	return nil, decon.Stats{}, ErrNoCUDA
}

// DeconvolveGray16 returns ErrNoCUDA.
func (*Engine) DeconvolveGray16(context.Context, *raster.Stack, *psf.Kernel, decon.Params) ([]*raster.Gray16, decon.Stats, error) {
	return nil, decon.Stats{}, ErrNoCUDA
}

// AllocStack returns ErrNoCUDA.
func (*Engine) AllocStack(context.Context, int, int, int) (*DevStack, error) { return nil, ErrNoCUDA }

// UploadPlaneGray16 returns ErrNoCUDA.
func (*Engine) UploadPlaneGray16(context.Context, *DevStack, int, *raster.Gray16) error {
	return ErrNoCUDA
}

// DownloadPlaneGray16 returns ErrNoCUDA.
func (*Engine) DownloadPlaneGray16(context.Context, *DevStack, int, *raster.Gray16) error {
	return ErrNoCUDA
}

// UploadPlaneGray16Measured returns ErrNoCUDA.
func (*Engine) UploadPlaneGray16Measured(context.Context, *DevStack, int, *raster.Gray16, *PlaneMeter) (*planestats.Measure, error) {
	return nil, ErrNoCUDA
}

// DownloadPlaneGray16Measured returns ErrNoCUDA.
func (*Engine) DownloadPlaneGray16Measured(context.Context, *DevStack, int, *raster.Gray16, *PlaneMeter) (*planestats.Measure, error) {
	return nil, ErrNoCUDA
}

// RoundPlaneInto returns ErrNoCUDA.
func (*Engine) RoundPlaneInto(context.Context, *DevStack, int, *EDFStack, *raster.Gray16, *PlaneMeter) (*planestats.Measure, error) {
	return nil, ErrNoCUDA
}

// PutPlaneFromDevice returns ErrNoCUDA.
func (*Engine) PutPlaneFromDevice(context.Context, *DevStack, int, *DevGray16, *PlaneMeter) (*planestats.Measure, error) {
	return nil, ErrNoCUDA
}

// DevGray16 is a plane on the device; in this build there is none.
type DevGray16 struct{}

// Size is 0 x 0.
func (*DevGray16) Size() (w, h int) { return 0, 0 }

// Download returns ErrNoCUDA.
func (*DevGray16) Download(context.Context, *raster.Gray16) error { return ErrNoCUDA }

// Free does nothing.
func (*DevGray16) Free() {}

// PlaneMeter measures planes on the device; in this build there is none.
type PlaneMeter struct{}

// NewPlaneMeter returns ErrNoCUDA.
func (*Engine) NewPlaneMeter(context.Context, int, int, int) (*PlaneMeter, error) {
	return nil, ErrNoCUDA
}

// MaxProjection returns ErrNoCUDA.
func (*PlaneMeter) MaxProjection(context.Context) (*raster.Gray16, error) { return nil, ErrNoCUDA }

// Free does nothing.
func (*PlaneMeter) Free() {}

// DeconStreams returns ErrNoCUDA.
func (*Engine) DeconStreams(context.Context, int, int, int, *psf.Kernel, decon.Params) (bool, int64, error) {
	return false, 0, ErrNoCUDA
}

type noDecon struct{}

func (noDecon) Deconvolve(context.Context, *raster.Stack, *psf.Kernel, decon.Params) (*raster.Stack, decon.Stats, error) {
	return nil, decon.Stats{}, ErrNoCUDA
}
