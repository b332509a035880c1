//go:build !cuda

package gpu

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// EDFTimings are the phases of one EDFTimed call, seconds.
type EDFTimings struct {
	Upload, Gate, Fuse, Download float64
}

// EDF returns ErrNoCUDA.
func (*Engine) EDF(context.Context, []*raster.Gray16, edf.Gate, edf.Params) (*edf.Result, error) {
	return nil, ErrNoCUDA
}

// EDFTimed returns ErrNoCUDA.
func (*Engine) EDFTimed(context.Context, []*raster.Gray16, edf.Gate, edf.Params, bool) (*edf.Result, EDFTimings, error) {
	return nil, EDFTimings{}, ErrNoCUDA
}

// EDFStack is a device stack for EDF; empty in this build.
type EDFStack struct{ N, H, W int }

// NewEDFStack returns ErrNoCUDA.
func (*Engine) NewEDFStack(context.Context, int, int, int) (*EDFStack, error) { return nil, ErrNoCUDA }

// Put returns ErrNoCUDA.
func (*EDFStack) Put(context.Context, int, *raster.Gray16) error { return ErrNoCUDA }

// Fuse returns ErrNoCUDA.
func (*EDFStack) Fuse(context.Context, edf.Gate, edf.Params) (*edf.Result, error) {
	return nil, ErrNoCUDA
}

// Free does nothing.
func (*EDFStack) Free() {}
