//go:build cuda

package gpu

import (
	"context"
	"errors"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Deconvolver returns the GPU decon.Deconvolver (work in progress).
func (e *Engine) Deconvolver() decon.Deconvolver { return &Decon{e: e} }

// Decon is the GPU decon.Deconvolver.
type Decon struct{ e *Engine }

// Deconvolve implements decon.Deconvolver.
func (d *Decon) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, error) {
	return nil, decon.Stats{}, errors.New("gpu: decon: not implemented yet")
}
