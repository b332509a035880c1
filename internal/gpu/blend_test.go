//go:build cuda

package gpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// randomMosaic returns rows x cols raw tiles of h x w on a jittered grid
// with overlap ov, and a profile with vignetting and darkfield.
func randomMosaic(rng *rand.Rand, rows, cols, h, w int, ov float64) ([]*raster.Gray16, []raster.Point, *basic.Profile) {
	var tiles []*raster.Gray16
	var pos []raster.Point
	for r := range rows {
		for c := range cols {
			t := raster.NewGray16(w, h)
			base := 2000 + 20000*rng.Float64()
			for i := range t.Pix {
				t.Pix[i] = uint16(min(65535, base*(0.5+rng.Float64())))
			}
			// a few saturated and zero pixels
			t.Pix[rng.IntN(len(t.Pix))] = 65535
			t.Pix[rng.IntN(len(t.Pix))] = 0
			tiles = append(tiles, t)
			pos = append(pos, raster.Point{
				Y: float64(r)*float64(h)*(1-ov) + 4 + 6*rng.Float64() - 3,
				X: float64(c)*float64(w)*(1-ov) + 4 + 6*rng.Float64() - 3})
		}
	}
	prof := &basic.Profile{W: w, H: h, Flatfield: make([]float32, h*w), Darkfield: make([]float32, h*w)}
	for y := range h {
		for x := range w {
			u, v := float64(y)/float64(h)-0.5, float64(x)/float64(w)-0.5
			prof.Flatfield[y*w+x] = float32(1.2 - 1.3*(u*u+v*v))
			prof.Darkfield[y*w+x] = float32((450 + 100*v) / 65535)
		}
	}
	prof.Flatfield[0] = 0.05 // below flatMin
	return tiles, pos, prof
}

// cpuCorrect applies the one definition of the stage's correction,
// basic.CorrectGray16 (stitch.Correct uses it too).
func cpuCorrect(tiles []*raster.Gray16, prof *basic.Profile, flatMin float32) []*raster.Float32 {
	out := make([]*raster.Float32, len(tiles))
	for i, t := range tiles {
		out[i] = raster.NewFloat32(t.W, t.H)
		basic.CorrectGray16(out[i].Pix, t.Pix, prof, flatMin)
	}
	return out
}

// TestCorrectIsTheRule: the GPU correction gives basic.CorrectGray16 bit for
// bit, also on a NaN flatfield (floor), a NaN darkfield (0), a zero
// flatfield and saturated pixels over a dim flatfield (clip at 1).
func TestCorrectIsTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 3))
	const flatMin = 0.1
	tiles, _, prof := randomMosaic(rng, 2, 2, 50, 70, 0.3)
	prof.Flatfield[1], prof.Flatfield[2], prof.Flatfield[3] = float32(math.NaN()), 0, 0.5
	prof.Darkfield[4] = float32(math.NaN())
	for _, tl := range tiles {
		tl.Pix[3] = 65535
	}
	want := cpuCorrect(tiles, prof, flatMin)
	got, err := testEngine.Correct(context.Background(), tiles, prof, flatMin)
	if err != nil {
		t.Fatal(err)
	}
	for k := range tiles {
		for i := range want[k].Pix {
			if math.Float32bits(got[k].Pix[i]) != math.Float32bits(want[k].Pix[i]) {
				t.Fatalf("tile %d pixel %d: GPU %g, basic.CorrectGray16 %g", k, i, got[k].Pix[i], want[k].Pix[i])
			}
		}
	}
}

// Correction, blending and the fused CorrectAndBlend give the CPU path's
// results bit for bit: the same float32 correction, blend.Taper's weights
// and float64 sums in tile order, raster.Quantize16.
func TestCorrectAndBlendMatchCPU(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const flatMin = 0.1
	tiles, pos, prof := randomMosaic(rng, 3, 4, 180, 240, 0.3)
	ctx := context.Background()
	bp := blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3}

	corrCPU := cpuCorrect(tiles, prof, flatMin)
	corrGPU, err := testEngine.Correct(ctx, tiles, prof, flatMin)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tiles {
		if d, at := worstDiff(corrGPU[i].Pix, corrCPU[i].Pix, 1); d != 0 {
			t.Fatalf("tile %d: GPU correction differs from the CPU by %g at %d", i, d, at)
		}
	}
	mCPU, err := blend.CPU{}.Blend(ctx, corrCPU, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	mGPU, err := testEngine.Blender().Blend(ctx, corrCPU, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	if mGPU.W != mCPU.W || mGPU.H != mCPU.H {
		t.Fatalf("mosaic %dx%d, CPU %dx%d", mGPU.W, mGPU.H, mCPU.W, mCPU.H)
	}
	if d, at := worstDiff(mGPU.Pix, mCPU.Pix, 1); d != 0 {
		t.Errorf("GPU blend differs from blend.CPU by %g at (y %d, x %d)", d, at/mCPU.W, at%mCPU.W)
	}
	want := raster.Quantize16(nil, mCPU.Pix)
	got, err := testEngine.CorrectAndBlend(ctx, tiles, prof, flatMin, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	diff, worst := 0, 0
	for i := range want {
		if d := int(got.Pix[i]) - int(want[i]); d != 0 {
			diff++
			worst = max(worst, int(math.Abs(float64(d))))
		}
	}
	if diff != 0 {
		t.Errorf("CorrectAndBlend differs from the CPU path in %d of %d pixels, by up to %d counts", diff, len(want), worst)
	}
	// Errors are errors: a tile of the wrong size, a bad sigma.
	if _, err := testEngine.CorrectAndBlend(ctx, append(tiles[:1:1], raster.NewGray16(3, 3)), prof, flatMin, pos[:2], bp); err == nil {
		t.Error("tile of the wrong size: no error")
	}
	if _, err := testEngine.CorrectAndBlend(ctx, tiles, prof, flatMin, pos, blend.Params{Sigma: 0, OverlapX: 0.3, OverlapY: 0.3}); err == nil {
		t.Error("sigma 0: no error")
	}
}
