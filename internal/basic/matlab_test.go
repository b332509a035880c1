package basic_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// matlabDir holds real images and the original MATLAB BaSiC results on
// them (see its README.md: BaSiCPy's public test data, MIT licence, 8 MB).
// The test fails, never skips, when they are missing.
const matlabDir = "testdata/basic-matlab"

// Bounds against MATLAB's results. A faithful port reaches 0.65 % RMS and
// 2.5 % max flatfield difference with the darkfield on, 0.37 % and 2.2 %
// flat-only (README of the data, measured with the original pipeline's NumPy
// port); this port measures 0.649 % / 2.531 % and 0.355 % / 2.138 %, and its
// darkfield differs from MATLAB's by 0.36 RMS, 3.42 max (image units). The
// bounds sit just above those figures, below what a wrong ALM step gives:
// with the dual-variable step halved (Y += μ/2·(D-A-E)) the darkfield run
// measures 0.986 % RMS, 4.04 % max, darkfield 0.60 RMS, 4.22 max, and fails
// all four of its bounds.
type matlabBounds struct {
	rms, max         float64 // flatfield, fraction of the mean
	darkRMS, darkMax float64 // darkfield, image units (0 = not compared)
}

var (
	matlabDarkBounds = matlabBounds{rms: 0.0075, max: 0.030, darkRMS: 0.45, darkMax: 3.8}
	matlabFlatBounds = matlabBounds{rms: 0.0042, max: 0.024}
)

func loadNanog(t *testing.T) *raster.Stack {
	t.Helper()
	pages, err := tiffio.ReadFloat32Pages(filepath.Join(matlabDir, "timelapse_nanog_images.tif"))
	if err != nil {
		t.Fatalf("MATLAB reference data (committed under internal/basic/%s): %v", matlabDir, err)
	}
	h, w := pages[0].H, pages[0].W
	st := raster.NewStack(len(pages), h, w)
	for i, pg := range pages {
		if pg.W != w || pg.H != h {
			t.Fatalf("page %d is %dx%d, want %dx%d", i, pg.W, pg.H, w, h)
		}
		copy(st.Plane(i), pg.Pix)
	}
	return st
}

func loadRef(t *testing.T, name string) []float32 {
	t.Helper()
	f, err := tiffio.ReadFloat32(filepath.Join(matlabDir, name))
	if err != nil {
		t.Fatalf("read MATLAB reference: %v", err)
	}
	if f.W != 128 || f.H != 128 {
		t.Fatalf("%s is %dx%d, want 128x128", name, f.W, f.H)
	}
	return f.Pix
}

// compareFlat returns the RMS and max absolute difference between two
// profiles after normalising both to mean 1, and the index of the max.
func compareFlat(a, b []float32) (rms, worst float64, at int) {
	var ma, mb float64
	for i := range a {
		ma += float64(a[i])
		mb += float64(b[i])
	}
	ma /= float64(len(a))
	mb /= float64(len(b))
	var ss float64
	for i := range a {
		d := float64(a[i])/ma - float64(b[i])/mb
		ss += d * d
		if math.Abs(d) > worst {
			worst, at = math.Abs(d), i
		}
	}
	return math.Sqrt(ss / float64(len(a))), worst, at
}

// matlabParams are MATLAB BaSiC's defaults: 500 iterations, tolerance 1e-6,
// at most 10 reweighting iterations with tolerance 1e-3, ε 0.1, automatic
// λ_flat = Σ|DCT|/400·0.5. λ_dark is left automatic (0.2 λ_flat, the
// original pipeline's KCorrect): with it the port reproduces the README's
// "faithful port" figures (0.65 % RMS, 2.5 % max). MATLAB's own formula,
// Σ|DCT|/400·0.2 = 0.4 λ_flat, gives 3.1 % RMS on this data, so the
// reference results were evidently not made with it.
func matlabParams(dark bool) basic.Params {
	p := basic.Production()
	p.MaxReweightIterations = 10
	p.Darkfield = dark
	return p
}

func TestMatlabConformance(t *testing.T) {
	st := loadNanog(t)
	for _, c := range []struct {
		name   string
		dark   bool
		method basic.DarkfieldMethod
		ref    string
		long   bool
		bound  matlabBounds
	}{
		{"darkfield", true, basic.Production().DarkfieldMethod, "timelapse_nanog_flatfield_matlab.tif", false, matlabDarkBounds},
		{"darkfield-original", true, basic.DarkfieldOriginal, "timelapse_nanog_flatfield_matlab.tif", true, matlabDarkBounds},
		{"flatonly", false, basic.Production().DarkfieldMethod, "timelapse_nanog_flatfield_flatonly_matlab.tif", false, matlabFlatBounds},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("-short")
			}
			ref := loadRef(t, c.ref)
			p := matlabParams(c.dark)
			p.DarkfieldMethod = c.method
			start := time.Now()
			prof, err := basic.CPU{}.Fit(context.Background(), []*raster.Stack{st}, p)
			if err != nil {
				t.Fatal(err)
			}
			pr := prof[0]
			rms, worst, at := compareFlat(pr.WorkFlat, ref)
			t.Logf("%s (%v): flatfield vs MATLAB: RMS %.3f %%, max %.3f %% at (%d,%d); %d rounds, %d iterations, %.2f s",
				c.name, c.method, 100*rms, 100*worst, at/128, at%128, pr.Reweights, pr.Iterations, time.Since(start).Seconds())
			if c.dark {
				// MATLAB's darkfield convention here: mean ~0, -14.8..15.4
				// (its level clamps to 0 on this data, as ours does).
				dref := loadRef(t, "timelapse_nanog_darkfield_matlab.tif")
				var ss, worstD float64
				for i := range dref {
					d := float64(pr.WorkDark[i]) - float64(dref[i])
					ss += d * d
					worstD = max(worstD, math.Abs(d))
				}
				dRMS := math.Sqrt(ss / float64(len(dref)))
				t.Logf("darkfield vs MATLAB: RMS difference %.2f, max %.2f (image units; MATLAB range -14.8..15.4)", dRMS, worstD)
				if dRMS > c.bound.darkRMS || worstD > c.bound.darkMax {
					t.Errorf("%s: darkfield differs from MATLAB's by %.2f RMS, %.2f max; bounds %.2f, %.2f", c.name, dRMS, worstD, c.bound.darkRMS, c.bound.darkMax)
				}
			}
			if rms > c.bound.rms {
				t.Errorf("%s: RMS difference to MATLAB flatfield %.3f %% > %.2f %%", c.name, 100*rms, 100*c.bound.rms)
			}
			if worst > c.bound.max {
				t.Errorf("%s: max difference to MATLAB flatfield %.3f %% > %.2f %%", c.name, 100*worst, 100*c.bound.max)
			}
		})
	}
}
