package accuracy

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
)

// DeconReport scores deconvolution on synthetic stacks with a known sharp
// truth (decon.NewScene: spots and lines blurred by the PSF, Poisson shot
// noise and Gaussian read noise), for the original's light-sheet PSF of the
// four default channels and a widefield Born-Wolf PSF.
type DeconReport struct {
	Size    [3]int // z, y, x
	Read    float64
	Cases   []DeconCase
	Content []DeconContent // EvaluateDeconContent, when run
}

// DeconCase is one PSF: the relative RMS error (||r - truth|| / ||truth||,
// counts, |RL| before the percentile rescale) of the noisy observation and
// of both variants with the original's stop rule, how many iterations
// Biggs-Andrews (stop rule off) needs to reach RL's final error, and
// RL-TV's error after as many iterations as RL ran (stop rule off).
type DeconCase struct {
	Name        string
	Kernel      string // x,y,z
	Before      float64
	RLErr       float64
	RLIters     int
	BiggsErr    float64
	BiggsIters  int
	BiggsToRL   int // 0: not reached within the cap
	Cap         int
	BlurredOnly float64 // error of the noise-free blurred stack (the blur alone)
	TVErr       float64 // RL-TV (decon.DefaultTV) after RLIters iterations
	FreeErr     float64 // RL with the free boundary after RLIters iterations
	FreeRule    float64 // RL with the free boundary and the 5 % rule
	FreeIters   int     // its iterations
}

// DeconContent is one PSF and one kind of content (decon.NewSceneKind):
// the errors of the observation, RL with the original's stop rule, RL-TV
// after as many iterations as RL ran, and Biggs-Andrews with the stop rule.
type DeconContent struct {
	PSF, Kind  string
	Edge       string // "zero" (nothing beyond the stack's edges) or "cropped" (CropScene of a larger field)
	Before     float64
	RLErr      float64
	RLIters    int
	TVErr      float64
	BiggsErr   float64
	BiggsIters int
	FreeErr    float64 // RL with the free boundary after RLIters iterations
	FreeRule   float64 // RL with the free boundary and the 5 % rule
	FreeIters  int     // its iterations
}

// FreeGain returns the free boundary's error at RL's iterations relative
// to RL's, minus 1.
func (c DeconContent) FreeGain() float64 { return c.FreeErr/c.RLErr - 1 }

// TVGain returns RL-TV's error relative to RL's, minus 1 (negative: RL-TV
// is closer to the truth).
func (c DeconContent) TVGain() float64 { return c.TVErr/c.RLErr - 1 }

// deconPSFCase names a PSF of the report: a model and a default channel.
type deconPSFCase struct {
	name  string
	model string
	ch    int
}

func (c deconPSFCase) kernel() (*psf.Kernel, error) {
	k, _, err := psf.Make(c.model, DeconOptics(c.ch))
	return k, err
}

// deconPSFs are the report's PSFs: the original's light-sheet PSF of the
// four default channels and the widefield PSF of the shortest and longest.
var deconPSFs = []deconPSFCase{{"lightsheet ch1 (358/461)", "lightsheet", 1}, {"lightsheet ch2 (753/775)", "lightsheet", 2},
	{"lightsheet ch3 (560/575)", "lightsheet", 3}, {"lightsheet ch4 (648/668)", "lightsheet", 4},
	{"widefield ch1 (461)", "widefield", 1}, {"widefield ch4 (668)", "widefield", 4}}

// DeconContentPSFs are the PSFs of the content table (indices into the
// report's PSFs): light-sheet DAPI and channel 3, widefield DAPI.
var DeconContentPSFs = []int{0, 2, 4}

// EvaluateDeconContent scores RL, RL-TV and Biggs-Andrews on every kind of
// content (decon.SceneKinds) for the PSFs psfs (indices of the report's
// PSFs; nil: DeconContentPSFs), z x h x w scenes (seed 1), read noise
// readNoise counts.
func EvaluateDeconContent(ctx context.Context, impl decon.Deconvolver, psfs []int, z, h, w int, readNoise float64, workers int) ([]DeconContent, error) {
	if psfs == nil {
		psfs = DeconContentPSFs
	}
	var out []DeconContent
	for _, i := range psfs {
		c := deconPSFs[i]
		k, err := c.kernel()
		if err != nil {
			return nil, err
		}
		for _, edge := range []string{"zero", "cropped"} {
			for _, kind := range decon.SceneKinds {
				sc, err := deconScene(kind, edge, z, h, w, k, readNoise)
				if err != nil {
					return nil, err
				}
				dc, err := deconContentCase(ctx, impl, sc, k, workers)
				if err != nil {
					return nil, fmt.Errorf("%s %s %s: %w", c.name, kind, edge, err)
				}
				dc.PSF, dc.Kind, dc.Edge = c.name, kind, edge
				out = append(out, dc)
			}
		}
	}
	return out, nil
}

// deconScene draws a content scene of z x h x w: NewSceneKind, or with
// edge "cropped" the middle of one 16 px larger on each side (and 4 planes
// for a 3-D PSF).
func deconScene(kind, edge string, z, h, w int, k *psf.Kernel, readNoise float64) (decon.Scene, error) {
	if edge == "zero" {
		return decon.NewSceneKind(kind, 1, z, h, w, k, readNoise)
	}
	mz := 0
	if k.NZ > 1 {
		mz = 4
	}
	sc, err := decon.NewSceneKind(kind, 1, z+2*mz, h+32, w+32, k, readNoise)
	if err != nil {
		return sc, err
	}
	return decon.CropScene(sc, mz, 16, 16), nil
}

// deconContentCase runs RL, the free boundary, RL-TV and Biggs-Andrews on sc.
func deconContentCase(ctx context.Context, impl decon.Deconvolver, sc decon.Scene, k *psf.Kernel, workers int) (DeconContent, error) {
	var err error
	dc := DeconContent{Before: decon.RelRMS(sc.Noisy.Pix, sc.Truth.Pix)}
	p := decon.Params{Algorithm: decon.RichardsonLucy, Iterations: 25, StopCriterion: 5, HistClip: 0.01, NoScale: true, Workers: workers}
	if dc.RLErr, dc.RLIters, err = deconErr(ctx, impl, sc, k, p); err != nil {
		return dc, err
	}
	q := p
	q.Algorithm, q.Iterations, q.StopCriterion = decon.RichardsonLucyTV, dc.RLIters, -1e9
	if dc.TVErr, _, err = deconErr(ctx, impl, sc, k, q); err != nil {
		return dc, err
	}
	q.Algorithm, q.Boundary = decon.RichardsonLucy, decon.BoundaryFree
	if dc.FreeErr, _, err = deconErr(ctx, impl, sc, k, q); err != nil {
		return dc, err
	}
	q.Iterations, q.StopCriterion = p.Iterations, p.StopCriterion
	if dc.FreeRule, dc.FreeIters, err = deconErr(ctx, impl, sc, k, q); err != nil {
		return dc, err
	}
	p.Algorithm = decon.BiggsAndrews
	if dc.BiggsErr, dc.BiggsIters, err = deconErr(ctx, impl, sc, k, p); err != nil {
		return dc, err
	}
	return dc, nil
}

// deconErr deconvolves sc's observation and returns the relative RMS error
// against its truth and the iterations run.
func deconErr(ctx context.Context, impl decon.Deconvolver, sc decon.Scene, k *psf.Kernel, p decon.Params) (float64, int, error) {
	r, st, err := impl.Deconvolve(ctx, sc.Noisy, k, p)
	if err != nil {
		return 0, 0, err
	}
	return decon.RelRMS(r.Pix, sc.Truth.Pix), st.Iterations, nil
}

// DeconOptics are the original's default optics with channel ch's default
// wavelengths (1 DAPI 358/461, 2 Cy7 753/775, 3 560/575, 4 648/668 nm).
func DeconOptics(ch int) psf.Optics {
	w := [][2]float64{{358, 461}, {753, 775}, {560, 575}, {648, 668}}[(ch-1)%4]
	return psf.Optics{DXY: 377, DZ: 1500, NA: 0.75, RI: 1.44, ExNM: w[0], EmNM: w[1], SlitMM: 6.5, FCylMM: 1}
}

// EvaluateDecon runs the report with impl (decon.CPU for the command) on a
// z x h x w scene per PSF (seed 1), read noise readNoise counts.
func EvaluateDecon(ctx context.Context, impl decon.Deconvolver, z, h, w int, readNoise float64, workers int) (DeconReport, error) {
	r := DeconReport{Size: [3]int{z, h, w}, Read: readNoise}
	for _, c := range deconPSFs {
		k, err := c.kernel()
		if err != nil {
			return r, err
		}
		sc := decon.NewScene(1, z, h, w, k, readNoise)
		p := decon.Params{Algorithm: decon.RichardsonLucy, Iterations: 25, StopCriterion: 5, HistClip: 0.01, NoScale: true, Workers: workers}
		dc := DeconCase{Name: c.name, Kernel: k.String(), Cap: 25,
			Before:      decon.RelRMS(sc.Noisy.Pix, sc.Truth.Pix),
			BlurredOnly: decon.RelRMS(sc.Blurred.Pix, sc.Truth.Pix)}
		rl, st, err := impl.Deconvolve(ctx, sc.Noisy, k, p)
		if err != nil {
			return r, fmt.Errorf("%s: %w", c.name, err)
		}
		dc.RLErr, dc.RLIters = decon.RelRMS(rl.Pix, sc.Truth.Pix), st.Iterations
		p.Algorithm = decon.BiggsAndrews
		bg, st, err := impl.Deconvolve(ctx, sc.Noisy, k, p)
		if err != nil {
			return r, fmt.Errorf("%s: %w", c.name, err)
		}
		dc.BiggsErr, dc.BiggsIters = decon.RelRMS(bg.Pix, sc.Truth.Pix), st.Iterations
		p.StopCriterion = -1e9
		q := p
		q.Algorithm, q.Iterations = decon.RichardsonLucyTV, dc.RLIters
		if dc.TVErr, _, err = deconErr(ctx, impl, sc, k, q); err != nil {
			return r, fmt.Errorf("%s: %w", c.name, err)
		}
		q.Algorithm, q.Boundary = decon.RichardsonLucy, decon.BoundaryFree
		if dc.FreeErr, _, err = deconErr(ctx, impl, sc, k, q); err != nil {
			return r, fmt.Errorf("%s: %w", c.name, err)
		}
		q.Iterations, q.StopCriterion = 25, 5
		if dc.FreeRule, dc.FreeIters, err = deconErr(ctx, impl, sc, k, q); err != nil {
			return r, fmt.Errorf("%s: %w", c.name, err)
		}
		for n := 1; n <= dc.Cap; n++ {
			p.Iterations = n
			b, _, err := impl.Deconvolve(ctx, sc.Noisy, k, p)
			if err != nil {
				return r, err
			}
			if decon.RelRMS(b.Pix, sc.Truth.Pix) <= dc.RLErr {
				dc.BiggsToRL = n
				break
			}
		}
		r.Cases = append(r.Cases, dc)
	}
	return r, nil
}

// WriteDeconTable prints the report.
func WriteDeconTable(w io.Writer, r DeconReport) error {
	fmt.Fprintf(w, "Deconvolution on synthetic %dx%dx%d (x,y,z) stacks, Poisson + %.0f counts read noise; relative RMS error vs the sharp truth (|RL| before rescale)\n",
		r.Size[2], r.Size[1], r.Size[0], r.Read)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PSF\tkernel\tblur only\tobserved\tRL (5% rule)\titers\tfree boundary (RL's iters)\tfree (5% rule)\titers\tRL-TV (RL's iters)\tBiggs (5% rule)\titers\tBiggs iters to RL's error")
	for _, c := range r.Cases {
		to := fmt.Sprint(c.BiggsToRL)
		if c.BiggsToRL == 0 {
			to = fmt.Sprintf("> %d", c.Cap)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%.4f\t%.4f\t%d\t%.4f\t%.4f\t%d\t%.4f\t%.4f\t%d\t%s\n", c.Name, c.Kernel, c.BlurredOnly, c.Before, c.RLErr, c.RLIters,
			c.FreeErr, c.FreeRule, c.FreeIters, c.TVErr, c.BiggsErr, c.BiggsIters, to)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Content) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nBy content (decon.NewSceneKind, same size and noise; edges zero: nothing beyond the stack, cropped: the middle of a larger field): the free boundary and RL-TV (tv_lambda %g) after as many iterations as RL\n", decon.DefaultTV)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PSF\tcontent\tedges\tobserved\tRL (5% rule)\titers\tfree (RL's iters)\tfree vs RL\tfree (5% rule)\titers\tRL-TV\tRL-TV vs RL\tBiggs (5% rule)\titers")
	for _, c := range r.Content {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t%.4f\t%d\t%.4f\t%+.1f%%\t%.4f\t%d\t%.4f\t%+.1f%%\t%.4f\t%d\n", c.PSF, c.Kind, c.Edge, c.Before, c.RLErr, c.RLIters,
			c.FreeErr, 100*c.FreeGain(), c.FreeRule, c.FreeIters, c.TVErr, 100*c.TVGain(), c.BiggsErr, c.BiggsIters)
	}
	return tw.Flush()
}
