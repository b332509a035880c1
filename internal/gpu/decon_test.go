//go:build cuda

package gpu

import (
	"context"
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon/decontest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
)

// The GPU deconvolver passes the same conformance suite as decon.CPU.
func TestDeconConformance(t *testing.T) {
	decontest.Run(t, testEngine.Deconvolver())
}

// TestDeconVsCPU compares the GPU with the CPU reference on the same data:
// the light-sheet PSF (z-plane dedup on the GPU), the widefield 3D PSF,
// damping, and both algorithms. Convolutions are bit-identical; the float64
// sums differ in order, so the iterations must match and the results agree
// to float32 rounding of the sums' effect on α (Biggs): 1e-5 of the maximum
// for RL, 1e-4 for Biggs-Andrews.
func TestDeconVsCPU(t *testing.T) {
	o := psf.Optics{DXY: 377, DZ: 1500, NA: 0.75, RI: 1.44, ExNM: 358, EmNM: 461, SlitMM: 6.5, FCylMM: 1}
	ls, _, err := psf.LightSheet(o)
	if err != nil {
		t.Fatal(err)
	}
	wf, _, err := psf.Widefield(o)
	if err != nil {
		t.Fatal(err)
	}
	// a 17-wide kernel runs the generic convolution (no specialisation)
	wide := &psf.Kernel{NZ: 1, NY: 3, NX: 17, Data: make([]float32, 51)}
	for i := range wide.Data {
		wide.Data[i] = float32(1+i%7) / 204
	}
	for _, c := range []struct {
		name string
		k    *psf.Kernel
		alg  string
		damp float64
		tol  float64
	}{
		{"lightsheet RL", ls, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet Biggs", ls, decon.BiggsAndrews, 0, 1e-4},
		{"widefield RL", wf, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet RL damped", ls, decon.RichardsonLucy, 0.2, 1e-5},
		{"17-wide generic RL", wide, decon.RichardsonLucy, 0, 1e-5},
	} {
		sc := decon.NewScene(11, 6, 300, 420, c.k, 3)
		p := decon.Params{Algorithm: c.alg, Iterations: 25, StopCriterion: 5, Damping: c.damp, HistClip: 0.01}
		want, ws, err := decon.CPU{}.Deconvolve(context.Background(), sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		got, gs, err := testEngine.Deconvolver().Deconvolve(context.Background(), sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		if gs.Iterations != ws.Iterations {
			t.Errorf("%s: %d iterations, CPU %d", c.name, gs.Iterations, ws.Iterations)
			continue
		}
		var m, d float64
		for i := range want.Pix {
			m = math.Max(m, float64(want.Pix[i]))
			d = math.Max(d, math.Abs(float64(got.Pix[i]-want.Pix[i])))
		}
		t.Logf("%s: %d iterations, max difference %.3g of %g; lo/hi %g/%g vs CPU %g/%g", c.name, gs.Iterations, d, m, gs.Lo, gs.Hi, ws.Lo, ws.Hi)
		if d > c.tol*m {
			t.Errorf("%s: GPU differs from the CPU by %g (max %g, tolerance %g relative)", c.name, d, m, c.tol)
		}
		// the stage's form: rounded on the device, as decon.Quantize
		pages, _, err := testEngine.DeconvolveGray16(context.Background(), sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		for z, pg := range pages {
			q := decon.Quantize(nil, got.Plane(z))
			for i := range q {
				if pg.Pix[i] != q[i] {
					t.Fatalf("%s: DeconvolveGray16 plane %d pixel %d = %d, Quantize %d", c.name, z, i, pg.Pix[i], q[i])
				}
			}
		}
	}
}
