package blend_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend/blendtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

func TestCPUConformance(t *testing.T) {
	blendtest.Run(t, blend.CPU{Workers: 2})
}

func TestTaper(t *testing.T) {
	// n = 5, overlap 0.2, sigma 1: half-length n(1-ov)/2 = 2, d = |i - 2|
	// t = 1/(1+exp(d-2)): i=0,4: 0.5; i=1,3: 1/(1+e^-1); i=2: 1/(1+e^-2)
	got := blend.Taper(5, 1, 0.2)
	want := []float64{0.5, 1 / (1 + math.Exp(-1)), 1 / (1 + math.Exp(-2)), 1 / (1 + math.Exp(-1)), 0.5}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-15 {
			t.Errorf("Taper[%d] = %.17g, want %.17g", i, got[i], want[i])
		}
	}
	// underflow is floored
	if v := blend.Taper(2000, 0.5, 0.3)[0]; v != blend.TaperFloor {
		t.Errorf("edge of a sharp taper = %g, want the floor %g", v, blend.TaperFloor)
	}
}

// TestWorkersIndependent: bands are disjoint, so the mosaic is bitwise the
// same for any number of workers.
func TestWorkersIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	var tiles []*raster.Float32
	var pos []raster.Point
	for r := range 3 {
		for c := range 3 {
			tl := raster.NewFloat32(50, 70)
			for i := range tl.Pix {
				tl.Pix[i] = float32(rng.Float64())
			}
			tiles = append(tiles, tl)
			pos = append(pos, raster.Point{Y: float64(r*50 + rng.IntN(4)), X: float64(c*36 + rng.IntN(4))})
		}
	}
	p := blend.Params{Sigma: 7, OverlapY: 0.3, OverlapX: 0.3}
	a, err := blend.CPU{Workers: 1}.Blend(context.Background(), tiles, pos, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := blend.CPU{Workers: 5}.Blend(context.Background(), tiles, pos, p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Pix {
		if a.Pix[i] != b.Pix[i] {
			t.Fatalf("pixel %d: %g with 1 worker, %g with 5", i, a.Pix[i], b.Pix[i])
		}
	}
}

func BenchmarkBlend(b *testing.B) {
	for _, w := range []int{1, 4, 16} {
		if w > runtime.NumCPU() {
			continue
		}
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { blendtest.Bench(b, blend.CPU{Workers: w}) })
	}
}
