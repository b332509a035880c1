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
