package stitch

import (
	"context"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Engine runs the heavy steps of the stage on one device. Raw tiles travel
// as uint16 counts (half the bytes of float32 on the way to a GPU);
// profiles' darkfields are in normalised units (counts/65535). The CUDA
// engine (*gpu.Engine) satisfies it as it is; an engine may also report its
// host memory (membudget.MemoryReporter, see memory.go).
type Engine interface {
	// Name says which device and implementation run, for logs.
	Name() string
	// Fit fits one BaSiC profile per plane; planes[i] holds the raw tiles
	// of plane i in acquisition order.
	Fit(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error)
	// Translator measures tile-pair translations for the alignment.
	Translator() align.PairTranslator
	// CorrectAndBlend corrects raw tiles with prof, clip((x/65535 - dark) /
	// max(flat, flatMin), 0, 1), blends them at pos and returns the mosaic in
	// counts (rounded, clipped to 0..65535).
	CorrectAndBlend(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (*raster.Gray16, error)
	Close() error
}

// TileEngine is an Engine that keeps a plane's raw tiles on its device
// between the BaSiC fit and the correction and blending (the GPU engine):
// each plane's tiles cross to the device once instead of twice. The stage
// uses it when the engine has it; the profiles and mosaics are the same
// bits as Fit's and CorrectAndBlend's.
type TileEngine interface {
	UploadTiles(ctx context.Context, tiles []*raster.Gray16) (basic.DeviceTiles, error)
	FitTiles(ctx context.Context, planes []basic.DeviceTiles, p basic.Params) ([]basic.Profile, error)
	CorrectAndBlendTiles(ctx context.Context, t basic.DeviceTiles, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (*raster.Gray16, error)
	// CorrectAndBlendTilesDevice is CorrectAndBlendTiles with the mosaic
	// left on the device (the caller frees it): for a DeviceSink.
	CorrectAndBlendTilesDevice(ctx context.Context, t basic.DeviceTiles, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (raster.DeviceGray16, error)
}

// CPUEngine is the reference implementation on the CPU, run only when the
// CPU device is asked for explicitly.
type CPUEngine struct {
	Workers int
	fitter  basic.CPU
	tr      align.CPU
	bl      blend.CPU
}

// NewCPUEngine returns the CPU engine with a pool of workers goroutines.
func NewCPUEngine(workers int) *CPUEngine {
	return &CPUEngine{Workers: workers, fitter: basic.CPU{Workers: workers}, tr: align.CPU{Workers: workers}, bl: blend.CPU{Workers: workers}}
}

func (e *CPUEngine) Name() string                     { return fmt.Sprintf("cpu (%d workers)", e.Workers) }
func (e *CPUEngine) Translator() align.PairTranslator { return e.tr }
func (e *CPUEngine) Close() error                     { return nil }

// EngineMemory reports the CPU engine's host memory to the memory model.
func (e *CPUEngine) EngineMemory() membudget.EngineMemory { return cpuEngineMemory }

// Fit normalises each plane's tiles and runs the CPU BaSiC fitter.
func (e *CPUEngine) Fit(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error) {
	stacks := make([]*raster.Stack, len(planes))
	for i, tiles := range planes {
		stacks[i] = toStack(tiles)
	}
	return e.fitter.Fit(ctx, stacks, p)
}

// CorrectAndBlend corrects every tile on the CPU and blends them.
func (e *CPUEngine) CorrectAndBlend(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (*raster.Gray16, error) {
	corr, err := Correct(ctx, tiles, prof, flatMin, e.Workers)
	if err != nil {
		return nil, err
	}
	m, err := e.bl.Blend(ctx, corr, pos, bp)
	if err != nil {
		return nil, err
	}
	out := &raster.Gray16{W: m.W, H: m.H}
	out.Pix = raster.Quantize16(nil, m.Pix)
	return out, nil
}

// Correct applies a profile to raw tiles with basic.CorrectGray16,
// clip((x/65535 - dark) / max(flat, flatMin), 0, 1), on workers goroutines.
func Correct(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32, workers int) ([]*raster.Float32, error) {
	out := make([]*raster.Float32, len(tiles))
	err := par.ForEach(ctx, len(tiles), workers, func(i int) error {
		t := tiles[i]
		if t.W != prof.W || t.H != prof.H {
			return fmt.Errorf("tile %d is %dx%d, profile %dx%d", i+1, t.W, t.H, prof.W, prof.H)
		}
		f := raster.NewFloat32(t.W, t.H)
		basic.CorrectGray16(f.Pix, t.Pix, prof, flatMin) // the one definition of the rule
		out[i] = f
		return nil
	})
	return out, err
}

// toStack copies tiles into a stack of intensities in [0, 1].
func toStack(tiles []*raster.Gray16) *raster.Stack {
	st := raster.NewStack(len(tiles), tiles[0].H, tiles[0].W)
	for i, t := range tiles {
		raster.Normalize16(st.Plane(i), t.Pix)
	}
	return st
}
