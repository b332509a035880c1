package align

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TextureRadius is the half-width, px, of the box mean that TextureNCC
// subtracts: a 17x17 box keeps nuclei (sigma about 4.5 px, 20 px across)
// and removes what varies over tens of px or more, such as vignetting left
// by an imperfect flatfield and the soft edge of the tissue.
const TextureRadius = 8

// TextureMin is the TextureNCC above which an overlap counts as sharing
// texture at a translation. On the synthetic CODEX mosaics (tiny presets,
// 280 pairs, raw and flatfield-corrected tiles), overlaps without tissue
// score -0.01 to 0.1 at the true translation (noise, tissue edges) and up
// to 0.1 at the NCC maxima a refinement climbs to on them; overlaps with
// nuclei score 0.5 to 0.999 at the true translation.
const TextureMin = 0.3

// TextureNCC is the NCC of the overlap of a and b at integer translation
// (dy, dx) (as NCC) after removing each side's local mean: every pixel
// minus the mean of the (2·TextureRadius+1)² box around it, over the pixels
// of the overlap whose whole box lies in the overlap (a band of
// TextureRadius px along the overlap's edges only feeds the boxes). Both
// sides are cropped to the same scene region and filtered alike, so a
// correct translation keeps the texture they share; a linear ramp is
// removed exactly (a box clipped at the overlap's edge would leave a
// residual that correlates at every translation).
//
// NCC is high wherever both sides are dominated by one smooth gradient,
// since it is invariant to an offset: a background ramp, a tissue edge or a
// flatfield residual correlates at many translations. Align uses
// TextureNCC to tell an overlap with matching texture from one that merely
// has such a gradient; on a textureless overlap it is noise, near 0. It is
// 0 when the overlap is narrower than 2·TextureRadius+1 px.
func TextureNCC(a, b *raster.Float32, dy, dx int) float64 {
	if a.W != b.W || a.H != b.H {
		panic("align: TextureNCC of tiles of different sizes")
	}
	h, w := a.H, a.W
	y0, y1 := max(0, dy), min(h, h+dy)
	x0, x1 := max(0, dx), min(w, w+dx)
	const k = TextureRadius
	if y1-y0 <= 2*k || x1-x0 <= 2*k {
		return 0
	}
	oh, ow := y1-y0, x1-x0
	ha := highPass(a, y0, x0, oh, ow, k)
	hb := highPass(b, y0-dy, x0-dx, oh, ow, k)
	var sa, sb, saa, sbb, sab float64
	for i, va := range ha {
		vb := hb[i]
		sa += va
		sb += vb
		saa += va * va
		sbb += vb * vb
		sab += va * vb
	}
	n := float64(len(ha))
	va := saa - sa*sa/n
	vb := sbb - sb*sb/n
	if !(va > 0) || !(vb > 0) {
		return 0
	}
	return max(-1, min(1, (sab-sa*sb/n)/math.Sqrt(va*vb)))
}

// highPass returns, for the (h, w) region of t at (y0, x0), the interior
// pixels (h-2k, w-2k) minus the mean of the (2k+1)² box around each, which
// lies inside the region; row-major, from an integral image. It needs
// h, w > 2k.
func highPass(t *raster.Float32, y0, x0, h, w, k int) []float64 {
	s := make([]float64, (h+1)*(w+1)) // s[i][j] = sum of region[:i, :j]
	for i := range h {
		row := t.Pix[(y0+i)*t.W+x0:][:w]
		var acc float64
		for j, v := range row {
			acc += float64(v)
			s[(i+1)*(w+1)+j+1] = s[i*(w+1)+j+1] + acc
		}
	}
	ih, iw := h-2*k, w-2*k
	out := make([]float64, ih*iw)
	area := float64((2*k + 1) * (2*k + 1))
	for i := range ih {
		row := t.Pix[(y0+k+i)*t.W+x0+k:][:iw]
		i0, i1 := i, i+2*k+1
		for j, v := range row {
			j0, j1 := j, j+2*k+1
			sum := s[i1*(w+1)+j1] - s[i0*(w+1)+j1] - s[i1*(w+1)+j0] + s[i0*(w+1)+j0]
			out[i*iw+j] = float64(v) - sum/area
		}
	}
	return out
}
