package deconstage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// writePSFFile writes k as a bead image would come: scaled by 1e4, on a
// background of 100 counts, inside a box 2 voxels wider before and 3
// after on every axis (an even size, the bead off its centre), as float32
// pages; the path is relative to the config's directory.
func writePSFFile(t *testing.T, cfg *config.Config, name string, k *psf.Kernel) {
	t.Helper()
	nz, ny, nx := k.NZ+5, k.NY+5, k.NX+5
	pages := make([]*raster.Float32, nz)
	for z := range pages {
		pages[z] = raster.NewFloat32(nx, ny)
		for y := 0; y < ny; y++ {
			for x := 0; x < nx; x++ {
				v := float32(100)
				if kz, ky, kx := z-2, y-2, x-2; kz >= 0 && kz < k.NZ && ky >= 0 && ky < k.NY && kx >= 0 && kx < k.NX {
					v += 1e4 * k.At(kz, ky, kx)
				}
				pages[z].Pix[y*nx+x] = v
			}
		}
	}
	if err := tiffio.WriteFloat32Pages(filepath.Join(filepath.Dir(cfg.Path), name), pages); err != nil {
		t.Fatal(err)
	}
}

func copyStack(s *raster.Stack) *raster.Stack {
	c := raster.NewStack(s.N, s.H, s.W)
	copy(c.Pix, s.Pix)
	return c
}

// psfFileProject writes a project (3-D kernels: z_step_size 600) and
// bead.tif beside its config, made by writePSFFile from channel ch's model
// kernel; it returns the config, a copy that names bead.tif
// (decon.psf_file, relative), the project directory, that kernel (the
// same PSF in memory) and channel ch's stitched stack.
func psfFileProject(t *testing.T, ch int) (cfg, fileCfg *config.Config, dir string, k0 *psf.Kernel, st *raster.Stack) {
	t.Helper()
	cfg, dir = project(t, map[string]any{"z_step_size": 600})
	k0, _, err := Kernel(cfg, ch)
	if err != nil {
		t.Fatal(err)
	}
	writePSFFile(t, cfg, "bead.tif", k0)
	fc := *cfg
	fc.Decon.PSFFile = "bead.tif"
	paths, w, h, err := Planes(filepath.Join(InputDir(dir, 1), fmt.Sprintf("CH%d", ch)), cfg.NZPlanes)
	if err != nil {
		t.Fatal(err)
	}
	st, err = ReadStack(context.Background(), paths, w, h, 2)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, &fc, dir, k0, st
}

// matchesInMemory deconvolves st on eng with the PSF from fileCfg's
// decon.psf_file and on the CPU with k0 built in memory, for both
// Richardson-Lucy variants: the iterations must agree and the results
// within 1e-4 of the maximum (float32 rounding of the file's values; the
// GPU's convolution rounding).
func matchesInMemory(t *testing.T, eng Engine, cfg, fileCfg *config.Config, ch int, k0 *psf.Kernel, st *raster.Stack) {
	t.Helper()
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
		got, fs, _, _, err := Deconvolve(context.Background(), eng, fileCfg, ch, copyStack(st), 2)
		if err != nil {
			t.Fatal(err)
		}
		var d, m float64
		for i := range mem.Pix {
			d = math.Max(d, math.Abs(float64(got.Pix[i]-mem.Pix[i])))
			m = math.Max(m, math.Abs(float64(mem.Pix[i])))
		}
		t.Logf("%s on %s: file vs CPU with the PSF in memory: %d / %d iterations, worst difference %.2g of the maximum %.0f", alg, eng.Name(), fs.Iterations, ms.Iterations, d/m, m)
		if fs.Iterations != ms.Iterations || d > 1e-4*m {
			t.Errorf("%s on %s: the file's PSF gives %d iterations and differs by %.2g of the maximum from the in-memory PSF's (%d iterations)", alg, eng.Name(), fs.Iterations, d/m, ms.Iterations)
		}
	}
}

// decon.psf_file: deconvolving with the PSF read from a file gives the
// result of the same PSF built in memory, for both Richardson-Lucy
// variants; the stage records it; a bad file stops the stage before any
// output with an error naming decon.psf_file.
func TestPSFFile(t *testing.T) {
	const ch = 2
	cfg, fileCfg, dir, k0, st := psfFileProject(t, ch)
	k, info, err := Kernel(fileCfg, ch)
	if err != nil {
		t.Fatal(err)
	}
	if k.NZ != k0.NZ || k.NY != k0.NY || k.NX != k0.NX {
		t.Fatalf("kernel from the file %s, in memory %s", k, k0)
	}
	var worst, peak float64
	for i := range k.Data {
		worst = math.Max(worst, math.Abs(float64(k.Data[i]-k0.Data[i])))
		peak = math.Max(peak, float64(k0.Data[i]))
	}
	t.Logf("kernel %s (x,y,z) from %dx%dx%d file: worst difference %.2g of the peak; info %+v", k, k0.NX+5, k0.NY+5, k0.NZ+5, worst/peak, info)
	// float32 rounding of 1e4 k + 100 and back: below 1e-5 of the peak.
	if worst > 1e-5*peak {
		t.Errorf("kernel from the file differs from the one in memory by %.2g of the peak", worst/peak)
	}
	eng := CPUEngine{Workers: 2}
	matchesInMemory(t, eng, cfg, fileCfg, ch, k0, st)
	// The stage with the file: recorded in the sentinel and DECONV_parameters.txt.
	fileCfg.Decon.Algorithm = "richardson_lucy"
	if _, err := Run(context.Background(), Options{Config: fileCfg, Cycle: 1, Engine: eng, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	out := OutDir(dir, 1)
	sent, _ := os.ReadFile(filepath.Join(out, ".snakemake_complete"))
	par, _ := os.ReadFile(filepath.Join(out, "DECONV_parameters.txt"))
	if !strings.Contains(string(sent), "psf_model=measured") || !strings.Contains(string(par), "psf file: "+filepath.Join(dir, "bead.tif")) {
		t.Errorf("sentinel %q / parameters %q do not record the measured PSF", sent, par)
	}
	os.RemoveAll(out)
	// A file that cannot be used: nothing written, the key named.
	bad := raster.NewFloat32(9, 9)
	bad.Pix[40] = float32(math.NaN())
	if err := tiffio.WriteFloat32Pages(filepath.Join(dir, "bad.tif"), []*raster.Float32{bad, bad}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"bad.tif": "finite", "none.tif": "no such file"} {
		fileCfg.Decon.PSFFile = name
		_, err := Run(context.Background(), Options{Config: fileCfg, Cycle: 1, Engine: eng, Workers: 2})
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "decon.psf_file") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want ErrInput naming decon.psf_file and %q", name, err, want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: output written despite the error", name)
		}
	}
}
