// Package decon is the deconvolution stage's algorithm: the original's
// Richardson-Lucy (KINTSUGI Kdecon, a port of LsDeconv), its
// Biggs-Andrews accelerated variant and Richardson-Lucy with total
// variation, behind one interface with a CPU reference here and a CUDA
// implementation in internal/gpu.
//
// Data: a raster.Stack (z, y, x), x fastest, in detector counts (float32);
// a psf.Kernel (z, y, x), odd sizes, sum 1.
//
// The original's algorithm, as every implementation runs it:
//  1. raw_max = max(stack).
//  2. Pad each axis symmetrically (mirror including the edge sample, numpy
//     'symmetric') to P = the next 5-smooth length >= n + 4·k (k the PSF's
//     size along that axis), floor((P-n)/2) before and the rest after.
//  3. Richardson-Lucy on the padded stack, starting from it, with linear
//     'same' convolution (zero outside the padded stack):
//     denom = max(conv(d, psf), eps32); d_new = conv(stack/denom, flip(psf))·d,
//     damped as (1-λ)·d_new + λ·conv(d, R) (R: 3x3x3 ones/26, centre 0) when
//     λ > 0; delta = ||d - d_new||₂ over the padded stack; from the second
//     iteration on, delta_rel = (delta_prev - delta)/delta_prev·100 and the
//     loop ends after the iteration where delta_rel <= stop_criterion; at most
//     Iterations iterations; d = |d|.
//  4. Crop the padding (the MATLAB original's crop starts one sample early,
//     an off-by-one of its 1-based indexing; the Python port and this
//     package crop exactly).
//  5. lo, hi = the hist_clip and 100-hist_clip percentiles of the result
//     (numpy's linear interpolation, exact), clip, (r-lo)/(hi-lo)·raw_max.
//  6. Round to uint16 with Quantize (the original truncates; rounding
//     removes its -0.5 count bias, as everywhere in this project).
//
// Biggs-Andrews (MATLAB deconvlucy, cudaDecon): from the third iteration on
// the update starts from the prediction Y = max(X_k + α(X_k - X_{k-1}), 0),
// α = Σ G_{k-1}·G_{k-2} / Σ G_{k-2}², clamped to [0, 1], G_j = X_{j+1} - Y_j;
// the stop rule uses delta = ||X_k - X_{k+1}|| and ignores iterations whose
// step grew (delta_rel < 0, see Stopper).
//
// RL-TV (Dey et al. 2006, "Richardson-Lucy algorithm with total variation
// regularization for 3D confocal microscope deconvolution"): the RL update
// divided by 1 - λ·div(∇d/|∇d|) of the current iterate (TVFactor), per
// plane (two-dimensional: planes are regularised independently, so a
// one-plane PSF still deconvolves them independently), then damped as RL;
// the stop rule is RL's. λ = Params.TV (DefaultTV, Dey et al.'s 0.002).
//
// Chunking: the padded stack is split along y into windows; every
// iteration each window is updated from the previous iterate with a halo of
// 2·(PSF half-width in y) rows (the dependency of one iteration) and only
// its core is kept, so the result equals the unchunked one (the sums of the
// stop rule and of α are accumulated over the cores, in a different order).
package decon

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Algorithms.
const (
	RichardsonLucy = "richardson_lucy"
	BiggsAndrews   = "biggs_andrews"
	// RichardsonLucyTV is Richardson-Lucy with total-variation
	// regularisation (Dey et al. 2006; see TVFactor).
	RichardsonLucyTV = "richardson_lucy_tv"
)

// Boundaries: what the object is taken to be beyond the stack's edges.
const (
	// BoundaryMirror is the original's: the stack mirrored into the padding
	// and fitted there like real data.
	BoundaryMirror = "mirror"
	// BoundaryFree is Bertero and Boccacci's (2005): the object in the
	// padding is unknown and reconstructed, only the observed voxels are
	// fitted (see FreeAlpha).
	BoundaryFree = "free"
)

// FreeAlphaMin is the smallest normalisation α of BoundaryFree that is
// divided by; padded voxels whose light reaches the observed region less
// (α below it) are set to 0.
const FreeAlphaMin = 1e-3

// DefaultTV is λ_TV of RichardsonLucyTV when Params.TV is 0 (dimensionless:
// the TV term div(∇u/|∇u|) does not depend on the intensity scale).
const DefaultTV = 0.002

// MaxTV bounds λ_TV: |div(∇u/|∇u|)| <= 2·√2 in two dimensions, so the TV
// factor 1 - λ·div stays >= 1 - 0.2·2·√2 > 0.43 and the update positive.
const MaxTV = 0.2

// TVEps is ε of the TV term's |∇u|_ε = sqrt(|∇u|² + ε²), relative to the
// input's maximum (raw_max): it only keeps 0/0 out of flat regions.
const TVEps = 1e-4

// Eps is MATLAB's eps('single'), the floor of the RL denominator.
const Eps = float32(1.1920929e-07)

// Params are the settings of one deconvolution.
type Params struct {
	Algorithm     string  // RichardsonLucy (default when ""), BiggsAndrews or RichardsonLucyTV
	Iterations    int     // maximum iterations, >= 1
	StopCriterion float64 // percent; the loop stops when delta_rel <= it (negative: never)
	Damping       float64 // λ in [0, 1]
	HistClip      float64 // percent clipped at each end, [0, 50)
	// TV is λ_TV of RichardsonLucyTV, [0, MaxTV]; 0 = DefaultTV. Set
	// with another algorithm it is an error (Validate).
	TV float64
	// Boundary is BoundaryMirror (default when "") or BoundaryFree.
	Boundary string
	// NoScale returns |RL| cropped, without the percentile clip and rescale
	// (for tests and the accuracy report).
	NoScale bool
	// MemoryBudget bounds the working set of one chunk, bytes; 0 = the
	// implementation's default (CPU: no chunking; GPU: what fits).
	// On the GPU it caps the device memory of the whole run: iterates that
	// do not fit are held in host memory and streamed through the device by
	// y-slabs (Stats.Streamed), with the same result.
	MemoryBudget int64
	// ChunkRows forces chunks of this many padded rows (tests); 0 = from the budget.
	ChunkRows int
	Workers   int // CPU goroutines; 0 = GOMAXPROCS
}

// Validate checks the parameters.
func (p Params) Validate() error {
	switch p.Algorithm {
	case "", RichardsonLucy, BiggsAndrews, RichardsonLucyTV:
	default:
		return fmt.Errorf("decon: algorithm %q: want %s, %s or %s", p.Algorithm, RichardsonLucy, BiggsAndrews, RichardsonLucyTV)
	}
	if !(p.TV >= 0 && p.TV <= MaxTV) {
		return fmt.Errorf("decon: tv_lambda %g: want [0, %g]", p.TV, MaxTV)
	}
	switch p.Boundary {
	case "", BoundaryMirror, BoundaryFree:
	default:
		return fmt.Errorf("decon: boundary %q: want %s or %s", p.Boundary, BoundaryMirror, BoundaryFree)
	}
	if p.TV != 0 && p.Algorithm != RichardsonLucyTV {
		return fmt.Errorf("decon: tv_lambda %g is set but the algorithm is %q: tv_lambda needs %s", p.TV, p.Algorithm, RichardsonLucyTV)
	}
	if p.Iterations < 1 {
		return fmt.Errorf("decon: iterations %d: want >= 1", p.Iterations)
	}
	if math.IsNaN(p.StopCriterion) || math.IsInf(p.StopCriterion, 0) {
		return fmt.Errorf("decon: stop criterion %g: want a finite percentage", p.StopCriterion)
	}
	if !(p.Damping >= 0 && p.Damping <= 1) {
		return fmt.Errorf("decon: damping %g: want [0, 1]", p.Damping)
	}
	if !(p.HistClip >= 0 && p.HistClip < 50) {
		return fmt.Errorf("decon: hist_clip %g: want [0, 50) percent", p.HistClip)
	}
	if p.MemoryBudget < 0 || p.ChunkRows < 0 || p.Workers < 0 {
		return errors.New("decon: negative memory budget, chunk rows or workers")
	}
	return nil
}

// Biggs reports whether p selects the accelerated variant.
func (p Params) Biggs() bool { return p.Algorithm == BiggsAndrews }

// Free reports whether p selects BoundaryFree.
func (p Params) Free() bool { return p.Boundary == BoundaryFree }

// Box is the observed region inside a padded array: planes [Z0, Z1), rows
// [Y0, Y1), columns [X0, X1).
type Box struct{ Z0, Z1, Y0, Y1, X0, X1 int }

// ObservedBox returns the box of the input inside the padded array of g
// (all planes padded).
func (g Geometry) ObservedBox() Box {
	return Box{g.BN, g.BN + g.N, g.BH, g.BH + g.H, g.BW, g.BW + g.W}
}

// In reports whether (z, y, x) lies in b.
func (b Box) In(z, y, x int) bool {
	return z >= b.Z0 && z < b.Z1 && y >= b.Y0 && y < b.Y1 && x >= b.X0 && x < b.X1
}

// FreeAlpha is the normalisation of BoundaryFree (Bertero and Boccacci,
// "A simple method for the reduction of boundary effects in the
// Richardson-Lucy approach to image deconvolution", A&A 437, 2005): with M
// the indicator of the observed box, the RL correction conv(M·obs /
// conv(d, k), flip k) is divided by α = conv(M, flip k), the fraction of a
// voxel's light that reaches observed voxels (1 inside, less towards and
// beyond the edges). As M is a box, α(z, y, x) is the sum of flip(k) over a
// sub-box of taps, read from the kernel's summed-area table (float64; the
// GPU uses the same table and formula).
type FreeAlpha struct {
	SAT        []float64 // (NZ+1) x (NY+1) x (NX+1): SAT[a][b][c] = Σ flip(k) over taps < (a, b, c)
	NZ, NY, NX int
	Box        Box
}

// NewFreeAlpha builds the table of k for the observed box b.
func NewFreeAlpha(k *psf.Kernel, b Box) *FreeAlpha {
	kf := k.Flipped()
	f := &FreeAlpha{NZ: k.NZ, NY: k.NY, NX: k.NX, Box: b, SAT: make([]float64, (k.NZ+1)*(k.NY+1)*(k.NX+1))}
	at := func(a, b, c int) int { return (a*(f.NY+1)+b)*(f.NX+1) + c }
	for a := 1; a <= k.NZ; a++ {
		for bb := 1; bb <= k.NY; bb++ {
			for c := 1; c <= k.NX; c++ {
				v := float64(kf.Data[((a-1)*k.NY+bb-1)*k.NX+c-1])
				v += f.SAT[at(a-1, bb, c)] + f.SAT[at(a, bb-1, c)] + f.SAT[at(a, bb, c-1)]
				v -= f.SAT[at(a-1, bb-1, c)] + f.SAT[at(a-1, bb, c-1)] + f.SAT[at(a, bb-1, c-1)]
				v += f.SAT[at(a-1, bb-1, c-1)]
				f.SAT[at(a, bb, c)] = v
			}
		}
	}
	return f
}

// tapRange returns the taps [t0, t1) of a kernel n long (centre n/2) whose
// 'same' convolution at i reads a source sample inside [lo, hi).
func tapRange(i, n, lo, hi int) (int, int) {
	c := n / 2
	return max(0, i+c-hi+1), min(n, i+c-lo+1)
}

// At returns α at padded voxel (z, y, x), float32.
func (f *FreeAlpha) At(z, y, x int) float32 {
	a0, a1 := tapRange(z, f.NZ, f.Box.Z0, f.Box.Z1)
	b0, b1 := tapRange(y, f.NY, f.Box.Y0, f.Box.Y1)
	c0, c1 := tapRange(x, f.NX, f.Box.X0, f.Box.X1)
	if a0 >= a1 || b0 >= b1 || c0 >= c1 {
		return 0
	}
	at := func(a, b, c int) float64 { return f.SAT[(a*(f.NY+1)+b)*(f.NX+1)+c] }
	s := at(a1, b1, c1) - at(a0, b1, c1) - at(a1, b0, c1) - at(a1, b1, c0)
	s = s + at(a0, b0, c1) + at(a0, b1, c0) + at(a1, b0, c0) - at(a0, b0, c0)
	return float32(s)
}

// FreeCorrect divides a correction by α: c/α, or 0 where α < FreeAlphaMin.
func FreeCorrect(c, alpha float32) float32 {
	if alpha < FreeAlphaMin {
		return 0
	}
	return c / alpha
}

// ZeroOutside sets the voxels of a padded stack outside b to 0 (the data
// term of BoundaryFree fits only observed voxels).
func ZeroOutside(s *raster.Stack, b Box) {
	for z := 0; z < s.N; z++ {
		for y := 0; y < s.H; y++ {
			row := s.Pix[(z*s.H+y)*s.W:][:s.W]
			if z < b.Z0 || z >= b.Z1 || y < b.Y0 || y >= b.Y1 {
				clear(row)
				continue
			}
			clear(row[:b.X0])
			clear(row[b.X1:])
		}
	}
}

// TVWeight returns λ_TV of the run: p.TV (DefaultTV when 0) for
// RichardsonLucyTV, 0 for the other algorithms.
func (p Params) TVWeight() float64 {
	if p.Algorithm != RichardsonLucyTV {
		return 0
	}
	if p.TV == 0 {
		return DefaultTV
	}
	return p.TV
}

// HaloRows is Halo for p: the TV term, like the damping kernel, reads the
// neighbouring rows of the iterate (one row each side).
func (p Params) HaloRows(k *psf.Kernel) int {
	h := Halo(k, p.Damping)
	if p.TVWeight() > 0 {
		h = max(h, 1)
	}
	return h
}

// Stats describe a run.
type Stats struct {
	Iterations int       // iterations run
	DeltaRel   []float64 // delta_rel (percent) after each iteration; 0 for the first
	Stopped    bool      // ended by the stop rule (else by the cap)
	RawMax     float64   // max of the input, counts
	Lo, Hi     float64   // clip values (percentiles of |RL|)
	Padded     [3]int    // padded size (z, y, x)
	Chunks     int       // windows per iteration
	Streamed   bool      // GPU: iterates held in host memory, streamed through the device by slabs
	// Phases are seconds per phase of the implementation, for benchmarks
	// (GPU streamed form: pin, pad, iterate, finish); nil when not measured.
	Phases map[string]float64
}

// Deconvolver deconvolves one channel's stack. The result is in counts
// (rescaled to raw_max, before rounding), or |RL| when p.NoScale.
type Deconvolver interface {
	Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p Params) (*raster.Stack, Stats, error)
}

// DeviceStack is a float32 (z, y, x) stack held in an engine's device
// memory, filled and read back one uint16 plane (counts, H x W) at a time,
// so that a stage's host holds the planes in flight, not the stack. The
// CUDA engine makes them (internal/gpu: DeconDeviceStack) and deconvolves
// them on the card (DeconvolveDeviceStack); deconstage finds that form by
// interface assertion (deconstage.PlaneEngine).
type DeviceStack interface {
	// Dims returns the stack's size (z, y, x).
	Dims() (n, h, w int)
	// PutGray16 copies pg into plane z as float32 (exact); it returns when
	// pg may be reused.
	PutGray16(ctx context.Context, z int, pg *raster.Gray16) error
	// GetGray16 rounds plane z to uint16 as Quantize does and copies it
	// into dst.
	GetGray16(ctx context.Context, z int, dst *raster.Gray16) error
	// Free gives the device memory back; a second Free does nothing.
	Free()
}

// ErrInput marks errors caused by the input data (all-zero stack, bad
// sizes); the stage maps them to the usage exit code.
var ErrInput = errors.New("decon: bad input")

// CheckInput validates a stack and kernel for Deconvolve.
func CheckInput(in *raster.Stack, k *psf.Kernel) error {
	if in == nil || in.N < 1 || in.H < 1 || in.W < 1 || len(in.Pix) != in.N*in.H*in.W {
		return fmt.Errorf("%w: stack missing or of inconsistent size", ErrInput)
	}
	if err := k.Check(); err != nil {
		return err
	}
	var mx float32
	for _, v := range in.Pix {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: value %g (want finite counts >= 0)", ErrInput, v)
		}
		mx = max(mx, v)
	}
	if mx == 0 {
		return fmt.Errorf("%w: the stack is all zero", ErrInput)
	}
	return nil
}

// RawMax returns the maximum of the stack.
func RawMax(pix []float32) float64 {
	var m float32
	for _, v := range pix {
		m = max(m, v)
	}
	return float64(m)
}

// Smooth5 returns the smallest n' >= n whose prime factors are all <= 5
// (MATLAB findGoodFFTLength, scipy next_fast_len for 2/3/5).
func Smooth5(n int) int {
	for m := max(n, 1); ; m++ {
		r := m
		for _, f := range []int{2, 3, 5} {
			for r%f == 0 {
				r /= f
			}
		}
		if r == 1 {
			return m
		}
	}
}

// PadSize returns the padded length of an axis of n samples for a PSF k
// samples long, and the padding before (the rest goes after).
func PadSize(n, k int) (total, before int) {
	total = Smooth5(n + 4*k)
	return total, (total - n) / 2
}

// Geometry is the padded layout of a stack for a kernel.
type Geometry struct {
	N, H, W    int // input
	PN, PH, PW int // padded
	BN, BH, BW int // padding before
}

// NewGeometry computes the padding of an n x h x w stack for kernel k.
func NewGeometry(n, h, w int, k *psf.Kernel) Geometry {
	g := Geometry{N: n, H: h, W: w}
	g.PN, g.BN = PadSize(n, k.NZ)
	g.PH, g.BH = PadSize(h, k.NY)
	g.PW, g.BW = PadSize(w, k.NX)
	return g
}

// Pad returns the padded stack.
func Pad(in *raster.Stack, g Geometry) *raster.Stack {
	out := raster.NewStack(g.PN, g.PH, g.PW)
	xs := make([]int, g.PW)
	for x := range xs {
		xs[x] = raster.Mirror(x-g.BW, g.W)
	}
	for z := 0; z < g.PN; z++ {
		sz := raster.Mirror(z-g.BN, g.N)
		for y := 0; y < g.PH; y++ {
			sy := raster.Mirror(y-g.BH, g.H)
			src := in.Pix[(sz*g.H+sy)*g.W:][:g.W]
			dst := out.Pix[(z*g.PH+y)*g.PW:][:g.PW]
			for x, sx := range xs {
				dst[x] = src[sx]
			}
		}
	}
	return out
}

// Crop returns |padded| without the padding, in dst's memory when dst has
// room for it (nil: a new stack).
func Crop(dst []float32, padded *raster.Stack, g Geometry) *raster.Stack {
	n := g.N * g.H * g.W
	if cap(dst) < n {
		dst = make([]float32, n)
	}
	out := &raster.Stack{N: g.N, H: g.H, W: g.W, Pix: dst[:n]}
	for z := 0; z < g.N; z++ {
		for y := 0; y < g.H; y++ {
			src := padded.Pix[((z+g.BN)*g.PH+y+g.BH)*g.PW+g.BW:][:g.W]
			dst := out.Pix[(z*g.H+y)*g.W:][:g.W]
			for x, v := range src {
				dst[x] = float32(math.Abs(float64(v)))
			}
		}
	}
	return out
}

// Stopper applies the original's stop rule to successive deltas.
// IgnoreGrowth (set for Biggs-Andrews) does not stop on a negative
// delta_rel: the accelerated steps grow while α rises, which the original
// rule (made for plain RL, whose steps shrink) would take for convergence
// after the third iteration.
type Stopper struct {
	Criterion    float64
	IgnoreGrowth bool
	prev         float64
	i            int
}

// Step takes the delta of iteration i (0-based, in order) and returns
// delta_rel (percent, 0 for the first) and whether to stop after it.
func (s *Stopper) Step(delta float64) (rel float64, stop bool) {
	defer func() { s.prev = delta; s.i++ }()
	if s.i == 0 {
		return 0, false
	}
	rel = (s.prev - delta) / s.prev * 100
	if s.prev == 0 {
		rel = 0 // 0/0: converged exactly
	}
	if s.IgnoreGrowth && rel < 0 {
		return rel, false
	}
	return rel, rel <= s.Criterion
}

// BiggsAlpha is the acceleration factor from Σ G_{k-1}·G_{k-2} and
// Σ G_{k-2}², clamped to [0, 1] (MATLAB deconvlucy adds eps to the denominator).
func BiggsAlpha(dot, norm2 float64) float64 {
	a := dot / (norm2 + 2.220446049250313e-16)
	return math.Max(0, math.Min(1, a))
}

// Percentile returns numpy's linear-interpolation q-th percentile of
// sorted order statistics: pos = q/100·(n-1), v = s[⌊pos⌋] + frac·(s[⌊pos⌋+1] - s[⌊pos⌋]).
// rank(i) must return the i-th smallest value.
func Percentile(n int, q float64, rank func(i int) float64) float64 {
	pos := q / 100 * float64(n-1)
	i := int(math.Floor(pos))
	i = max(0, min(i, n-1))
	v := rank(i)
	if f := pos - float64(i); f > 0 && i+1 < n {
		v += f * (rank(i+1) - v)
	}
	return v
}

// PercentileRanks returns the order-statistic ranks Percentile needs for q.
func PercentileRanks(n int, q float64) []int {
	pos := q / 100 * float64(n-1)
	i := max(0, min(int(math.Floor(pos)), n-1))
	if pos-float64(i) > 0 && i+1 < n {
		return []int{i, i + 1}
	}
	return []int{i}
}

// Rescale maps r to counts: clip to [lo, hi], (r-lo)/(hi-lo)·rawMax (float64
// maths). A degenerate range (hi <= lo, a constant result) gives 0.
func Rescale(r float32, lo, hi, rawMax float64) float32 {
	if !(hi > lo) {
		return 0
	}
	v := math.Max(lo, math.Min(hi, float64(r)))
	return float32((v - lo) / (hi - lo) * rawMax)
}

// Quantize converts counts to uint16: round half up, clip to [0, 65535].
func Quantize(dst []uint16, src []float32) []uint16 {
	if dst == nil {
		dst = make([]uint16, len(src))
	}
	for i, v := range src {
		dst[i] = raster.Clip16(float64(v) + 0.5)
	}
	return dst
}

// Halo is the number of rows a window needs on each side for one exact
// iteration: two convolutions with the PSF (2·half-height), at least 1 for
// the damping kernel (3x3x3, applied to the iterate).
func Halo(k *psf.Kernel, damping float64) int {
	h := 2 * (k.NY / 2)
	if damping > 0 {
		h = max(h, 1)
	}
	return h
}

// Window is a row range of the padded stack: Lo..Hi (with halo) and the
// core Core0..Core1 it owns.
type Window struct{ Lo, Hi, Core0, Core1 int }

// PlanWindows splits ph padded rows into windows whose cores have at most
// rows rows (rows <= 0: one window).
func PlanWindows(ph, rows, halo int) []Window {
	if rows <= 0 || rows >= ph {
		return []Window{{0, ph, 0, ph}}
	}
	var ws []Window
	for c := 0; c < ph; c += rows {
		e := min(ph, c+rows)
		ws = append(ws, Window{Lo: max(0, c-halo), Hi: min(ph, e+halo), Core0: c, Core1: e})
	}
	return ws
}

// RowsForBudget returns the core rows per window so that a window's working
// set (arrays float32 arrays of pn x rows+2·halo x pw) fits budget bytes; 0
// means no chunking.
func RowsForBudget(budget int64, arrays, pn, ph, pw, halo int) int {
	if budget <= 0 {
		return 0
	}
	per := int64(arrays) * int64(pn) * int64(pw) * 4
	rows := int(budget/per) - 2*halo
	if rows >= ph {
		return 0
	}
	return max(rows, max(1, halo))
}

// Finish crops, takes |.|, and (unless p.NoScale) clips at the exact
// percentiles and rescales, filling st.Lo/Hi. The CPU path; the GPU does
// the same on the device.
// dst (may be nil) is reused for the result when large enough.
func Finish(dst []float32, padded *raster.Stack, g Geometry, p Params, st *Stats) *raster.Stack {
	out := Crop(dst, padded, g)
	if p.NoScale {
		return out
	}
	lo, hi := Percentiles(out.Pix, p.HistClip, 100-p.HistClip)
	st.Lo, st.Hi = lo, hi
	for i, v := range out.Pix {
		out.Pix[i] = Rescale(v, lo, hi, st.RawMax)
	}
	return out
}
