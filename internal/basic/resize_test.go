package basic

import (
	"math"
	"math/rand/v2"
	"testing"
)

// resizeDirect is a straightforward reading of skimage.transform.resize
// (order=1, mode="symmetric", anti_aliasing on when shrinking): a full-size
// separable Gaussian filter (σ = max(0, (f-1)/2), radius int(4σ+0.5),
// half-sample symmetric boundary), then bilinear sampling at
// c = (i+0.5)·f - 0.5 with the same boundary.
func resizeDirect(src []float64, sh, sw, dh, dw int) []float64 {
	refl := func(i, n int) int {
		for i < 0 || i >= n {
			if i < 0 {
				i = -i - 1
			}
			if i >= n {
				i = 2*n - 1 - i
			}
		}
		return i
	}
	gauss := func(f float64) []float64 {
		sigma := (f - 1) / 2
		if f <= 1 || sigma <= 1e-15 {
			return []float64{1}
		}
		r := int(4*sigma + 0.5)
		g := make([]float64, 2*r+1)
		var s float64
		for k := -r; k <= r; k++ {
			g[k+r] = math.Exp(-float64(k*k) / (2 * sigma * sigma))
			s += g[k+r]
		}
		for k := range g {
			g[k] /= s
		}
		return g
	}
	fy, fx := float64(sh)/float64(dh), float64(sw)/float64(dw)
	gy, gx := gauss(fy), gauss(fx)
	ry, rx := len(gy)/2, len(gx)/2
	t := make([]float64, sh*sw)
	for y := range sh {
		for x := range sw {
			var s float64
			for k, g := range gx {
				s += g * src[y*sw+refl(x+k-rx, sw)]
			}
			t[y*sw+x] = s
		}
	}
	f := make([]float64, sh*sw)
	for y := range sh {
		for x := range sw {
			var s float64
			for k, g := range gy {
				s += g * t[refl(y+k-ry, sh)*sw+x]
			}
			f[y*sw+x] = s
		}
	}
	out := make([]float64, dh*dw)
	for i := range dh {
		cy := (float64(i)+0.5)*fy - 0.5
		y0 := int(math.Floor(cy))
		ty := cy - float64(y0)
		for j := range dw {
			cx := (float64(j)+0.5)*fx - 0.5
			x0 := int(math.Floor(cx))
			tx := cx - float64(x0)
			at := func(y, x int) float64 { return f[refl(y, sh)*sw+refl(x, sw)] }
			out[i*dw+j] = (1-ty)*((1-tx)*at(y0, x0)+tx*at(y0, x0+1)) + ty*((1-tx)*at(y0+1, x0)+tx*at(y0+1, x0+1))
		}
	}
	return out
}

// resizeTol: both compute the same weighted sums in a different order.
const resizeTol = 1e-12

func TestResizeMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 3))
	cases := [][4]int{
		{40, 60, 8, 8},     // shrink both (σ 2 and 3.25)
		{128, 171, 32, 32}, // the MATLAB data's aspect
		{9, 7, 20, 31},     // enlarge both (no filter)
		{30, 10, 8, 25},    // shrink y, enlarge x
		{5, 5, 5, 5},       // identity
		{3, 200, 2, 9},     // kernel radius larger than the short axis
		{1, 10, 1, 4},      // single row
	}
	for _, c := range cases {
		sh, sw, dh, dw := c[0], c[1], c[2], c[3]
		src := make([]float64, sh*sw)
		for i := range src {
			src[i] = rng.Float64()
		}
		want := resizeDirect(src, sh, sw, dh, dw)
		got := make([]float64, dh*dw)
		resizePlane(newResizer(sh, sw, dh, dw), got, src)
		worst, at := 0.0, 0
		for i := range got {
			if e := math.Abs(got[i] - want[i]); e > worst {
				worst, at = e, i
			}
		}
		if worst > resizeTol {
			t.Errorf("%dx%d -> %dx%d: worst error %g at (%d,%d)", sh, sw, dh, dw, worst, at/dw, at%dw)
		}
	}
}

func TestResizeIdentityAndConstant(t *testing.T) {
	// Same size: f = 1, no filter, c = i: exact copy.
	src := []float32{1, 2, 3, 4, 5, 6}
	got := make([]float32, 6)
	resizePlane(newResizer(2, 3, 2, 3), got, src)
	for i := range src {
		if got[i] != src[i] {
			t.Fatalf("identity resize changed pixel %d: %g -> %g", i, src[i], got[i])
		}
	}
	// A constant stays constant (weights sum to 1) when shrinking and enlarging.
	for _, c := range [][4]int{{1440, 1920, 128, 128}, {128, 128, 1440, 1920}} {
		src := make([]float32, c[0]*c[1])
		for i := range src {
			src[i] = 0.25
		}
		dst := make([]float64, c[2]*c[3])
		resizePlane(newResizer(c[0], c[1], c[2], c[3]), dst, src)
		for i, v := range dst {
			if math.Abs(v-0.25) > 1e-12 {
				t.Fatalf("%v: constant not preserved at %d: %g", c, i, v)
			}
		}
	}
}
