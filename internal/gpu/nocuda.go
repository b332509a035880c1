//go:build !cuda

package gpu

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Built reports whether this binary has the CUDA engine (-tags cuda).
const Built = false

// Engine is the CUDA engine; in this build it cannot be opened, and its
// methods (the same set as the CUDA build's) return ErrNoCUDA.
type Engine struct{}

// Open returns ErrNoCUDA: this binary was built without the cuda tag.
func Open(Options) (*Engine, error) { return nil, ErrNoCUDA }

// Close does nothing.
func (*Engine) Close() error { return nil }

// Lane returns ErrNoCUDA.
func (*Engine) Lane() (*Engine, error) { return nil, ErrNoCUDA }

// stackOwner is e (no lanes in this build).
func (e *Engine) stackOwner() *Engine { return e }

// afterFeeder returns ErrNoCUDA.
func (*Engine) afterFeeder(context.Context) error { return ErrNoCUDA }

// drain does nothing.
func (*Engine) drain() {}

// Name says that there is no GPU engine.
func (*Engine) Name() string { return "gpu: not built (no cuda tag)" }

// Device describes the device; empty in this build.
func (*Engine) Device() string { return "" }

// Busy returns ErrNoCUDA.
func (*Engine) Busy() ([]OpTime, error) { return nil, ErrNoCUDA }

// MemInfo returns ErrNoCUDA.
func (*Engine) MemInfo() (MemStats, error) { return MemStats{}, ErrNoCUDA }

// ResetPeak returns ErrNoCUDA.
func (*Engine) ResetPeak() error { return ErrNoCUDA }

// Trim returns ErrNoCUDA.
func (*Engine) Trim() error { return ErrNoCUDA }

// BaSiC returns a fitter that fails with ErrNoCUDA.
func (*Engine) BaSiC() basic.Fitter { return noCUDA{} }

// Translator returns a translator that fails with ErrNoCUDA.
func (*Engine) Translator() align.PairTranslator { return noCUDA{} }

// Blender returns a blender that fails with ErrNoCUDA.
func (*Engine) Blender() blend.Blender { return noCUDA{} }

// Fit returns ErrNoCUDA.
func (*Engine) Fit(context.Context, [][]*raster.Gray16, basic.Params) ([]basic.Profile, error) {
	return nil, ErrNoCUDA
}

// FitGray16 returns ErrNoCUDA.
func (*Engine) FitGray16(context.Context, [][]*raster.Gray16, basic.Params) ([]basic.Profile, error) {
	return nil, ErrNoCUDA
}

// Correct returns ErrNoCUDA.
func (*Engine) Correct(context.Context, []*raster.Gray16, *basic.Profile, float32) ([]*raster.Float32, error) {
	return nil, ErrNoCUDA
}

// CorrectAndBlend returns ErrNoCUDA.
func (*Engine) CorrectAndBlend(context.Context, []*raster.Gray16, *basic.Profile, float32, []raster.Point, blend.Params) (*raster.Gray16, error) {
	return nil, ErrNoCUDA
}

type noCUDA struct{}

func (noCUDA) Fit(context.Context, []*raster.Stack, basic.Params) ([]basic.Profile, error) {
	return nil, ErrNoCUDA
}

func (noCUDA) Translate(context.Context, []*raster.Float32, []align.Pair, align.Params) ([]align.Translation, error) {
	return nil, ErrNoCUDA
}

func (noCUDA) Blend(context.Context, []*raster.Float32, []raster.Point, blend.Params) (*raster.Float32, error) {
	return nil, ErrNoCUDA
}
