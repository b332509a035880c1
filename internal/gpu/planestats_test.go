//go:build cuda

package gpu

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestPlaneMeterMatchesCPU: the device's measures (on upload and on the
// rounded download) are planestats.Of's integers, plane by plane, for
// planes with a zero background, saturated patches and noise, at sizes and
// block sizes that do not divide each other; the device maximum is the
// pixelwise maximum.
func TestPlaneMeterMatchesCPU(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 8))
	for _, sz := range [][4]int{{1, 1, 1, 2}, {2, 7, 3, 2}, {3, 3, 8, 3}, {257, 131, 17, 4}, {1000, 611, 16, 3}} {
		w, h, block, n := sz[0], sz[1], sz[2], sz[3]
		d, err := testEngine.AllocStack(ctx, n, h, w)
		if err != nil {
			t.Fatal(err)
		}
		up, err := testEngine.NewPlaneMeter(ctx, h, w, block)
		if err != nil {
			t.Fatal(err)
		}
		down, err := testEngine.NewPlaneMeter(ctx, h, w, block)
		if err != nil {
			t.Fatal(err)
		}
		want := raster.NewGray16(w, h)
		for z := 0; z < n; z++ {
			g := raster.NewGray16(w, h)
			for i := range g.Pix {
				switch y := i / w; {
				case y < h/4:
					g.Pix[i] = 0 // background
				case y < h/3:
					g.Pix[i] = 65535
				default:
					g.Pix[i] = uint16(rng.IntN(65536) >> rng.IntN(12))
				}
			}
			planestats.MaxInto(want, g)
			ref := planestats.Of(g, block)
			m, err := testEngine.UploadPlaneGray16Measured(ctx, d, z, g, up)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, ref) {
				t.Fatalf("%dx%d block %d plane %d: upload measure differs from planestats.Of", w, h, block, z)
			}
			back := raster.NewGray16(w, h)
			m, err = testEngine.DownloadPlaneGray16Measured(ctx, d, z, back, down)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Pix, g.Pix) || !reflect.DeepEqual(m, ref) {
				t.Fatalf("%dx%d block %d plane %d: download plane or measure differs", w, h, block, z)
			}
		}
		for _, mt := range []*PlaneMeter{up, down} {
			got, err := mt.MaxProjection(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Pix, want.Pix) {
				t.Errorf("%dx%d: device maximum differs from the pixelwise maximum", w, h)
			}
			mt.Free()
			mt.Free()
		}
		testEngine.FreeStack(d)
	}
}
