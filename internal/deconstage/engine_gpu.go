package deconstage

import (
	"context"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// GPUEngine runs the stage on the CUDA engine. In a binary built without
// the cuda tag, OpenGPU fails with gpu.ErrNoCUDA: there is no CPU fallback.
type GPUEngine struct {
	e *gpu.Engine
	d decon.Deconvolver
}

// OpenGPU opens GPU index (among the visible devices).
func OpenGPU(index int, debug bool) (*GPUEngine, error) {
	e, err := gpu.Open(gpu.Options{Device: index, Debug: debug})
	if err != nil {
		return nil, fmt.Errorf("open GPU %d: %w", index, err)
	}
	return NewGPUEngine(e), nil
}

// NewGPUEngine runs the stage on the open engine e; closing the result
// closes e.
func NewGPUEngine(e *gpu.Engine) *GPUEngine { return &GPUEngine{e: e, d: e.Deconvolver()} }

// Name describes the device.
func (g *GPUEngine) Name() string { return "gpu " + g.e.Device() }

// Close releases the GPU.
func (g *GPUEngine) Close() error { return g.e.Close() }

// MemInfo reports device memory figures.
func (g *GPUEngine) MemInfo() (gpu.MemStats, error) { return g.e.MemInfo() }

// Deconvolve implements decon.Deconvolver on the GPU.
func (g *GPUEngine) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, error) {
	return g.d.Deconvolve(ctx, in, k, p)
}

// DeconvolveGray16 deconvolves and rounds on the device (see Gray16Engine).
func (g *GPUEngine) DeconvolveGray16(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) ([]*raster.Gray16, decon.Stats, error) {
	return g.e.DeconvolveGray16(ctx, in, k, p)
}
