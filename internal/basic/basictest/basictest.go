// Package basictest is the conformance suite every basic.Fitter
// implementation runs (the CPU reference and the CUDA one): Run fits
// synthetic stacks with a known flatfield and darkfield and holds the fit to
// fixed accuracy bounds, determinism, parameter validation and cancellation.
//
// Synthetic stacks are (n, y, x) float32, x fastest, in intensities
// normalised by 65535 (as the stitch stage feeds BaSiC); truth profiles are
// float64 (y, x): the flatfield with mean 1, the darkfield in the same
// normalised unit.
package basictest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Scene describes a synthetic stack: textured tissue images (small Gaussian
// blobs on a tissue background, at a brightness that varies per image) and a few dim background images, multiplied by a
// Gaussian vignetting flatfield, plus a darkfield, plus shot noise.
// Intensities are given in detector counts; the stack is counts/65535.
type Scene struct {
	N, H, W      int
	Background   int     // number of dim background images (no tissue)
	Falloff      float64 // flatfield at the image corners relative to its peak is 1-Falloff
	DarkCounts   float64 // darkfield level, counts
	DarkSlope    float64 // additional darkfield across x, counts from left to right edge (0: constant)
	Contrast     float64 // texture contrast: tissue = level·(1 - Contrast + Contrast·texture/mean(texture))
	BlobScale    float64 // blob (cell) size factor: σ = (1.5..4 px)·BlobScale (0 means 1)
	EdgeFraction float64 // fraction of tissue images that show a tissue edge (half of them glass)
	SignalMin    float64 // tissue intensity range, counts
	SignalMax    float64
	Seed         uint64
}

// DefaultScene is the suite's main scene: 48 images of 192 x 256 (5 of
// them background), cells of σ 3-8 px at 20 % texture contrast, 30 %
// vignetting falloff, a constant darkfield of 460 counts, tissue
// 1000-20000 counts. The working-size resize averages the shot noise a
// little, as it does (much more) on production tiles.
func DefaultScene() Scene {
	return Scene{N: 48, H: 192, W: 256, Background: 5, Falloff: 0.3,
		DarkCounts: 460, Contrast: 0.2, BlobScale: 2, SignalMin: 1000, SignalMax: 20000, Seed: 1}
}

// EdgeScene is DefaultScene without whole background tiles but with tissue
// edges on 40 % of the images: the case where the original's darkfield
// rule collapses.
func EdgeScene() Scene {
	sc := DefaultScene()
	sc.Background, sc.EdgeFraction = 0, 0.4
	return sc
}

// Truth holds the profiles a Scene was made with: Flat has mean 1, Dark is
// in the stack's normalised unit (counts/65535). Both (y, x), H x W.
type Truth struct {
	Flat, Dark []float64
}

// Make renders a scene. It is deterministic for a given Scene.
func Make(sc Scene) (*raster.Stack, Truth) {
	rng := rand.New(rand.NewPCG(sc.Seed, 1))
	h, w := sc.H, sc.W
	tr := Truth{Flat: make([]float64, h*w), Dark: make([]float64, h*w)}
	// Vignetting: an off-centre 2-D Gaussian scaled so its farthest corner
	// is at 1-Falloff of the peak, then normalised to mean 1.
	cy, cx := 0.45*float64(h-1), 0.55*float64(w-1)
	ry, rx := 0.55*float64(h-1), 0.55*float64(w-1)
	k := -math.Log(1 - sc.Falloff) // at the farthest corner (|u|=|v|≈1) exp(-k)
	var mf float64
	for y := range h {
		for x := range w {
			u, v := (float64(y)-cy)/ry, (float64(x)-cx)/rx
			f := math.Exp(-k * (u*u + v*v) / 2)
			tr.Flat[y*w+x] = f
			mf += f
		}
	}
	mf /= float64(h * w)
	for i := range tr.Flat {
		tr.Flat[i] /= mf
		x := i % w
		tr.Dark[i] = (sc.DarkCounts + sc.DarkSlope*float64(x)/float64(max(1, w-1))) / 65535
	}

	st := raster.NewStack(sc.N, h, w)
	scene := make([]float64, h*w)
	nBg := min(sc.Background, sc.N)
	stride := max(1, sc.N/max(1, nBg))
	scale := sc.BlobScale
	if scale <= 0 {
		scale = 1
	}
	for j := range sc.N {
		// Background (glass): faint, even autofluorescence of 20-80 counts.
		bg := 20 + 60*rng.Float64()
		if j%stride == 0 && j/stride < nBg {
			for i := range scene {
				scene[i] = bg
			}
		} else {
			// Tissue: an image brightness drawn log-uniformly from the
			// signal range, modulated by a texture of many small blobs
			// (cells), so that each pixel sees the same distribution of
			// intensities across images, as BaSiC assumes.
			level := sc.SignalMin * math.Pow(sc.SignalMax/sc.SignalMin, rng.Float64())
			clear(scene)
			// Blob centres extend past the edges by the largest blob
			// radius, so that the texture is statistically the same at the
			// edges as in the middle.
			margin := int(12 * scale)
			nb := int(float64((h+2*margin)*(w+2*margin)) / (40 * scale * scale))
			for range nb {
				by := rng.Float64()*float64(h+2*margin) - float64(margin)
				bx := rng.Float64()*float64(w+2*margin) - float64(margin)
				sig := (1.5 + 2.5*rng.Float64()) * scale
				amp := 0.2 + 0.8*rng.Float64()
				r := int(3 * sig)
				y0, x0 := int(math.Floor(by)), int(math.Floor(bx))
				for y := max(0, y0-r); y < min(h, y0+r+2); y++ {
					for x := max(0, x0-r); x < min(w, x0+r+2); x++ {
						dy, dx := float64(y)-by, float64(x)-bx
						scene[y*w+x] += amp * math.Exp(-(dy*dy+dx*dx)/(2*sig*sig))
					}
				}
			}
			var mt float64
			for _, v := range scene {
				mt += v
			}
			mt /= float64(len(scene))
			// Tissue edge: on a fraction of the images, tissue covers only
			// a random half-plane; the rest is glass.
			edge := rng.Float64() < sc.EdgeFraction
			ang := 2 * math.Pi * rng.Float64()
			ca, sa := math.Cos(ang), math.Sin(ang)
			off := (rng.Float64() - 0.5) * 0.6 * float64(min(h, w))
			for i, v := range scene {
				t := level * (1 - sc.Contrast + sc.Contrast*v/mt)
				if edge {
					y, x := float64(i/w)-float64(h)/2, float64(i%w)-float64(w)/2
					if y*ca+x*sa > off {
						t = bg
					}
				}
				scene[i] = t
			}
		}
		pl := st.Plane(j)
		for i, s := range scene {
			c := s*tr.Flat[i] + tr.Dark[i]*65535
			c += math.Sqrt(max(c, 0)) * rng.NormFloat64() // shot noise, gain 1
			pl[i] = float32(min(max(c, 0), 65535) / 65535)
		}
	}
	return st, tr
}

// Errors compares a fitted profile with the truth: the RMS and worst
// absolute difference of the flatfields (both normalised to mean 1), and
// the mean and worst absolute darkfield difference in counts, with where
// the worst ones are.
type Errors struct {
	FlatRMS, FlatMax     float64
	FlatMaxAt            raster.Point
	DarkMean, DarkMeanIn float64 // mean of fitted darkfield minus truth; mean truth; counts
	DarkMax              float64
	DarkMaxAt            raster.Point
}

// Compare computes Errors of prof against tr.
func Compare(prof basic.Profile, tr Truth) Errors {
	n := len(tr.Flat)
	var e Errors
	var mf float64
	for _, v := range prof.Flatfield {
		mf += float64(v)
	}
	mf /= float64(n)
	var ss, dsum, tsum float64
	for i := range n {
		d := float64(prof.Flatfield[i])/mf - tr.Flat[i]
		ss += d * d
		pt := raster.Point{Y: float64(i / prof.W), X: float64(i % prof.W)}
		if math.Abs(d) > e.FlatMax {
			e.FlatMax, e.FlatMaxAt = math.Abs(d), pt
		}
		dd := (float64(prof.Darkfield[i]) - tr.Dark[i]) * 65535
		dsum += dd
		tsum += tr.Dark[i] * 65535
		if math.Abs(dd) > e.DarkMax {
			e.DarkMax, e.DarkMaxAt = math.Abs(dd), pt
		}
	}
	e.FlatRMS = math.Sqrt(ss / float64(n))
	e.DarkMean = dsum / float64(n)
	e.DarkMeanIn = tsum / float64(n)
	return e
}

func (e Errors) String() string {
	return fmt.Sprintf("flatfield RMS %.3f %%, max %.3f %% at (y %g, x %g); darkfield mean error %+.1f counts (truth mean %.1f), max %.1f at (y %g, x %g)",
		100*e.FlatRMS, 100*e.FlatMax, e.FlatMaxAt.Y, e.FlatMaxAt.X, e.DarkMean, e.DarkMeanIn, e.DarkMax, e.DarkMaxAt.Y, e.DarkMaxAt.X)
}

// Accuracy bounds of the suite. They were set from the CPU reference's
// measurements on seeds 1-3 of each scene (figures in the comments), with
// margin for a float32 GPU implementation; they are far below what a broken
// step gives (flatfield errors of 10-60 %, darkfield collapsing to 0).
const (
	// FlatRMSTol bounds the flatfield RMS error on DefaultScene (mean-1
	// units). Measured 2.0-2.5 %: the residual is the cell texture's
	// sampling noise over 43 tissue images, not a bias.
	FlatRMSTol = 0.035
	// FlatMaxTol bounds the worst flatfield pixel error. Measured 7.3-9.5 %.
	FlatMaxTol = 0.13
	// DarkMeanTol bounds |mean darkfield error| on DefaultScene, counts.
	// Measured -11 to -20 of 460 (both darkfield methods).
	DarkMeanTol = 60.0
	// DarkMaxTol bounds the worst darkfield pixel error, counts. Measured
	// 170-240: the smoothed residual offset carries texture noise.
	DarkMaxTol = 400.0
	// FlatOnlyRMSTol bounds the flatfield RMS error with the darkfield off.
	// Measured 2.0-2.2 % (the 460-count offset is small next to the tissue).
	FlatOnlyRMSTol = 0.035
	// EdgeDarkMeanTol bounds |mean darkfield error| on EdgeScene with the
	// production darkfield method, counts. Measured -22 to -28 of 460 with
	// DarkfieldDarkest; the original rule gives -460 (collapse to 0) on
	// seed 1, -24 and -122 on seeds 2 and 3.
	EdgeDarkMeanTol = 80.0
	// EdgeFlatRMSTol bounds the flatfield RMS error on EdgeScene (seed 1).
	// Tissue edges break BaSiC's assumption that every pixel sees the same
	// intensity distribution; measured 4.4-10 % over seeds 1-3, 4.4 % on seed 1 (used).
	EdgeFlatRMSTol = 0.08
)

// Run is the conformance suite for one Fitter implementation. It uses
// Production() settings unless a subtest says otherwise.
func Run(t *testing.T, f basic.Fitter) {
	t.Run("Accuracy", func(t *testing.T) { testAccuracy(t, f) })
	t.Run("EdgeDarkfield", func(t *testing.T) { testEdge(t, f) })
	t.Run("DenseNuclei", func(t *testing.T) { testDenseNuclei(t, f) })
	t.Run("StallStopsEarly", func(t *testing.T) { testStall(t, f) })
	t.Run("Validate", func(t *testing.T) { testValidate(t, f) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, f) })
	t.Run("Shapes", func(t *testing.T) { testShapes(t, f) })
}

func testAccuracy(t *testing.T, f basic.Fitter) {
	st, tr := Make(DefaultScene())
	p := basic.Production()
	start := time.Now()
	profs, err := f.Fit(context.Background(), []*raster.Stack{st, st}, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(profs) != 2 {
		t.Fatalf("got %d profiles for 2 stacks", len(profs))
	}
	pr := profs[0]
	e := Compare(pr, tr)
	t.Logf("darkfield on: %v; %d rounds, %d iterations, %.2f s for 2 stacks",
		e, pr.Reweights, pr.Iterations, time.Since(start).Seconds())
	checkProfile(t, pr, st, p)
	if e.FlatRMS > FlatRMSTol || e.FlatMax > FlatMaxTol {
		t.Errorf("flatfield error too large: RMS %.3f %% (bound %.1f %%), max %.3f %% (bound %.1f %%) at (y %g, x %g)",
			100*e.FlatRMS, 100*FlatRMSTol, 100*e.FlatMax, 100*FlatMaxTol, e.FlatMaxAt.Y, e.FlatMaxAt.X)
	}
	if math.Abs(e.DarkMean) > DarkMeanTol || e.DarkMax > DarkMaxTol {
		t.Errorf("darkfield error too large: mean %+.1f counts (bound %.0f), max %.1f (bound %.0f) at (y %g, x %g)",
			e.DarkMean, DarkMeanTol, e.DarkMax, DarkMaxTol, e.DarkMaxAt.Y, e.DarkMaxAt.X)
	}
	// Determinism: the same stack twice in one call, and a second call,
	// give bit-identical profiles.
	profs2, err := f.Fit(context.Background(), []*raster.Stack{st}, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []basic.Profile{profs[1], profs2[0]} {
		if i := firstDiff(q.Flatfield, pr.Flatfield); i >= 0 {
			t.Errorf("fit not deterministic: flatfield pixel %d: %g vs %g", i, q.Flatfield[i], pr.Flatfield[i])
		}
		if i := firstDiff(q.Darkfield, pr.Darkfield); i >= 0 {
			t.Errorf("fit not deterministic: darkfield pixel %d: %g vs %g", i, q.Darkfield[i], pr.Darkfield[i])
		}
		if q.Iterations != pr.Iterations || q.Reweights != pr.Reweights {
			t.Errorf("fit not deterministic: %d/%d iterations/rounds vs %d/%d", q.Iterations, q.Reweights, pr.Iterations, pr.Reweights)
		}
	}

	// Darkfield off: zero darkfield, flatfield still close.
	p.Darkfield = false
	profs, err = f.Fit(context.Background(), []*raster.Stack{st}, p)
	if err != nil {
		t.Fatal(err)
	}
	pr = profs[0]
	e = Compare(pr, tr)
	t.Logf("darkfield off: flatfield RMS %.3f %%, max %.3f %%; %d rounds, %d iterations", 100*e.FlatRMS, 100*e.FlatMax, pr.Reweights, pr.Iterations)
	checkProfile(t, pr, st, p)
	for i, v := range pr.Darkfield {
		if v != 0 {
			t.Fatalf("darkfield off but darkfield pixel %d = %g", i, v)
		}
	}
	if e.FlatRMS > FlatOnlyRMSTol {
		t.Errorf("darkfield off: flatfield RMS error %.3f %%, bound %.1f %%", 100*e.FlatRMS, 100*FlatOnlyRMSTol)
	}
}

// testEdge checks the darkfield level where the dim images mix glass and
// tissue and no image is all glass.
func testEdge(t *testing.T, f basic.Fitter) {
	st, tr := Make(EdgeScene())
	p := basic.Production()
	profs, err := f.Fit(context.Background(), []*raster.Stack{st}, p)
	if err != nil {
		t.Fatal(err)
	}
	pr := profs[0]
	e := Compare(pr, tr)
	t.Logf("edge scene, %v: %v; %d rounds, %d iterations", p.DarkfieldMethod, e, pr.Reweights, pr.Iterations)
	checkProfile(t, pr, st, p)
	if math.Abs(e.DarkMean) > EdgeDarkMeanTol {
		t.Errorf("darkfield mean error %+.1f counts, bound %.0f (truth mean %.1f)", e.DarkMean, EdgeDarkMeanTol, e.DarkMeanIn)
	}
	if e.FlatRMS > EdgeFlatRMSTol {
		t.Errorf("flatfield RMS error %.3f %%, bound %.1f %%", 100*e.FlatRMS, 100*EdgeFlatRMSTol)
	}
}

// checkProfile checks the invariants every profile satisfies.
func checkProfile(t *testing.T, pr basic.Profile, st *raster.Stack, p basic.Params) {
	t.Helper()
	if pr.W != st.W || pr.H != st.H || len(pr.Flatfield) != st.W*st.H || len(pr.Darkfield) != st.W*st.H {
		t.Fatalf("profile %dx%d with %d/%d pixels, want %dx%d", pr.W, pr.H, len(pr.Flatfield), len(pr.Darkfield), st.W, st.H)
	}
	ws := p.WorkingSize * p.WorkingSize
	if len(pr.WorkFlat) != ws || len(pr.WorkDark) != ws {
		t.Fatalf("working profiles have %d/%d pixels, want %d", len(pr.WorkFlat), len(pr.WorkDark), ws)
	}
	var m float64
	for i, v := range pr.Flatfield {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			t.Fatalf("flatfield pixel %d = %g, want positive and finite", i, v)
		}
		m += float64(v)
	}
	// Mean 1 up to float32 rounding of the sum.
	if m /= float64(len(pr.Flatfield)); math.Abs(m-1) > 1e-5 {
		t.Errorf("flatfield mean %g, want 1", m)
	}
	if pr.Iterations < pr.Reweights || pr.Reweights < 1 || pr.Reweights > p.MaxReweightIterations ||
		pr.Iterations > pr.Reweights*p.MaxIterations {
		t.Errorf("implausible counts: %d iterations in %d rounds", pr.Iterations, pr.Reweights)
	}
}

func firstDiff(a, b []float32) int {
	for i := range a {
		if a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) {
			return i
		}
	}
	return -1
}

func testValidate(t *testing.T, f basic.Fitter) {
	if err := basic.Production().Validate(); err != nil {
		t.Fatalf("Production() invalid: %v", err)
	}
	st, _ := Make(Scene{N: 4, H: 16, W: 16, Falloff: 0.2, SignalMin: 1000, SignalMax: 5000, Seed: 2})
	for _, c := range []struct {
		field string
		set   func(*basic.Params)
	}{
		{"WorkingSize", func(p *basic.Params) { p.WorkingSize = 0 }},
		{"MaxIterations", func(p *basic.Params) { p.MaxIterations = 0 }},
		{"OptimizationTol", func(p *basic.Params) { p.OptimizationTol = -1 }},
		{"OptimizationTol", func(p *basic.Params) { p.OptimizationTol = math.NaN() }},
		{"MaxReweightIterations", func(p *basic.Params) { p.MaxReweightIterations = 0 }},
		{"ReweightTol", func(p *basic.Params) { p.ReweightTol = math.Inf(1) }},
		{"Epsilon", func(p *basic.Params) { p.Epsilon = 0 }},
		{"LambdaFlat", func(p *basic.Params) { p.LambdaFlat = -0.1 }},
		{"LambdaDark", func(p *basic.Params) { p.LambdaDark = math.NaN() }},
	} {
		p := basic.Production()
		c.set(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate with bad %s: error %v, want one naming the field", c.field, err)
		}
		if _, err := f.Fit(context.Background(), []*raster.Stack{st}, p); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Fit with bad %s: error %v, want one naming the field", c.field, err)
		}
	}
	// Bad stacks are errors, not panics.
	bad := []*raster.Stack{
		nil,
		{N: 1, H: 16, W: 16, Pix: make([]float32, 256)},   // one image
		{N: 3, H: 16, W: 16, Pix: make([]float32, 10)},    // wrong pixel count
		{N: 3, H: 16, W: 16, Pix: make([]float32, 3*256)}, // all zero
	}
	for i, b := range bad {
		if _, err := f.Fit(context.Background(), []*raster.Stack{st, b}, basic.Production()); err == nil {
			t.Errorf("bad stack %d: no error", i)
		}
	}
}

func testCancel(t *testing.T, f basic.Fitter) {
	st, _ := Make(DefaultScene())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Fit(ctx, []*raster.Stack{st}, basic.Production()); !errors.Is(err, context.Canceled) {
		t.Errorf("pre-cancelled context: error %v, want context.Canceled", err)
	}
	// Cancelled mid-fit: returns promptly with the context's error. The
	// deadline is a quarter of this implementation's own uncancelled time
	// for the same work, so it falls inside the fit on fast and slow
	// devices alike.
	stacks := []*raster.Stack{st, st, st, st}
	t0 := time.Now()
	if _, err := f.Fit(context.Background(), stacks, basic.Production()); err != nil {
		t.Fatal(err)
	}
	full := time.Since(t0)
	ctx, cancel = context.WithTimeout(context.Background(), full/4)
	defer cancel()
	start := time.Now()
	_, err := f.Fit(ctx, stacks, basic.Production())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline %v into a %v fit: error %v, want context.DeadlineExceeded", full/4, full, err)
	}
	// One ALM iteration takes milliseconds. The fit must return within the
	// deadline plus max(2 s, a quarter of the full fit) after it: a fit that
	// ignored the context would take the whole fit (4 quarters); the
	// relative term keeps the bound meaningful on a loaded shared machine,
	// where every fit (the uncancelled one included) runs slower.
	slack := max(2*time.Second, full/4)
	if d := time.Since(start); d > full/4+slack {
		t.Errorf("cancellation took %v (deadline %v, full fit %v, allowed %v)", d, full/4, full, full/4+slack)
	}
}

// testShapes fits odd sizes: a stack larger than the working size in one
// axis and smaller in the other, and a working size other than 128.
func testShapes(t *testing.T, f basic.Fitter) {
	sc := DefaultScene()
	sc.N, sc.H, sc.W, sc.Seed = 20, 150, 70, 3
	st, tr := Make(sc)
	p := basic.Production()
	p.WorkingSize = 64
	profs, err := f.Fit(context.Background(), []*raster.Stack{st}, p)
	if err != nil {
		t.Fatal(err)
	}
	checkProfile(t, profs[0], st, p)
	e := Compare(profs[0], tr)
	t.Logf("150x70 at working size 64: %v", e)
	// Fewer images and a smaller grid: a looser bound than the main case.
	if e.FlatRMS > 2*FlatRMSTol {
		t.Errorf("flatfield RMS %.3f %%, bound %.1f %%", 100*e.FlatRMS, 200*FlatRMSTol)
	}
}
