package gpu

import (
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
)

// axisWeights builds the sparse weights of one axis of basic's resize
// (skimage resize, order 1, mode "symmetric", Gaussian anti-aliasing with
// σ = (f-1)/2 truncated at int(4σ+0.5) when shrinking by f = in/out), in the
// same order as basic's resize.go so that the sums come out bit-identical:
// output i = Σ_k w[off[i]+k] · in[start[i]+k] for k < cnt[i].
// resizew_test.go checks it against basic.ResizeToWorking and
// basic.ResizeProfile.
func axisWeights(in, out int) (start, cnt, off []int32, w []float64) {
	s, n, o, w := basic.AxisWeights(in, out)
	start, cnt, off = make([]int32, out), make([]int32, out), make([]int32, out)
	for i := range out {
		start[i], cnt[i], off[i] = int32(s[i]), int32(n[i]), int32(o[i])
	}
	return start, cnt, off, w
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
