// Package planestats measures uint16 planes for the QC, exactly: a plane's
// 65536-bin histogram and the integer moments (count, sum, sum of squares)
// of its 4-neighbour Laplacian per block. Every statistic the QC reports
// (mean, percentiles, saturation, focus, the focus map) is derived from
// these integers, so it does not depend on the order in which pixels are
// summed: the GPU engine (internal/gpu, PlaneMeter) computes the same
// integers on the device and the statistics are the same bits as Of's.
package planestats

import (
	"context"
	"math"
	"math/bits"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Bins is the histogram's length: one bin per uint16 value.
const Bins = 65536

// Moments are the Laplacian's integer moments over a block's interior
// pixels: N pixels, S the sum and S2 the sum of squares of
// L = 4 I(y,x) - I(y-1,x) - I(y+1,x) - I(y,x-1) - I(y,x+1), in counts and
// counts^2. |L| <= 262140, so a block of up to 2.6e8 px cannot overflow.
type Moments struct {
	N  int64
	S  int64
	S2 uint64
}

// Variance is the Laplacian's population variance, counts^2 (0 for no
// pixels).
func (m Moments) Variance() float64 {
	if m.N == 0 {
		return 0
	}
	return variance(float64(m.N), float64(m.S), float64(m.S2))
}

func variance(n, s, s2 float64) float64 {
	mean := s / n
	return max(0, s2/n-mean*mean)
}

// Measure is one plane's measure: W x H px, Hist[v] the pixels of value v,
// and Blocks the Laplacian moments of its Block x Block px blocks (edge
// blocks smaller), NY rows of NX, row-major. The Laplacian is that of the
// whole plane at its interior pixels (1 <= y < H-1, 1 <= x < W-1), each
// counted in the block that holds it.
type Measure struct {
	W, H   int
	Block  int
	NX, NY int
	Hist   []uint64
	Blocks []Moments
}

// Grid is the number of blocks per row and per column of a w x h plane cut
// into block x block px blocks (block >= 1).
func Grid(w, h, block int) (nx, ny int) {
	return (w + block - 1) / block, (h + block - 1) / block
}

// New returns an empty measure of a w x h plane in blocks of block px
// (block < 1 counts as 1).
func New(w, h, block int) *Measure {
	block = max(1, block)
	nx, ny := Grid(w, h, block)
	return &Measure{W: w, H: h, Block: block, NX: nx, NY: ny, Hist: make([]uint64, Bins), Blocks: make([]Moments, nx*ny)}
}

// Of measures g in blocks of block px (the CPU reference of the GPU's
// PlaneMeter).
func Of(g *raster.Gray16, block int) *Measure {
	m := New(g.W, g.H, block)
	for _, v := range g.Pix {
		m.Hist[v]++
	}
	if g.W < 3 || g.H < 3 {
		return m
	}
	w, b := g.W, m.Block
	for y := 1; y < g.H-1; y++ {
		up := g.Pix[(y-1)*w : y*w]
		row := g.Pix[y*w : (y+1)*w]
		dn := g.Pix[(y+1)*w : (y+2)*w]
		blocks := m.Blocks[(y/b)*m.NX : (y/b+1)*m.NX]
		for bx := range blocks {
			x0, x1 := max(1, bx*b), min(w-1, (bx+1)*b)
			var n, s int64
			var s2 uint64
			for x := x0; x < x1; x++ {
				l := 4*int64(row[x]) - int64(up[x]) - int64(dn[x]) - int64(row[x-1]) - int64(row[x+1])
				s += l
				s2 += uint64(l * l)
			}
			if x1 > x0 {
				n = int64(x1 - x0)
			}
			blocks[bx].N += n
			blocks[bx].S += s
			blocks[bx].S2 += s2
		}
	}
	return m
}

// Pixels is the plane's pixel count.
func (m *Measure) Pixels() int64 { return int64(m.W) * int64(m.H) }

// Focus is the Laplacian's variance over the whole plane's interior pixels,
// counts^2: the blocks' moments summed exactly (S2 in 128 bits), then
// rounded once. 0 for planes under 3 x 3 px.
func (m *Measure) Focus() float64 {
	var n, s int64
	var hi, lo uint64
	for _, b := range m.Blocks {
		n += b.N
		s += b.S
		var c uint64
		lo, c = bits.Add64(lo, b.S2, 0)
		hi += c
	}
	if n == 0 {
		return 0
	}
	return variance(float64(n), float64(s), float64(hi)*0x1p64+float64(lo))
}

// BlockFocus is each block's Laplacian variance (Moments.Variance),
// row-major.
func (m *Measure) BlockFocus() []float64 {
	f := make([]float64, len(m.Blocks))
	for i, b := range m.Blocks {
		f[i] = b.Variance()
	}
	return f
}

// Percentile is the nearest-rank p-quantile: the smallest value whose
// cumulative count reaches ceil(p * pixels) (at least 1).
func (m *Measure) Percentile(p float64) int {
	rank := max(uint64(math.Ceil(p*float64(m.Pixels()))), 1)
	var cum uint64
	for v, c := range m.Hist {
		if cum += c; cum >= rank {
			return v
		}
	}
	return Bins - 1
}

// MaxInto sets dst to the pixelwise maximum of dst and g over their common
// region.
func MaxInto(dst, g *raster.Gray16) {
	h, w := min(dst.H, g.H), min(dst.W, g.W)
	for y := 0; y < h; y++ {
		d := dst.Pix[y*dst.W : y*dst.W+w]
		s := g.Pix[y*g.W : y*g.W+w]
		for x, v := range s {
			d[x] = max(d[x], v)
		}
	}
}

// Meter measures planes where they are (the GPU engine's PlaneMeter: on
// the device, as they pass through it); the host receives each plane's
// Measure and, at the end, the pixelwise maximum of the planes measured.
type Meter interface {
	MaxProjection(ctx context.Context) (*raster.Gray16, error)
	Free()
}
