//go:build !cuda

package gpu

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// Registrar returns a registration backend that fails with ErrNoCUDA.
func (*Engine) Registrar() register.Backend { return noCUDARegistrar{} }

type noCUDARegistrar struct{}

func (noCUDARegistrar) Name() string { return "gpu: not built (no cuda tag)" }

func (noCUDARegistrar) EngineMemory() membudget.EngineMemory { return membudget.CUDAEngine }

func (noCUDARegistrar) Downsample(context.Context, *raster.Gray16, []int) ([]*raster.Float32, error) {
	return nil, ErrNoCUDA
}

func (noCUDARegistrar) BlockShifts(context.Context, *raster.Float32, *raster.Float32, int, []*register.Mapping, []register.Block, int, int) ([]register.Shift, error) {
	return nil, ErrNoCUDA
}

func (noCUDARegistrar) Warp(context.Context, []*raster.Gray16, *register.Mapping, int, int) ([]*raster.Gray16, error) {
	return nil, ErrNoCUDA
}
