package edf

import (
	"context"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Wavelet method (method: wavelet), after Forster, Van De Ville, Berent,
// Sage and Unser, "Complex wavelets for extended depth-of-field: a new
// method for the fusion of multichannel microscopy images", Microsc. Res.
// Tech. 65 (2004), as in the EPFL "Extended Depth of Field" plugin:
//
//   - Transform: a stationary (undecimated, "à trous") wavelet transform of
//     every slice with the cubic B-spline scaling filter [1 4 6 4 1]/16
//     dilated by 2^(l-1) at level l (separable, reflect boundary):
//     c_0 = slice, c_l = h_l * c_(l-1), detail d_l = c_(l-1) - c_l, l = 1..L.
//     This is the plugin's real-wavelet (spline) family; the stationary form
//     is shift-invariant, which is what the complex Daubechies wavelets of
//     the paper buy over decimated real wavelets (no shift-variant aliasing
//     in the selection), at the cost of memory (L+1 planes per slice in
//     flight, not kept across z).
//   - Levels L: WaveletLevels, or AutoLevels(W, H) = clamp(floor(log2(min(W,
//     H))) - 3, 1, 5).
//   - Selection: per level and pixel, the slice whose detail coefficient has
//     the largest magnitude (first on ties).
//   - Consistency check: a 5 x 5 majority filter (mode; ties keep the centre
//     if it is among the most frequent, else the smallest slice index) on
//     every level's selection map, the paper's spatial consistency step
//     (the plugin's "majority filter", window 5).
//   - Synthesis: the composite is the z-mean of the coarse residuals c_L
//     plus the selected detail coefficients of every level, rounded to
//     counts and clipped to 0..65535 (the paper keeps the residual by
//     averaging as well).
//   - Height map (Result.Index): per pixel the slice with the largest
//     detail energy sum_l d_l², majority-filtered (5 x 5) as above.
//
// Memory: two slice transforms in flight (3 float32 planes), and per level
// a float32 best magnitude and a uint16 selection, plus a float64 residual
// sum and composite: about (6 + 6L) bytes per pixel beyond the input.

// MaxWaveletLevels bounds edf.wavelet_levels.
const MaxWaveletLevels = 8

// MajorityWindow is the consistency filter's window (px).
const MajorityWindow = 5

// AutoLevels is the automatic number of wavelet levels for a W x H plane.
func AutoLevels(w, h int) int {
	l := int(math.Floor(math.Log2(float64(min(w, h))))) - 3
	return max(1, min(5, l))
}

// b3 is the cubic B-spline filter's half kernel (centre, ±1, ±2 taps).
var b3 = [3]float64{6.0 / 16, 4.0 / 16, 1.0 / 16}

// atrous smooths src (w x h, float32) with the dilated B3 filter (step px
// between taps), y pass then x pass, into dst; tmp is a w*h scratch plane.
func atrous(dst, src, tmp []float32, w, h, step int) {
	for y := range h {
		c := src[y*w:][:w]
		u1, d1 := src[Reflect(y-step, h)*w:][:w], src[Reflect(y+step, h)*w:][:w]
		u2, d2 := src[Reflect(y-2*step, h)*w:][:w], src[Reflect(y+2*step, h)*w:][:w]
		o := tmp[y*w:][:w]
		for x := range o {
			acc := float64(c[x]) * b3[0]
			acc += float64((float64(u2[x]) + float64(d2[x])) * b3[2])
			acc += float64((float64(u1[x]) + float64(d1[x])) * b3[1])
			o[x] = float32(acc)
		}
	}
	for y := range h {
		r := tmp[y*w:][:w]
		o := dst[y*w:][:w]
		for x := range o {
			acc := float64(r[x]) * b3[0]
			acc += float64((float64(r[Reflect(x-2*step, w)]) + float64(r[Reflect(x+2*step, w)])) * b3[2])
			acc += float64((float64(r[Reflect(x-step, w)]) + float64(r[Reflect(x+step, w)])) * b3[1])
			o[x] = float32(acc)
		}
	}
}

// transform calls fn(l, prev, next) for l = 1..L with prev = c_(l-1) and
// next = c_l (details are prev - next); after it, bufs[0] holds c_L.
func transform(pl *raster.Gray16, levels int, bufs *[3][]float32, fn func(l int, prev, next []float32)) {
	w, h := pl.W, pl.H
	prev, next, tmp := bufs[0], bufs[1], bufs[2]
	for i, v := range pl.Pix {
		prev[i] = float32(v)
	}
	for l := 1; l <= levels; l++ {
		atrous(next, prev, tmp, w, h, 1<<(l-1))
		fn(l, prev, next)
		prev, next = next, prev
	}
	bufs[0], bufs[1] = prev, next
}

func (c CPU) wavelet(ctx context.Context, planes []*raster.Gray16, p Params) (*Result, error) {
	w, h := planes[0].W, planes[0].H
	n := w * h
	L := p.WaveletLevels
	if L == 0 {
		L = AutoLevels(w, h)
	}
	bestAbs := make([][]float32, L)
	sel := make([][]uint16, L)
	for l := range L {
		bestAbs[l] = make([]float32, n)
		sel[l] = make([]uint16, n)
		for i := range bestAbs[l] {
			bestAbs[l][i] = -1
		}
	}
	energy := make([]float64, n)
	bestE := make([]float64, n)
	for i := range bestE {
		bestE[i] = -1
	}
	height := make([]uint16, n)
	low := make([]float64, n)
	var bufs [3][]float32
	for i := range bufs {
		bufs[i] = make([]float32, n)
	}
	chunks := max(1, min(c.Workers, h))
	parPix := func(fn func(lo, hi int)) error {
		return par.ForEach(ctx, chunks, c.Workers, func(ci int) error {
			fn(ci*n/chunks, (ci+1)*n/chunks)
			return nil
		})
	}
	// Pass 1: selections per level, energy argmax, residual sum.
	for k, pl := range planes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i := range energy {
			energy[i] = 0
		}
		transform(pl, L, &bufs, func(l int, prev, next []float32) {
			ba, sl := bestAbs[l-1], sel[l-1]
			_ = parPix(func(lo, hi int) {
				for i := lo; i < hi; i++ {
					d := prev[i] - next[i]
					a := float32(math.Abs(float64(d)))
					if a > ba[i] {
						ba[i], sl[i] = a, uint16(k)
					}
					energy[i] += float64(float64(d) * float64(d))
				}
			})
		})
		cl := bufs[0]
		for i := range n {
			low[i] += float64(cl[i])
			if energy[i] > bestE[i] {
				bestE[i], height[i] = energy[i], uint16(k)
			}
		}
	}
	// Consistency: majority filter on every selection map and on the height map.
	for l := range L {
		sel[l] = majority(sel[l], w, h, len(planes))
	}
	height = majority(height, w, h, len(planes))
	// Pass 2: synthesis from the selected coefficients.
	comp := low
	inv := 1 / float64(len(planes))
	for i := range comp {
		comp[i] *= inv
	}
	for k, pl := range planes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		transform(pl, L, &bufs, func(l int, prev, next []float32) {
			sl := sel[l-1]
			_ = parPix(func(lo, hi int) {
				for i := lo; i < hi; i++ {
					if int(sl[i]) == k {
						comp[i] += float64(prev[i] - next[i])
					}
				}
			})
		})
	}
	out := raster.NewGray16(w, h)
	for i, v := range comp {
		r := math.Round(v)
		switch {
		case !(r > 0):
			out.Pix[i] = 0
		case r >= 65535:
			out.Pix[i] = 65535
		default:
			out.Pix[i] = uint16(r)
		}
	}
	return &Result{Out: out, Index: height}, nil
}

// majority returns the 5 x 5 mode filter of a selection map (values < n),
// reflect boundary; ties keep the centre value if it is among the most
// frequent, else the smallest value.
func majority(src []uint16, w, h, n int) []uint16 {
	dst := make([]uint16, len(src))
	r := MajorityWindow / 2
	cnt := make([]int32, n)
	var vals [MajorityWindow * MajorityWindow]uint16
	for y := range h {
		for x := range w {
			k := 0
			for dy := -r; dy <= r; dy++ {
				row := src[Reflect(y+dy, h)*w:]
				for dx := -r; dx <= r; dx++ {
					v := row[Reflect(x+dx, w)]
					vals[k] = v
					cnt[v]++
					k++
				}
			}
			centre := src[y*w+x]
			var bc int32
			for _, v := range vals[:k] {
				bc = max(bc, cnt[v])
			}
			best := centre
			if cnt[centre] < bc {
				best = math.MaxUint16
				for _, v := range vals[:k] {
					if cnt[v] == bc && v < best {
						best = v
					}
				}
			}
			for _, v := range vals[:k] {
				cnt[v] = 0
			}
			dst[y*w+x] = best
		}
	}
	return dst
}
