package qc

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// SaturationLevel is the count at and above which a pixel counts as
// saturated: the original's quality gate (pixels >= 64000).
const SaturationLevel = 64000

// PlaneStats are intensity statistics of one uint16 plane, in detector counts.
type PlaneStats struct {
	Z                 int     `json:"z,omitempty"` // 1-based plane number (stitched {z:02d}.tif, deconv_{k:03d}.tif); 0 for a single plane
	File              string  `json:"file"`        // path relative to the project
	Width             int     `json:"width"`       // px
	Height            int     `json:"height"`      // px
	Mean              float64 `json:"mean"`
	Std               float64 `json:"std"` // population standard deviation
	Min               int     `json:"min"`
	Max               int     `json:"max"`
	P01               int     `json:"p01"` // percentiles, nearest rank
	P50               int     `json:"p50"`
	P99               int     `json:"p99"`
	ZeroFraction      float64 `json:"zero_fraction"`      // pixels == 0
	SaturatedFraction float64 `json:"saturated_fraction"` // pixels >= SaturationLevel
	Focus             float64 `json:"focus"`              // Focus(): variance of the 4-neighbour Laplacian, counts^2
}

// Stats computes the statistics of g (exact: a 65536-bin histogram).
func Stats(g *raster.Gray16) PlaneStats {
	var hist [65536]int64
	var sum, sum2 float64
	for _, v := range g.Pix {
		hist[v]++
	}
	n := int64(len(g.Pix))
	s := PlaneStats{Width: g.W, Height: g.H, Min: -1}
	for v, c := range hist {
		if c == 0 {
			continue
		}
		if s.Min < 0 {
			s.Min = v
		}
		s.Max = v
		fv := float64(v)
		sum += fv * float64(c)
		sum2 += fv * fv * float64(c)
	}
	s.Mean = sum / float64(n)
	s.Std = math.Sqrt(max(0, sum2/float64(n)-s.Mean*s.Mean))
	s.P01, s.P50, s.P99 = percentile(&hist, n, 0.01), percentile(&hist, n, 0.5), percentile(&hist, n, 0.99)
	s.ZeroFraction = float64(hist[0]) / float64(n)
	var sat int64
	for v := SaturationLevel; v < len(hist); v++ {
		sat += hist[v]
	}
	s.SaturatedFraction = float64(sat) / float64(n)
	s.Focus = Focus(g)
	return s
}

// percentile returns the nearest-rank p-quantile (smallest value whose
// cumulative count reaches ceil(p*n)).
func percentile(hist *[65536]int64, n int64, p float64) int {
	rank := max(int64(math.Ceil(p*float64(n))), 1)
	var cum int64
	for v, c := range hist {
		cum += c
		if cum >= rank {
			return v
		}
	}
	return len(hist) - 1
}

// Focus is the variance of the 4-neighbour Laplacian
// L = 4 I(y,x) - I(y-1,x) - I(y+1,x) - I(y,x-1) - I(y,x+1) over the interior
// pixels, in counts^2: larger for a sharper image of the same scene (the
// usual variance-of-Laplacian focus measure). 0 for planes under 3 x 3 px.
func Focus(g *raster.Gray16) float64 {
	_, _, m := laplacianMoments(g, 0)
	return m[0].variance()
}

// BlockFocus is Focus per block of block x block px (edge blocks smaller):
// the variance of the same Laplacian over each block's interior pixels (the
// Laplacian of the whole image, so a block's border pixels count too). It
// returns the blocks per row and column and the values, row-major; a block
// without interior pixels is 0.
func BlockFocus(g *raster.Gray16, block int) (nx, ny int, f []float64) {
	nx, ny, m := laplacianMoments(g, max(1, block))
	f = make([]float64, len(m))
	for i := range m {
		f[i] = m[i].variance()
	}
	return nx, ny, f
}

type moments struct{ n, s, s2 float64 }

func (m moments) variance() float64 {
	if m.n == 0 {
		return 0
	}
	mean := m.s / m.n
	return max(0, m.s2/m.n-mean*mean)
}

// laplacianMoments accumulates the Laplacian's count, sum and sum of
// squares over the interior pixels per block (block <= 0: one block).
func laplacianMoments(g *raster.Gray16, block int) (nx, ny int, m []moments) {
	nx, ny = 1, 1
	if block > 0 {
		nx, ny = (g.W+block-1)/block, (g.H+block-1)/block
	}
	m = make([]moments, nx*ny)
	if g.W < 3 || g.H < 3 {
		return nx, ny, m
	}
	w := g.W
	for y := 1; y < g.H-1; y++ {
		row := g.Pix[y*w : (y+1)*w]
		up := g.Pix[(y-1)*w : y*w]
		dn := g.Pix[(y+1)*w : (y+2)*w]
		var mr []moments // this row's blocks
		if block > 0 {
			mr = m[(y/block)*nx : (y/block+1)*nx]
		} else {
			mr = m[:1]
		}
		bx, next := 0, w // block of x and the x where the next block starts
		if block > 0 {
			next = block
		}
		for x := 1; x < w-1; x++ {
			if x >= next {
				bx++
				next += block
			}
			l := 4*float64(row[x]) - float64(up[x]) - float64(dn[x]) - float64(row[x-1]) - float64(row[x+1])
			mr[bx].n++
			mr[bx].s += l
			mr[bx].s2 += l * l
		}
	}
	return nx, ny, m
}

// NCC is the normalised cross-correlation (Pearson correlation) of a and b
// over their common top-left region (min height x min width): 1 for images
// equal up to gain and offset. NaN when either is constant there.
func NCC(a, b *raster.Gray16) float64 {
	h, w := min(a.H, b.H), min(a.W, b.W)
	var sa, sb, saa, sbb, sab float64
	for y := 0; y < h; y++ {
		ra := a.Pix[y*a.W : y*a.W+w]
		rb := b.Pix[y*b.W : y*b.W+w]
		for x := range ra {
			va, vb := float64(ra[x]), float64(rb[x])
			sa += va
			sb += vb
			saa += va * va
			sbb += vb * vb
			sab += va * vb
		}
	}
	n := float64(h * w)
	cov := sab/n - sa/n*sb/n
	va, vb := saa/n-sa/n*sa/n, sbb/n-sb/n*sb/n
	if va <= 0 || vb <= 0 {
		return math.NaN()
	}
	return cov / math.Sqrt(va*vb)
}

// maxInto sets dst to the pixelwise maximum of dst and g over their common
// region.
func maxInto(dst, g *raster.Gray16) {
	h, w := min(dst.H, g.H), min(dst.W, g.W)
	for y := 0; y < h; y++ {
		d := dst.Pix[y*dst.W : y*dst.W+w]
		s := g.Pix[y*g.W : y*g.W+w]
		for x, v := range s {
			if v > d[x] {
				d[x] = v
			}
		}
	}
}
