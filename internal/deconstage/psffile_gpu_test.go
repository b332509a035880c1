//go:build cuda

package deconstage

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

// TestPSFFileGPU: the GPU engine, given the kernel made from decon.psf_file,
// matches the CPU engine given the same PSF built in memory, for both
// Richardson-Lucy variants (within float32 FFT/convolution rounding).
func TestPSFFileGPU(t *testing.T) {
	g, err := OpenGPU(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cfg, dir := project(t, map[string]any{"z_step_size": 600})
	const ch = 2
	k0, _, err := Kernel(cfg, ch)
	if err != nil {
		t.Fatal(err)
	}
	writePSFFile(t, cfg, "bead.tif", k0)
	fileCfg := *cfg
	fileCfg.Decon.PSFFile = "bead.tif"
	paths, w, h, err := Planes(filepath.Join(InputDir(dir, 1), fmt.Sprintf("CH%d", ch)), cfg.NZPlanes)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStack(context.Background(), paths, w, h, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"richardson_lucy", "biggs_andrews"} {
		cfg.Decon.Algorithm, fileCfg.Decon.Algorithm = alg, alg
		p, err := Params(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.Workers = 2
		mem, ms, err := CPUEngine{Workers: 2}.Deconvolve(context.Background(), copyStack(st), k0, p)
		if err != nil {
			t.Fatal(err)
		}
		got, gs, _, _, err := Deconvolve(context.Background(), g, &fileCfg, ch, copyStack(st), false, 2)
		if err != nil {
			t.Fatal(err)
		}
		var d, m float64
		for i := range mem.Pix {
			d = math.Max(d, math.Abs(float64(got.Pix[i]-mem.Pix[i])))
			m = math.Max(m, math.Abs(float64(mem.Pix[i])))
		}
		t.Logf("%s: GPU (file) vs CPU (memory): %d / %d iterations, worst difference %.2g of the maximum", alg, gs.Iterations, ms.Iterations, d/m)
		if gs.Iterations != ms.Iterations || d > 1e-4*m {
			t.Errorf("%s: GPU with the file's PSF: %d iterations, differs by %.2g of the maximum from the CPU with the in-memory PSF (%d iterations)", alg, gs.Iterations, d/m, ms.Iterations)
		}
	}
}
