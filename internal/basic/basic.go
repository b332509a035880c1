// Package basic estimates and applies illumination profiles with BaSiC
// (Peng et al., Nat. Commun. 8:14836, 2017): every image of a stack is modelled
// as I(x) = S(x)·B + D(x), with S the flatfield (mean 1) and D the darkfield,
// fitted by inexact-ALM robust PCA with an L1 penalty on the DCT coefficients
// of S and D, at a reduced working size, with reweighting rounds.
//
// Stacks are (n, y, x) float32, x fastest, in any consistent intensity unit
// (the stitch stage uses counts/65535); the darkfield comes back in the same
// unit. Profiles are float32 at the stack's full (H, W).
//
// CPU is the reference Fitter, a float64 port of the original pipeline's
// KCorrect (MATLAB BaSiC's inexact_alm_rspca_l1 with darkfield): images are
// resized to WorkingSize² as skimage.transform.resize does (Gaussian
// anti-aliasing when shrinking, bilinear at pixel centres, symmetric
// boundary), sorted per pixel along the image axis, and fitted as an
// m x n matrix (m = WorkingSize² pixels, n images) stored image-major (pixel
// i of image j at [j*m+i]). Results are deterministic and independent of
// the number of workers. The conformance suite every Fitter must pass is in
// package basictest; Transform applies a profile.
//
// ProfileMode selects how a cycle's profiles are estimated: ModeCompatible
// (BaSiC as above, the default) or ModeEnvelopeDarkfield (shared.go): the
// darkfield measured from the darkest tiles at every pixel over all
// z-planes of a channel (DarkEnvelope), then each plane's own flatfield
// fitted by BaSiC with that darkfield known (FitWithDarkfield), through
// any PlaneFitter (the stitch stage's engines), so the CPU and GPU run it
// on the one conformance path.
package basic

import (
	"context"
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Params are the fit settings. Production() gives the pipeline's fixed
// quality settings; they are never lowered for speed.
type Params struct {
	WorkingSize           int     // side of the square working grid, px (128)
	MaxIterations         int     // inner ALM iterations per reweighting round (500)
	OptimizationTol       float64 // inner stop: ||D-A-E||_F / ||D||_F below this (1e-6)
	MaxReweightIterations int     // reweighting rounds (25)
	ReweightTol           float64 // stop when flatfield and darkfield change less than this (1e-3)
	Darkfield             bool    // estimate the darkfield (true)
	Epsilon               float64 // reweighting epsilon (0.1)
	LambdaFlat            float64 // 0: automatic, sum|DCT(mean/mean(mean))|/400*0.5
	LambdaDark            float64 // 0: automatic, 0.2 * automatic LambdaFlat
	Seed                  uint64  // seed for any randomised step (none at present: ‖D‖₂ is computed exactly)
	DarkfieldMethod       DarkfieldMethod
	// NoEarlyStop runs a stagnating fit to MaxReweightIterations instead of
	// stopping it early (RoundStop): for studies and the tests that show
	// the early stop changes nothing else. Production leaves it false.
	NoEarlyStop bool
}

// DarkfieldMethod selects how the darkfield level is fixed. BaSiC's model
// I = S·B + D cannot tell a darkfield D from D + c·S with the baselines
// lowered by c; each method is an assumption that picks c.
type DarkfieldMethod int

const (
	// DarkfieldOriginal is the original's (MATLAB, KCorrect) rule: over the
	// images dimmer than average, regress the contrast between the bright
	// and the dim half of the flatfield on the image brightness, and take
	// the brightness at which the contrast would vanish. It is computed on
	// the model's own residual and fails when the dim images mix glass and
	// tissue (tissue edges without whole background tiles): the darkfield
	// then collapses to 0 (measured: true 460 counts, estimated 0).
	DarkfieldOriginal DarkfieldMethod = iota
	// DarkfieldDarkest takes the level from the darkest image at each pixel
	// (the first image after the per-pixel sort): the intercept of its
	// linear regression on the flatfield across pixels. That image is the
	// one closest to zero signal, so the extrapolation is shortest; it is
	// usually glass where any tile shows glass. Both methods clamp the level
	// to [0, min(data)]. Where the flatfield part W has no positive mean
	// during the fit (measured on dense nuclear stacks and on stacks of few
	// textured tiles) the level is undefined and the fit goes NaN: it stops
	// after that round (RoundStop, Stalled) and the stitch stage refits it
	// with DarkfieldOriginal, which gives the better flatfield on exactly
	// those stacks. See BenchmarkDarkfieldStudy and the README for the
	// measured comparison.
	DarkfieldDarkest
)

func (m DarkfieldMethod) String() string {
	switch m {
	case DarkfieldOriginal:
		return "original"
	case DarkfieldDarkest:
		return "darkest"
	}
	return fmt.Sprintf("DarkfieldMethod(%d)", int(m))
}

// Production returns the pipeline's fixed quality settings:
// 500 iterations, tolerance 1e-6, 25 reweighting rounds, reweight tolerance
// 1e-3, darkfield on, working size 128, epsilon 0.1, automatic lambdas, and
// the darkfield level from the darkest image (DarkfieldDarkest, chosen by
// measurement over the original's rule).
func Production() Params {
	return Params{
		WorkingSize:           128,
		MaxIterations:         500,
		OptimizationTol:       1e-6,
		MaxReweightIterations: 25,
		ReweightTol:           1e-3,
		Darkfield:             true,
		Epsilon:               0.1,
		Seed:                  1,
		DarkfieldMethod:       DarkfieldDarkest,
	}
}

// Profile is the result of one fit.
type Profile struct {
	W, H      int       // full size, px
	Flatfield []float32 // (y, x), mean 1
	Darkfield []float32 // (y, x), in the input's intensity unit; zeros when Params.Darkfield is false
	// WorkFlat and WorkDark are the same profiles at the working size
	// (WorkingSize x WorkingSize), before the resize back to (H, W).
	WorkFlat, WorkDark []float32
	Iterations         int // inner ALM iterations summed over all rounds
	Reweights          int // reweighting rounds run
	// Converged reports that the last round's change met ReweightTol;
	// Stalled that the fit was stopped early as stagnating (see RoundStop).
	// A fit that is not Converged used all rounds or Stalled.
	Converged, Stalled bool
	// Rounds is the history of the reweighting rounds, in order.
	Rounds []Round
}

// Round is one reweighting round of a fit.
type Round struct {
	Change     float64 // relative change of the profiles after it (+Inf for the first; see RoundChange)
	Iterations int     // inner ALM iterations it used
}

// Fitter fits one profile per stack. Implementations (CPU reference, CUDA)
// must give the same results within the tolerances of the conformance suite
// in basictest. They honour ctx cancellation between iterations.
type Fitter interface {
	Fit(ctx context.Context, stacks []*raster.Stack, p Params) ([]Profile, error)
}

// DeviceTiles is one plane's raw tiles held by a device engine (the GPU's
// DevTiles): sent to the device once, then fitted and corrected from there.
type DeviceTiles interface {
	// Free gives the device memory back; a second Free does nothing.
	Free()
}

// Validate reports the first invalid setting, naming its field.
func (p Params) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case p.WorkingSize < 8 || p.WorkingSize > 4096:
		return fmt.Errorf("basic: WorkingSize %d out of range [8, 4096]", p.WorkingSize)
	case p.MaxIterations < 1:
		return fmt.Errorf("basic: MaxIterations %d must be at least 1", p.MaxIterations)
	case !(p.OptimizationTol > 0) || !finite(p.OptimizationTol):
		return fmt.Errorf("basic: OptimizationTol %g must be positive and finite", p.OptimizationTol)
	case p.MaxReweightIterations < 1:
		return fmt.Errorf("basic: MaxReweightIterations %d must be at least 1", p.MaxReweightIterations)
	case !(p.ReweightTol >= 0) || !finite(p.ReweightTol):
		return fmt.Errorf("basic: ReweightTol %g must be non-negative and finite", p.ReweightTol)
	case !(p.Epsilon > 0) || !finite(p.Epsilon):
		return fmt.Errorf("basic: Epsilon %g must be positive and finite", p.Epsilon)
	case !(p.LambdaFlat >= 0) || !finite(p.LambdaFlat):
		return fmt.Errorf("basic: LambdaFlat %g must be non-negative and finite (0: automatic)", p.LambdaFlat)
	case !(p.LambdaDark >= 0) || !finite(p.LambdaDark):
		return fmt.Errorf("basic: LambdaDark %g must be non-negative and finite (0: automatic)", p.LambdaDark)
	case p.DarkfieldMethod != DarkfieldOriginal && p.DarkfieldMethod != DarkfieldDarkest:
		return fmt.Errorf("basic: DarkfieldMethod %d unknown", int(p.DarkfieldMethod))
	}
	return nil
}
