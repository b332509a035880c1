//go:build cuda

package gpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register/registertest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// Tolerances of the GPU against register.CPU on the same data. Downsample
// and the warp follow the same double-precision arithmetic (bit-identical
// expected); block shifts differ by the FFTs' rounding (cuFFT vs gonum,
// both float64); end to end, a block at a threshold (PeakMin, the median
// test) may be decided differently, which moves the mapping slightly.
const (
	regShiftTol   = 1e-6 // px, per block
	regMappingTol = 0.05 // px, worst over the image
)

// The GPU backend agrees with register.CPU primitive by primitive and end
// to end.
func TestRegMatchesCPU(t *testing.T) {
	ctx := context.Background()
	g, c := testEngine.Registrar(), register.CPU{Workers: 4}
	o := synth.RegOptions{H: 512, W: 640, Channels: 2, Seed: 21, MaxShift: 50, MaxRotDeg: 1, WarpPx: 4, Workers: 4}
	sc, ref := registertest.Scene(t, o)
	mov, _, err := sc.RenderCycle(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	ks := []int{1, 2, 4}
	lg, err := g.Downsample(ctx, ref[0], ks)
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := c.Downsample(ctx, ref[0], ks)
	for i := range ks {
		for j := range lc[i].Pix {
			if lg[i].Pix[j] != lc[i].Pix[j] {
				t.Fatalf("downsample k %d differs at %d: %v vs %v", ks[i], j, lg[i].Pix[j], lc[i].Pix[j])
			}
		}
	}
	p := register.DefaultParams()
	p.MaxImageDim, p.NonRigidMaxDim, p.CoarseDim, p.Workers = 320, 320, 160, 4
	rc := registertest.Register(t, c, ref[0], mov[0], p)
	rg := registertest.Register(t, g, ref[0], mov[0], p)
	worst := 0.0
	for y := 0; y < o.H; y += 8 {
		for x := 0; x < o.W; x += 8 {
			ay, ax := rc.Mapping.Apply(float64(y), float64(x))
			by, bx := rg.Mapping.Apply(float64(y), float64(x))
			worst = math.Max(worst, math.Hypot(ay-by, ax-bx))
		}
	}
	t.Logf("end to end: worst mapping difference %.2g px; cpu %+v; gpu %+v", worst, rc.Metrics, rg.Metrics)
	if !(worst <= regMappingTol) {
		t.Errorf("GPU and CPU mappings differ by %.3g px", worst)
	}

	// Block shifts through the CPU's final mapping.
	lv, _ := c.Downsample(ctx, mov[0], []int{2})
	fl, _ := c.Downsample(ctx, ref[0], []int{2})
	var blocks []register.Block
	for y := 0; y+64 <= fl[0].H; y += 32 {
		for x := 0; x+64 <= fl[0].W; x += 32 {
			blocks = append(blocks, register.Block{Y0: y, X0: x})
		}
	}
	sg, err := g.BlockShifts(ctx, fl[0], lv[0], 2, []*register.Mapping{&rc.Mapping}, blocks, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	scpu, _ := c.BlockShifts(ctx, fl[0], lv[0], 2, []*register.Mapping{&rc.Mapping}, blocks, 64, 64)
	ws := 0.0
	for i := range sg {
		ws = math.Max(ws, math.Max(math.Abs(sg[i].DY-scpu[i].DY), math.Abs(sg[i].DX-scpu[i].DX)))
		ws = math.Max(ws, math.Abs(sg[i].Peak-scpu[i].Peak))
	}
	t.Logf("block shifts: %d blocks, worst difference %.2g", len(sg), ws)
	if !(ws <= regShiftTol) {
		t.Errorf("block shifts differ from the CPU by %.3g", ws)
	}

	// The warp of both channels through the mapping with a field.
	wg, err := g.Warp(ctx, mov, &rc.Mapping, o.H, o.W)
	if err != nil {
		t.Fatal(err)
	}
	wc, _ := c.Warp(ctx, mov, &rc.Mapping, o.H, o.W)
	for n := range wc {
		bad := 0
		for i := range wc[n].Pix {
			if wc[n].Pix[i] != wg[n].Pix[i] {
				bad++
			}
		}
		t.Logf("warp channel %d: %d of %d pixels differ", n+1, bad, len(wc[n].Pix))
		if bad > 0 {
			t.Errorf("warp channel %d: %d pixels differ from the CPU", n+1, bad)
		}
	}
}

// BenchmarkRegWarp warps one production-size channel (7493 x 12676).
func BenchmarkRegWarp(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	img := raster.NewGray16(12676, 7493)
	for i := range img.Pix {
		img.Pix[i] = uint16(r.IntN(60000))
	}
	m := register.Mapping{Rigid: register.Identity(7493, 12676)}
	m.Rigid.Theta, m.Rigid.TY = 0.01, 3.5
	be := testEngine.Registrar()
	for b.Loop() {
		out, err := be.Warp(context.Background(), []*raster.Gray16{img}, &m, 7493, 12676)
		if err != nil {
			b.Fatal(err)
		}
		raster.FreePlane(be, out[0])
	}
}
