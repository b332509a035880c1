package stitch

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestCPUCorrectionIsTheRule: the CPU engine's correction (Correct, and the
// correction inside CorrectAndBlend) is basic.CorrectGray16 bit for bit,
// including flatfields below the floor or NaN and saturated pixels. The CUDA
// engine is held to the same definition in internal/gpu (cuda tag).
func TestCPUCorrectionIsTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 2))
	const w, h, n, flatMin = 64, 48, 4, 0.1
	prof := &basic.Profile{W: w, H: h, Flatfield: make([]float32, w*h), Darkfield: make([]float32, w*h)}
	for i := range prof.Flatfield {
		prof.Flatfield[i] = float32(0.03 + 1.5*rng.Float64())
		prof.Darkfield[i] = float32(rng.Float64() * 800 / 65535)
	}
	prof.Flatfield[0], prof.Flatfield[1] = float32(math.NaN()), 0
	tiles := make([]*raster.Gray16, n)
	for k := range tiles {
		tiles[k] = raster.NewGray16(w, h)
		for i := range tiles[k].Pix {
			tiles[k].Pix[i] = uint16(rng.IntN(65536))
		}
		tiles[k].Pix[2] = 65535
	}
	ctx := context.Background()
	got, err := Correct(ctx, tiles, prof, flatMin, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]*raster.Float32, n)
	for k, tl := range tiles {
		want[k] = raster.NewFloat32(w, h)
		basic.CorrectGray16(want[k].Pix, tl.Pix, prof, flatMin)
		for i := range tl.Pix {
			if math.Float32bits(got[k].Pix[i]) != math.Float32bits(want[k].Pix[i]) {
				t.Fatalf("tile %d pixel %d: Correct %g, basic.CorrectGray16 %g", k, i, got[k].Pix[i], want[k].Pix[i])
			}
		}
	}
	// CorrectAndBlend = the rule, blend.CPU, raster.Quantize16.
	pos := []raster.Point{{Y: 0, X: 0}, {Y: 0, X: 45}, {Y: 34, X: 0}, {Y: 34, X: 45}}
	bp := blend.Params{Sigma: 5, OverlapY: 0.3, OverlapX: 0.3}
	m, err := blend.CPU{}.Blend(ctx, want, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	mos, err := NewCPUEngine(2).CorrectAndBlend(ctx, tiles, prof, flatMin, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	q := raster.Quantize16(nil, m.Pix)
	for i := range q {
		if mos.Pix[i] != q[i] {
			t.Fatalf("mosaic pixel %d: %d, rule+blend %d", i, mos.Pix[i], q[i])
		}
	}
}
