package blend

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TaperFloor is the smallest taper value. Far from the overlap a tile's
// taper decays like exp(-d/sigma); for small sigma it would underflow to 0
// and a pixel covered only by that tile would get no weight at all. With the
// floor, t_y·t_x >= 1e-24, positive even in float32 after multiplying by a
// dim pixel. It changes nothing at the default sigma (15 px: the smallest
// taper of a 1920 px tile at 30 % overlap is 4.7e-9) and, elsewhere, only
// pixels where another tile outweighs it by 1e12.
const TaperFloor = 1e-12

// Taper returns the 1-D sigmoid taper of a tile axis of n px:
// t(i) = 1/(1+exp((d - n(1-overlap)/2)/sigma)), d = |i - (n-1)/2|, floored
// at TaperFloor. (n-1)/2 is the original's median(0..n-1).
func Taper(n int, sigma, overlap float64) []float64 {
	t := make([]float64, n)
	c := float64(n-1) / 2
	half := float64(n) * (1 - overlap) / 2
	for i := range t {
		d := math.Abs(float64(i) - c)
		t[i] = max(TaperFloor, 1/(1+math.Exp((d-half)/sigma)))
	}
	return t
}

// Layout is the integer placement of tiles on the mosaic: positions
// rounded to the nearest pixel (half away from zero, as math.Round and C's
// round) and the mosaic size (max Y + H, max X + W).
type Layout struct {
	Y, X []int
	H, W int // mosaic size
}

// NewLayout checks tiles and positions (same count, one tile size,
// finite positions that round to >= 0) and returns their layout.
func NewLayout(tiles []*raster.Float32, pos []raster.Point) (Layout, error) {
	if len(tiles) == 0 {
		return Layout{}, fmt.Errorf("blend: no tiles")
	}
	if len(pos) != len(tiles) {
		return Layout{}, fmt.Errorf("blend: %d positions for %d tiles", len(pos), len(tiles))
	}
	th, tw := 0, 0
	for i, t := range tiles {
		if t == nil || t.W <= 0 || t.H <= 0 || len(t.Pix) != t.W*t.H {
			return Layout{}, fmt.Errorf("blend: tile %d is empty or malformed", i)
		}
		if i == 0 {
			th, tw = t.H, t.W
		} else if t.H != th || t.W != tw {
			return Layout{}, fmt.Errorf("blend: tile %d is %dx%d, tile 0 is %dx%d", i, t.W, t.H, tw, th)
		}
	}
	const maxPos = 1 << 24 // 16.7 M px: a mosaic this wide is a unit error
	l := Layout{Y: make([]int, len(pos)), X: make([]int, len(pos))}
	for i, q := range pos {
		y, x := math.Round(q.Y), math.Round(q.X)
		if !(y >= 0 && y <= maxPos && x >= 0 && x <= maxPos) {
			return Layout{}, fmt.Errorf("blend: tile %d position (%g, %g) is not in [0, %d] px", i, q.Y, q.X, maxPos)
		}
		l.Y[i], l.X[i] = int(y), int(x)
		l.H, l.W = max(l.H, l.Y[i]+th), max(l.W, l.X[i]+tw)
	}
	return l, nil
}

func checkParams(p Params) error {
	if !(p.Sigma > 0) || math.IsInf(p.Sigma, 0) {
		return fmt.Errorf("blend: sigma %g must be positive and finite", p.Sigma)
	}
	if !(p.OverlapY >= 0 && p.OverlapY < 1) || !(p.OverlapX >= 0 && p.OverlapX < 1) {
		return fmt.Errorf("blend: overlap (%g, %g) not in [0, 1)", p.OverlapY, p.OverlapX)
	}
	return nil
}

// bandRows is the height of the mosaic row bands handed to workers.
const bandRows = 32

// CPU is the reference Blender. Each mosaic pixel is
// sum_i tile_i·w_i / sum_i w_i over the tiles covering it, with
// w_i = Taper_y(y - Y_i)·Taper_x(x - X_i); pixels no tile covers are 0.
//
// Fix of the original: it divides by sum(w) + 1e-10. At the default sigma
// the weights near the outer border of the mosaic are far below 1e-10
// (down to 2.6e-15 at a 1440x1920 tile's corner), so the original darkens
// the mosaic's border and turns its corners black. Here the division is
// exact and uncovered pixels are set to 0 explicitly.
//
// Sums are accumulated in float64: weights span 1e-24..1, and float64
// keeps the ratio exact to far below float32 output resolution without any
// ordering care; the accumulators are two rows of the mosaic per worker, so
// the precision costs no memory. The mosaic is split into bands of 32 rows;
// each band is written by exactly one of Workers goroutines (<= 0:
// GOMAXPROCS), so no locks are needed and the result does not depend on
// Workers.
type CPU struct {
	Workers int
}

// Blend implements Blender.
func (c CPU) Blend(ctx context.Context, tiles []*raster.Float32, pos []raster.Point, p Params) (*raster.Float32, error) {
	if err := checkParams(p); err != nil {
		return nil, err
	}
	l, err := NewLayout(tiles, pos)
	if err != nil {
		return nil, err
	}
	th, tw := tiles[0].H, tiles[0].W
	ty := Taper(th, p.Sigma, p.OverlapY)
	tx := Taper(tw, p.Sigma, p.OverlapX)
	out := raster.NewFloat32(l.W, l.H)
	nb := (l.H + bandRows - 1) / bandRows
	workers := c.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, nb)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			num := make([]float64, l.W)
			den := make([]float64, l.W)
			var cover []int
			for {
				b := int(next.Add(1) - 1)
				if b >= nb || ctx.Err() != nil {
					return
				}
				y0, y1 := b*bandRows, min(l.H, (b+1)*bandRows)
				cover = cover[:0]
				for i := range tiles {
					if l.Y[i] < y1 && l.Y[i]+th > y0 {
						cover = append(cover, i)
					}
				}
				for y := y0; y < y1; y++ {
					for _, i := range cover {
						ly := y - l.Y[i]
						if ly < 0 || ly >= th {
							continue
						}
						wy := ty[ly]
						src := tiles[i].Pix[ly*tw : (ly+1)*tw]
						n := num[l.X[i] : l.X[i]+tw]
						d := den[l.X[i] : l.X[i]+tw]
						for x, v := range src {
							w := wy * tx[x]
							n[x] += w * float64(v)
							d[x] += w
						}
					}
					row := out.Pix[y*l.W : (y+1)*l.W]
					for x := range row {
						if den[x] > 0 {
							row[x] = float32(num[x] / den[x])
						}
						num[x], den[x] = 0, 0
					}
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blend: %w", err)
	}
	return out, nil
}
