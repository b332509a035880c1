package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// The GPU resize kernels sum the same weights in the same order as
// resizeHost; resizeHost must reproduce basic.ResizeToWorking exactly (the
// GPU fit then starts from bit-identical working data).
func TestAxisWeightsMatchBasicResize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sz := range [][3]int{{3, 144, 192}, {2, 37, 29}, {2, 128, 128}, {2, 90, 300}} {
		st := raster.NewStack(sz[0], sz[1], sz[2])
		for i := range st.Pix {
			st.Pix[i] = rng.Float32()
		}
		const ps = 32
		want := basic.ResizeToWorking(nil, st, ps, 1)
		got := make([]float64, ps*ps)
		worst, at := 0.0, -1
		for j := range st.N {
			resizeHost(got, st.Plane(j), st.H, st.W, ps, ps)
			for i, v := range got {
				if d := abs64(v - want[j*ps*ps+i]); d > worst || at < 0 {
					worst, at = d, j*ps*ps+i
				}
			}
		}
		if worst != 0 {
			t.Errorf("%v: resize differs from basic.ResizeToWorking by %g at %d (want bit-identical)", sz, worst, at)
		}
	}
}

// The profile resize back to full size (float64 working profile to float32).
func TestAxisWeightsMatchResizeProfile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const ps = 16
	src := make([]float64, ps*ps)
	for i := range src {
		src[i] = 0.5 + rng.Float64()
	}
	for _, hw := range [][2]int{{144, 192}, {37, 29}, {16, 16}} {
		want := basic.ResizeProfile(nil, src, ps, hw[0], hw[1])
		got := make([]float64, hw[0]*hw[1])
		resizeHost(got, src, ps, ps, hw[0], hw[1])
		for i, v := range got {
			if float32(v) != want[i] {
				t.Fatalf("%v: pixel %d: %g, basic.ResizeProfile %g (want bit-identical)", hw, i, float32(v), want[i])
			}
		}
	}
}

func abs64(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
