package stitch

import (
	"context"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// GPUEngine runs the stage on the CUDA engine. In a binary built without the
// cuda tag, OpenGPU fails with gpu.ErrNoCUDA: there is no fallback to the CPU.
type GPUEngine struct {
	e *gpu.Engine
}

// OpenGPU opens GPU index (among the visible devices; SLURM sets
// CUDA_VISIBLE_DEVICES) for the stage.
func OpenGPU(index int, debug bool) (*GPUEngine, error) {
	e, err := gpu.Open(gpu.Options{Device: index, Debug: debug})
	if err != nil {
		return nil, fmt.Errorf("open GPU %d: %w", index, err)
	}
	return &GPUEngine{e: e}, nil
}

func (g *GPUEngine) Name() string                     { return "gpu " + g.e.Device() }
func (g *GPUEngine) Translator() align.PairTranslator { return g.e.Translator() }
func (g *GPUEngine) Close() error                     { return g.e.Close() }

// MemInfo reports the engine's device memory figures.
func (g *GPUEngine) MemInfo() (gpu.MemStats, error) { return g.e.MemInfo() }

func (g *GPUEngine) Fit(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error) {
	return g.e.FitGray16(ctx, planes, p)
}

func (g *GPUEngine) CorrectAndBlend(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (*raster.Gray16, error) {
	return g.e.CorrectAndBlend(ctx, tiles, prof, flatMin, pos, bp)
}
