// Package blend assembles corrected tiles into one mosaic plane with sigmoid
// tapers (the original's stitch_blend): each tile is weighted by
// t_y(y)·t_x(x), t(d) = 1/(1+exp((d - L(1-ov)/2)/sigma)), d the distance from
// the tile centre, and the mosaic is sum(tile·w)/sum(w).
//
// Tiles are float32 (y, x), row-major with x fastest (raster.Float32), in
// any intensity unit; the mosaic has the same unit. Pixels that no tile
// covers are 0. Implementations: CPU (cpu.go) and the CUDA blender in
// internal/gpu, both held to the suite in blendtest.
package blend

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Params are the blending settings.
type Params struct {
	Sigma    float64 // taper width, px [blend_sigma] (15)
	OverlapY float64 // overlap fraction along y [tile_overlap]
	OverlapX float64 // overlap fraction along x [tile_overlap]
}

// Blender blends tiles placed at positions (px, tile pixel (0,0), minimum 0)
// into a mosaic of size (max Y + H, max X + W) with positions rounded to the
// nearest pixel. Implementations: CPU reference and CUDA (blendtest suite).
type Blender interface {
	Blend(ctx context.Context, tiles []*raster.Float32, pos []raster.Point, p Params) (*raster.Float32, error)
}
