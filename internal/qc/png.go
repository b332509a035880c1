package qc

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"sort"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Downsample returns the block means of g over f x f blocks (edge blocks
// average their pixels inside g), as float64 counts, row-major, and the
// output size. f is the smallest factor that brings the longest side to at
// most maxSide px.
func Downsample(g *raster.Gray16, maxSide int) (pix []float64, w, h, f int) {
	f = max(1, (max(g.W, g.H)+maxSide-1)/maxSide)
	w, h = (g.W+f-1)/f, (g.H+f-1)/f
	sum := make([]float64, w*h)
	cnt := make([]int32, w*h)
	for y := 0; y < g.H; y++ {
		oy := (y / f) * w
		row := g.Pix[y*g.W : (y+1)*g.W]
		for x, v := range row {
			sum[oy+x/f] += float64(v)
			cnt[oy+x/f]++
		}
	}
	for i := range sum {
		sum[i] /= float64(cnt[i])
	}
	return sum, w, h, f
}

// stretch maps v to 0..255 linearly between the 0.5 and 99.5 percentiles of
// vals (a display stretch; black and white clip).
func stretch(vals []float64) func(float64) uint8 {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	lo, hi := s[int(0.005*float64(len(s)-1))], s[int(math.Ceil(0.995*float64(len(s)-1)))]
	if hi <= lo {
		hi = lo + 1
	}
	return func(v float64) uint8 {
		return uint8(math.Round(255 * min(1, max(0, (v-lo)/(hi-lo)))))
	}
}

// Overview is a downsampled, contrast-stretched 8-bit view of g whose longest
// side is at most maxSide px; f is the downsampling factor.
func Overview(g *raster.Gray16, maxSide int) (img *image.Gray, f int) {
	pix, w, h, f := Downsample(g, maxSide)
	m := stretch(pix)
	img = image.NewGray(image.Rect(0, 0, w, h))
	for i, v := range pix {
		img.Pix[i] = m(v)
	}
	return img, f
}

// Overlay shows ref in magenta and mov in green over their common region,
// downsampled to at most maxSide px: aligned structures turn white/grey,
// misaligned ones show as separate magenta and green.
func Overlay(ref, mov *raster.Gray16, maxSide int) *image.RGBA {
	h, w := min(ref.H, mov.H), min(ref.W, mov.W)
	crop := func(g *raster.Gray16) *raster.Gray16 {
		c := raster.NewGray16(w, h)
		for y := 0; y < h; y++ {
			copy(c.Pix[y*w:(y+1)*w], g.Pix[y*g.W:y*g.W+w])
		}
		return c
	}
	a, ow, oh, _ := Downsample(crop(ref), maxSide)
	b, _, _, _ := Downsample(crop(mov), maxSide)
	ma, mb := stretch(a), stretch(b)
	img := image.NewRGBA(image.Rect(0, 0, ow, oh))
	for i := range a {
		r, g := ma(a[i]), mb(b[i])
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = r, g, r, 255
	}
	return img
}

// HeatmapCell is the size of one heatmap cell in px.
const HeatmapCell = 16

// viridisAnchors approximate the viridis colour map at 0, 0.25, 0.5, 0.75, 1.
var viridisAnchors = [5][3]float64{{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}

// Colormap maps t in [0, 1] to a viridis-like colour (dark blue to yellow);
// NaN maps to mid grey.
func Colormap(t float64) color.RGBA {
	if math.IsNaN(t) {
		return color.RGBA{128, 128, 128, 255}
	}
	t = min(1, max(0, t)) * 4
	i := min(int(t), 3)
	u := t - float64(i)
	var c [3]uint8
	for k := range c {
		c[k] = uint8(math.Round(viridisAnchors[i][k]*(1-u) + viridisAnchors[i+1][k]*u))
	}
	return color.RGBA{c[0], c[1], c[2], 255}
}

// DrawHeatmap draws values (rows x cols) as cells of HeatmapCell px, coloured
// by Colormap between the finite minimum and maximum (a constant matrix is
// mid-scale); the scale is returned with the image.
func DrawHeatmap(values [][]float64) (img *image.RGBA, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	cols := 0
	for _, r := range values {
		cols = max(cols, len(r))
		for _, v := range r {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	img = image.NewRGBA(image.Rect(0, 0, max(cols, 1)*HeatmapCell, max(len(values), 1)*HeatmapCell))
	for y, r := range values {
		for x := 0; x < cols; x++ {
			v := math.NaN()
			if x < len(r) {
				v = r[x]
			}
			t := 0.5
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				t = math.NaN()
			case hi > lo:
				t = (v - lo) / (hi - lo)
			}
			c := Colormap(t)
			for yy := y * HeatmapCell; yy < (y+1)*HeatmapCell; yy++ {
				for xx := x * HeatmapCell; xx < (x+1)*HeatmapCell; xx++ {
					img.SetRGBA(xx, yy, c)
				}
			}
		}
	}
	return img, lo, hi
}

// writePNG encodes img atomically at path.
func writePNG(path string, img image.Image) error {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, b.Bytes(), 0o666)
}
