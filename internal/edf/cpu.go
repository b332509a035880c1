package edf

import (
	"context"
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// DefaultStripRows is the CPU reference's strip height, rows.
const DefaultStripRows = 64

// CPU is the reference Fuser. It processes the plane in horizontal strips
// of StripRows rows (with halos) on Workers goroutines; its memory beyond
// the input planes is a few float32 rows per strip in flight, a float64
// best-variance value and a uint16 index per pixel.
type CPU struct {
	Workers   int // goroutines; < 1 means 1
	StripRows int // rows per strip; 0 = DefaultStripRows
}

// Name implements Fuser.
func (c CPU) Name() string { return fmt.Sprintf("cpu (%d workers)", max(1, c.Workers)) }

// EDF implements Fuser.
func (c CPU) EDF(ctx context.Context, planes []*raster.Gray16, g Gate, p Params) (*Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPlanes(planes); err != nil {
		return nil, err
	}
	stats := make([]SliceStats, len(planes))
	if err := par.ForEach(ctx, len(planes), c.Workers, func(i int) error {
		stats[i] = StatsOf(planes[i].Pix)
		return nil
	}); err != nil {
		return nil, err
	}
	used, err := Select(stats, g)
	if err != nil {
		return nil, err
	}
	sel := make([]*raster.Gray16, len(used))
	for i, k := range used {
		sel[i] = planes[k]
	}
	var res *Result
	switch p.Method {
	case MethodWavelet:
		res, err = c.wavelet(ctx, sel, p)
	default:
		res, err = c.variance(ctx, sel, p)
	}
	if err != nil {
		return nil, err
	}
	for i, k := range res.Index { // relative to the used slices -> planes
		res.Index[i] = uint16(used[k])
	}
	res.Stats, res.Used = stats, used
	return res, nil
}

func (c CPU) strips(h int) (rows, n int) {
	rows = c.StripRows
	if rows <= 0 {
		rows = DefaultStripRows
	}
	return rows, (h + rows - 1) / rows
}

// variance is the variance method on the selected slices; Index is
// relative to them.
func (c CPU) variance(ctx context.Context, planes []*raster.Gray16, p Params) (*Result, error) {
	w, h := planes[0].W, planes[0].H
	wg := GaussWeights(p.Sigma)
	idx := make([]uint16, w*h)
	rows, ns := c.strips(h)
	// Pass 1: running argmax of the variance over z, strip by strip.
	err := par.ForEach(ctx, ns, c.Workers, func(si int) error {
		y0, y1 := si*rows, min(h, (si+1)*rows)
		a, b := max(0, y0-p.RadiusY), min(h, y1+p.RadiusY)
		tmp := make([]float32, (b-a)*w)
		s := make([]float32, (b-a)*w)
		acc := make([]float64, w)
		pad := make([]float32, w+2*(len(wg)-1))
		best := make([]float64, (y1-y0)*w)
		for i := range best {
			best[i] = math.Inf(-1)
		}
		xs := reflectTable(w, p.RadiusX)
		for k, pl := range planes {
			if err := ctx.Err(); err != nil {
				return err
			}
			GaussY(tmp, pl.Pix, w, h, a, b, wg, acc)
			for r := 0; r < b-a; r++ {
				GaussX(s[r*w:(r+1)*w], tmp[r*w:(r+1)*w], wg, pad)
			}
			for y := y0; y < y1; y++ {
				bo := (y - y0) * w
				for x := 0; x < w; x++ {
					v := WindowVar(s, w, h, a, y, x, p.RadiusY, p.RadiusX, xs)
					if v > best[bo+x] {
						best[bo+x] = v
						idx[y*w+x] = uint16(k)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := raster.NewGray16(w, h)
	final := make([]uint16, w*h)
	// Pass 2: index smoothing and gather, strip by strip (reads idx, writes final).
	err = par.ForEach(ctx, ns, c.Workers, func(si int) error {
		y0, y1 := si*rows, min(h, (si+1)*rows)
		smoothIndexRows(final[y0*w:y1*w], idx, w, h, y0, y1, len(planes), p.ZSmoothSigma)
		for i := y0 * w; i < y1*w; i++ {
			out.Pix[i] = planes[final[i]].Pix[i]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Result{Out: out, Index: final}, nil
}

// smoothIndexRows writes rows [y0, y1) of the smoothed index map into dst
// ((y1-y0)*w values): the Gaussian (sigma, reflect, y pass then x pass,
// float32) of idx, rounded half to even and clipped to [0, n-1]; sigma 0
// copies idx.
func smoothIndexRows(dst, idx []uint16, w, h, y0, y1, n int, sigma float64) {
	if !(sigma > 0) {
		copy(dst, idx[y0*w:y1*w])
		return
	}
	wg := GaussWeights(sigma)
	tmp := make([]float32, (y1-y0)*w)
	acc := make([]float64, w)
	pad := make([]float32, w+2*(len(wg)-1))
	row := make([]float32, w)
	GaussY(tmp, idx, w, h, y0, y1, wg, acc)
	for r := 0; r < y1-y0; r++ {
		GaussX(row, tmp[r*w:(r+1)*w], wg, pad)
		for x, v := range row {
			dst[r*w+x] = RoundIndex(v, n)
		}
	}
}

// GaussY is the y pass of the separable Gaussian with half kernel w
// (GaussWeights) and reflect boundary: for rows r in [r0, r1) of the w x h
// plane src, dst[(r-r0)*W+x] = float32(src[r][x]·w[0] + sum over j = R..1 of
// (src[r-j][x] + src[r+j][x])·w[j]), accumulated in float64 in that order
// (scipy's correlate1d). acc holds at least W values.
func GaussY[T uint16 | float32](dst []float32, src []T, W, H, r0, r1 int, w []float64, acc []float64) {
	R := len(w) - 1
	acc = acc[:W]
	for r := r0; r < r1; r++ {
		c := src[r*W : (r+1)*W]
		w0 := w[0]
		for x := range acc {
			acc[x] = float64(c[x]) * w0
		}
		for j := R; j >= 1; j-- {
			up := src[Reflect(r-j, H)*W:][:W]
			dn := src[Reflect(r+j, H)*W:][:W]
			wj := w[j]
			for x := range acc {
				acc[x] += float64((float64(up[x]) + float64(dn[x])) * wj)
			}
		}
		out := dst[(r-r0)*W:][:W]
		for x, v := range acc {
			out[x] = float32(v)
		}
	}
}

// GaussX is the x pass on one row: dst[x] = float32(src[x]·w[0] + sum over
// j = R..1 of (src[x-j] + src[x+j])·w[j]) in float64, reflect boundary.
// pad holds at least len(src)+2R values.
func GaussX(dst, src []float32, w []float64, pad []float32) {
	R := len(w) - 1
	n := len(src)
	pad = pad[:n+2*R]
	for i := range pad {
		pad[i] = src[Reflect(i-R, n)]
	}
	w0 := w[0]
	for x := range n {
		c := x + R
		acc := float64(pad[c]) * w0
		for j := R; j >= 1; j-- {
			acc += float64((float64(pad[c-j]) + float64(pad[c+j])) * w[j])
		}
		dst[x] = float32(acc)
	}
}

// reflectTable returns Reflect(x, w) for x = -r .. w-1+r at index x+r.
func reflectTable(w, r int) []int32 {
	t := make([]int32, w+2*r)
	for i := range t {
		t[i] = int32(Reflect(i-r, w))
	}
	return t
}

// WindowVar is the focus measure at (y, x): the variance of s over the
// (2ry+1) x (2rx+1) window with reflect boundary, in float64, centred:
// m = sum(s)/N, var = sum((s - m)²)/N, both sums in row-major window order.
// s holds rows [a, ...) of the w x h plane (row r at (r-a)*w); xs is
// reflectTable(w, rx).
func WindowVar(s []float32, w, h, a, y, x, ry, rx int, xs []int32) float64 {
	n := float64((2*ry + 1) * (2*rx + 1))
	var sum float64
	for dy := -ry; dy <= ry; dy++ {
		row := s[(Reflect(y+dy, h)-a)*w:]
		for dx := 0; dx <= 2*rx; dx++ {
			sum += float64(row[xs[x+dx]])
		}
	}
	m := sum / n
	var acc float64
	for dy := -ry; dy <= ry; dy++ {
		row := s[(Reflect(y+dy, h)-a)*w:]
		for dx := 0; dx <= 2*rx; dx++ {
			d := float64(row[xs[x+dx]]) - m
			acc += float64(d * d)
		}
	}
	return acc / n
}
