package qc

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
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

// Stats computes the statistics of g (exact: planestats.Of, in the focus
// map's blocks).
func Stats(g *raster.Gray16) PlaneStats {
	return StatsOf(planestats.Of(g, Block(g.W, g.H)))
}

// StatsOf derives a plane's statistics from its measure (computed on the
// host or on the device: the same integers, the same statistics).
func StatsOf(m *planestats.Measure) PlaneStats {
	n := float64(m.Pixels())
	s := PlaneStats{Width: m.W, Height: m.H, Min: -1}
	var sum, sum2 float64
	for v, c := range m.Hist {
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
	s.Mean = sum / n
	s.Std = math.Sqrt(max(0, sum2/n-s.Mean*s.Mean))
	s.P01, s.P50, s.P99 = m.Percentile(0.01), m.Percentile(0.5), m.Percentile(0.99)
	s.ZeroFraction = float64(m.Hist[0]) / n
	var sat uint64
	for _, c := range m.Hist[SaturationLevel:] {
		sat += c
	}
	s.SaturatedFraction = float64(sat) / n
	s.Focus = m.Focus()
	return s
}

// Focus is the variance of the 4-neighbour Laplacian
// L = 4 I(y,x) - I(y-1,x) - I(y+1,x) - I(y,x-1) - I(y,x+1) over the interior
// pixels, in counts^2: larger for a sharper image of the same scene (the
// usual variance-of-Laplacian focus measure). 0 for planes under 3 x 3 px.
func Focus(g *raster.Gray16) float64 {
	return planestats.Of(g, Block(g.W, g.H)).Focus()
}

// BlockFocus is Focus per block of block x block px (edge blocks smaller):
// the variance of the same Laplacian over each block's interior pixels (the
// Laplacian of the whole image, so a block's border pixels count too). It
// returns the blocks per row and column and the values, row-major; a block
// without interior pixels is 0.
func BlockFocus(g *raster.Gray16, block int) (nx, ny int, f []float64) {
	m := planestats.Of(g, block)
	return m.NX, m.NY, m.BlockFocus()
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
