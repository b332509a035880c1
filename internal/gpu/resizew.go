package gpu

import (
	"fmt"
	"math"
)

// axisWeights builds the sparse weights of one axis of basic's resize
// (skimage resize, order 1, mode "symmetric", Gaussian anti-aliasing with
// σ = (f-1)/2 truncated at int(4σ+0.5) when shrinking by f = in/out), in the
// same order as basic's resize.go so that the sums come out bit-identical:
// output i = Σ_k w[off[i]+k] · in[start[i]+k] for k < cnt[i].
// resizew_test.go checks it against basic.ResizeToWorking and
// basic.ResizeProfile.
func axisWeights(in, out int) (start, cnt, off []int32, w []float64) {
	if in < 1 || out < 1 {
		panic(fmt.Sprintf("gpu: invalid resize %d -> %d", in, out))
	}
	f := float64(in) / float64(out)
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
	start, cnt, off = make([]int32, out), make([]int32, out), make([]int32, out)
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
			j := i0 + b
			for k, gw := range g {
				src := mirror(mirror(j, in)+k-r, in)
				acc[src] += bw * gw
				lo, hi = min(lo, src), max(hi, src)
			}
		}
		start[i], cnt[i], off[i] = int32(lo), int32(hi-lo+1), int32(len(w))
		w = append(w, acc[lo:hi+1]...)
	}
	return start, cnt, off, w
}

// mirror maps an index into [0, n) by half-sample symmetric extension.
func mirror(i, n int) int {
	if n == 1 {
		return 0
	}
	p := 2 * n
	i %= p
	if i < 0 {
		i += p
	}
	if i >= n {
		i = p - 1 - i
	}
	return i
}

// resizeHost applies axis weights on the CPU in the kernels' order (rows
// along y, then columns along x); the test uses it to pin the weights to
// basic's resize without a GPU.
func resizeHost[S float32 | float64](dst []float64, src []S, sh, sw, dh, dw int) {
	ys, yc, yo, yw := axisWeights(sh, dh)
	xs, xc, xo, xw := axisWeights(sw, dw)
	tmp := make([]float64, dh*sw)
	for i := range dh {
		for x := range sw {
			var acc float64
			for k := range int(yc[i]) {
				acc += yw[int(yo[i])+k] * float64(src[(int(ys[i])+k)*sw+x])
			}
			tmp[i*sw+x] = acc
		}
	}
	for i := range dh {
		for j := range dw {
			var acc float64
			for k := range int(xc[j]) {
				acc += xw[int(xo[j])+k] * tmp[i*sw+int(xs[j])+k]
			}
			dst[i*dw+j] = acc
		}
	}
}
