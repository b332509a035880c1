package align

import (
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
//
// Both sides are filtered a row at a time (boxFilter) and the five sums of
// the correlation (as NCC, float64) accumulated as the rows come, so a call
// needs a few rows of memory, not the filtered overlap.
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
	var fa, fb boxFilter
	fa.init(a, y0, x0, oh, ow, k)
	fb.init(b, y0-dy, x0-dx, oh, ow, k)
	var sa, sb, saa, sbb, sab float64
	for range oh - 2*k {
		ra, rb := fa.next(), fb.next()
		rs := rowSums(ra, rb)
		sa += rs[0]
		sb += rs[1]
		saa += rs[2]
		sbb += rs[3]
		sab += rs[4]
	}
	return NCCFromSums(sa, sb, saa, sbb, sab, float64((oh-2*k)*(ow-2*k)))
}

// boxFilter is TextureNCC's high-pass filter of one side: for the (h, w)
// region of a tile at (y0, x0), it yields for the interior pixels (h-2k
// rows of w-2k) the pixel minus the mean of the (2k+1)² box around it,
// which lies inside the region, times (2k+1)²: (2k+1)²·v minus the box sum.
// The factor leaves the correlation unchanged and saves a division and its
// rounding. It yields one row at a time (next) and needs h, w > 2k.
//
// It keeps the box's column sums over the 2k+1 rows around the current row
// and slides them down a row at a time (add the row entering, subtract the
// row leaving), then slides the box sum along the row the same way. The
// sums are float64 of float32 pixels: exact, and so are the outputs, while
// the pixel values of a box span fewer than about 2^28 in magnitude (image
// data); otherwise off by a few float64 roundings per row and column slid
// (relative 1e-13 for 2000-px tiles), far below float32 resolution.
type boxFilter struct {
	t      *raster.Float32
	y0, x0 int
	h, w   int
	k      int
	i      int       // next output row
	col    []float64 // col[j]: sum of column x0+j over rows y0+i .. y0+i+2k
	out    []float64 // the row last returned
}

// init sets f up for the (h, w) region of t at (y0, x0) and box radius k.
func (f *boxFilter) init(t *raster.Float32, y0, x0, h, w, k int) {
	if h <= 2*k || w <= 2*k || y0 < 0 || x0 < 0 || y0+h > t.H || x0+w > t.W {
		panic("align: box filter region outside the tile or too small")
	}
	*f = boxFilter{t: t, y0: y0, x0: x0, h: h, w: w, k: k}
	buf := make([]float64, 2*w-2*k)
	f.col, f.out = buf[:w], buf[w:]
	for r := range 2*k + 1 {
		row := t.Pix[(y0+r)*t.W+x0:][:w]
		for j, v := range row {
			f.col[j] += float64(v)
		}
	}
}

// next returns the next row of filtered values (w-2k of them), valid until
// the following call. It panics after the last row (h-2k in all).
func (f *boxFilter) next() []float64 {
	k, t := f.k, f.t
	if f.i >= f.h-2*k {
		panic("align: box filter read past its last row")
	}
	col := f.col
	if f.i > 0 {
		// slide the column sums down: row y0+i+2k enters, y0+i-1 leaves
		in := t.Pix[(f.y0+f.i+2*k)*t.W+f.x0:][:len(col)]
		out := t.Pix[(f.y0+f.i-1)*t.W+f.x0:][:len(col)]
		for j := range col {
			col[j] += float64(in[j]) - float64(out[j])
		}
	}
	centre := t.Pix[(f.y0+f.i+k)*t.W+f.x0+k:][:len(f.out)]
	area := float64((2*k + 1) * (2*k + 1))
	var s float64
	for _, v := range col[:2*k+1] {
		s += v
	}
	res := f.out
	res[0] = area*float64(centre[0]) - s
	enter := col[2*k+1:][:len(res)-1]
	leave := col[:len(enter)]
	for j := range enter {
		s += enter[j] - leave[j]
		res[j+1] = area*float64(centre[j+1]) - s
	}
	f.i++
	return res
}
