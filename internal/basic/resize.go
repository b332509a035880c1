package basic

import (
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// This file reproduces skimage.transform.resize(order=1, mode="symmetric",
// anti_aliasing=default) for one 2-D plane, which is what the original
// pipeline used for the working-size images and for the profiles:
//   - when an axis shrinks by factor f = in/out > 1, the plane is first
//     smoothed along it with a Gaussian of σ = (f-1)/2, truncated at
//     radius int(4σ + 0.5), half-sample symmetric boundary (scipy "reflect");
//   - then it is sampled bilinearly at the pixel centres of the output grid,
//     input coordinate c = (i + 0.5)·f - 0.5, with the same boundary.
// Both steps are linear and separable, so each axis becomes one sparse
// (out x in) weight matrix, applied as rows then columns.

// axisKernel holds the combined Gaussian+bilinear weights of one axis:
// output i = Σ_k w[off[i]+k] · in[start[i]+k] for k < n[i].
type axisKernel struct {
	in, out int
	start   []int
	n       []int
	off     []int
	w       []float64
}

// AxisWeights returns the sparse weights of one axis of the resize from in
// to out samples: output i = sum over k < n[i] of w[off[i]+k] * input[start[i]+k].
// A GPU implementation applies them to reproduce this resize exactly.
func AxisWeights(in, out int) (start, n, off []int, w []float64) {
	k := newAxisKernel(in, out)
	return k.start, k.n, k.off, k.w
}

// newAxisKernel builds the weights for resampling an axis of length in to
// length out.
func newAxisKernel(in, out int) *axisKernel {
	if in < 1 || out < 1 {
		panic(fmt.Sprintf("basic: invalid resize %d -> %d", in, out))
	}
	f := float64(in) / float64(out)
	// Gaussian prefilter taps (identity when not shrinking).
	g := []float64{1}
	if sigma := math.Max(0, (f-1)/2); f > 1 && sigma > 1e-15 {
		r := int(4*sigma + 0.5)
		g = make([]float64, 2*r+1)
		var s float64
		for k := -r; k <= r; k++ {
			v := math.Exp(-0.5 * float64(k*k) / (sigma * sigma))
			g[k+r] = v
			s += v
		}
		for k := range g {
			g[k] /= s
		}
	}
	r := len(g) / 2
	k := &axisKernel{in: in, out: out, start: make([]int, out), n: make([]int, out), off: make([]int, out)}
	acc := make([]float64, in)
	for i := range out {
		c := (float64(i)+0.5)*f - 0.5
		i0 := int(math.Floor(c))
		t := c - float64(i0)
		clear(acc)
		lo, hi := in, -1
		for b, bw := range [2]float64{1 - t, t} {
			if bw == 0 {
				continue
			}
			j := i0 + b // index into the filtered signal
			for m, gw := range g {
				src := raster.Mirror(raster.Mirror(j, in)+m-r, in)
				acc[src] += bw * gw
				lo, hi = min(lo, src), max(hi, src)
			}
		}
		k.start[i] = lo
		k.n[i] = hi - lo + 1
		k.off[i] = len(k.w)
		k.w = append(k.w, acc[lo:hi+1]...)
	}
	return k
}

// resizer resizes (sh, sw) planes to (dh, dw); it keeps scratch memory and
// is not safe for concurrent use.
type resizer struct {
	ky, kx *axisKernel
	tmp    []float64 // dh x sw
}

func newResizer(sh, sw, dh, dw int) *resizer {
	return &resizer{ky: newAxisKernel(sh, dh), kx: newAxisKernel(sw, dw), tmp: make([]float64, dh*sw)}
}

// resizePlane resizes src (sh x sw, row-major) into dst (dh x dw) with the
// resizer's kernels.
func resizePlane[S, D float32 | float64](r *resizer, dst []D, src []S) {
	sw, dh, dw := r.kx.in, r.ky.out, r.kx.out
	if len(src) != r.ky.in*sw || len(dst) != dh*dw {
		panic(fmt.Sprintf("basic: resize size mismatch: src %d, dst %d", len(src), len(dst)))
	}
	ky, kx := r.ky, r.kx
	// Along y: tmp row i = Σ_k w_k · src row (start+k).
	for i := range dh {
		trow := r.tmp[i*sw : (i+1)*sw]
		clear(trow)
		w := ky.w[ky.off[i] : ky.off[i]+ky.n[i]]
		for k, wk := range w {
			y := ky.start[i] + k
			srow := src[y*sw : (y+1)*sw]
			for x, v := range srow {
				trow[x] += wk * float64(v)
			}
		}
	}
	// Along x: dot products over each output pixel's span.
	for i := range dh {
		trow := r.tmp[i*sw : (i+1)*sw]
		drow := dst[i*dw : (i+1)*dw]
		for j := range dw {
			w := kx.w[kx.off[j] : kx.off[j]+kx.n[j]]
			seg := trow[kx.start[j] : kx.start[j]+len(w)]
			var s float64
			for k, wk := range w {
				s += wk * seg[k]
			}
			drow[j] = D(s)
		}
	}
}
