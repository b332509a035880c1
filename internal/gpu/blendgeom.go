package gpu

import (
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// maxBlendTiles is the most tiles one blend launch takes (the kernel keeps
// a per-block candidate list in shared memory).
const maxBlendTiles = 1024

// blendGeom is what the blend kernels need besides the pixels: integer tile
// positions, the mosaic size and the two taper vectors (blend.Taper, the
// same for every tile since all tiles have one size).
type blendGeom struct {
	py, px     []int32
	outH, outW int
	ty, tx     []float64
}

// blendGeomFloat32 builds the geometry of float32 tiles with blend's own
// checks (blend.NewLayout).
func blendGeomFloat32(tiles []*raster.Float32, pos []raster.Point, p blend.Params) (*blendGeom, error) {
	if err := checkBlendParams(p); err != nil {
		return nil, err
	}
	l, err := blend.NewLayout(tiles, pos)
	if err != nil {
		return nil, err
	}
	return newBlendGeom(l, tiles[0].H, tiles[0].W, p)
}

// blendGeomSize builds the geometry of n tiles of h x w (raw tiles, whose
// sizes the caller checked) with the same position rule as blend.NewLayout:
// rounded half away from zero, in [0, 2^24] px.
func blendGeomSize(n, h, w int, pos []raster.Point, p blend.Params) (*blendGeom, error) {
	if err := checkBlendParams(p); err != nil {
		return nil, err
	}
	if len(pos) != n {
		return nil, fmt.Errorf("blend: %d positions for %d tiles", len(pos), n)
	}
	const maxPos = 1 << 24
	l := blend.Layout{Y: make([]int, n), X: make([]int, n)}
	for i, q := range pos {
		y, x := math.Round(q.Y), math.Round(q.X)
		if !(y >= 0 && y <= maxPos && x >= 0 && x <= maxPos) {
			return nil, fmt.Errorf("blend: tile %d position (%g, %g) is not in [0, %d] px", i, q.Y, q.X, maxPos)
		}
		l.Y[i], l.X[i] = int(y), int(x)
		l.H, l.W = max(l.H, l.Y[i]+h), max(l.W, l.X[i]+w)
	}
	return newBlendGeom(l, h, w, p)
}

func newBlendGeom(l blend.Layout, h, w int, p blend.Params) (*blendGeom, error) {
	n := len(l.Y)
	if n > maxBlendTiles {
		return nil, fmt.Errorf("blend: %d tiles; the GPU blend takes at most %d per plane", n, maxBlendTiles)
	}
	g := &blendGeom{py: make([]int32, n), px: make([]int32, n), outH: l.H, outW: l.W,
		ty: blend.Taper(h, p.Sigma, p.OverlapY), tx: blend.Taper(w, p.Sigma, p.OverlapX)}
	for i := range n {
		g.py[i], g.px[i] = int32(l.Y[i]), int32(l.X[i])
	}
	return g, nil
}

// checkBlendParams is blend.CPU's parameter check.
func checkBlendParams(p blend.Params) error {
	if !(p.Sigma > 0) || math.IsInf(p.Sigma, 0) {
		return fmt.Errorf("blend: sigma %g must be positive and finite", p.Sigma)
	}
	if !(p.OverlapY >= 0 && p.OverlapY < 1) || !(p.OverlapX >= 0 && p.OverlapX < 1) {
		return fmt.Errorf("blend: overlap (%g, %g) not in [0, 1)", p.OverlapY, p.OverlapX)
	}
	return nil
}
