package edf

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Methods.
const (
	MethodVariance = "variance"
	MethodWavelet  = "wavelet"
)

// SatLevel is the original's saturation threshold for the quality gate, counts.
const SatLevel = 64000

// TruncateGauss is scipy.ndimage's default Gaussian truncation (sigmas).
const TruncateGauss = 4.0

// Params are the EDF settings (config.yaml edf:).
type Params struct {
	RadiusX, RadiusY int     // variance window half-sizes, px: window (2r+1)
	Sigma            float64 // Gaussian pre-filter sigma, px
	ZSmoothSigma     float64 // index-map smoothing sigma, px; 0 = off
	Method           string  // MethodVariance or MethodWavelet
	WaveletLevels    int     // wavelet levels; 0 = automatic (AutoLevels)
}

// FromConfig converts the config's edf section.
func FromConfig(c config.EDF) Params {
	m := c.Method
	if m == "" {
		m = MethodVariance
	}
	return Params{RadiusX: c.RadiusX, RadiusY: c.RadiusY, Sigma: c.Sigma, ZSmoothSigma: c.ZSmoothSigma,
		Method: m, WaveletLevels: c.WaveletLevels}
}

// DefaultParams are the original's settings (radius 2, sigma 10, z smoothing 1).
func DefaultParams() Params { return FromConfig(config.DefaultEDF()) }

// Validate checks the parameters; errors name the config key.
func (p Params) Validate() error {
	switch {
	case p.RadiusX < 0 || p.RadiusX > 1000:
		return fmt.Errorf("edf.radius_x %d: want 0..1000", p.RadiusX)
	case p.RadiusY < 0 || p.RadiusY > 1000:
		return fmt.Errorf("edf.radius_y %d: want 0..1000", p.RadiusY)
	case !(p.Sigma >= 0) || p.Sigma > 1000:
		return fmt.Errorf("edf.sigma %g: want 0..1000", p.Sigma)
	case !(p.ZSmoothSigma >= 0) || p.ZSmoothSigma > 1000:
		return fmt.Errorf("edf.z_smooth_sigma %g: want 0..1000", p.ZSmoothSigma)
	case p.Method != MethodVariance && p.Method != MethodWavelet:
		return fmt.Errorf("edf.method %q: want %s or %s", p.Method, MethodVariance, MethodWavelet)
	case p.WaveletLevels < 0 || p.WaveletLevels > MaxWaveletLevels:
		return fmt.Errorf("edf.wavelet_levels %d: want 0 (automatic) .. %d", p.WaveletLevels, MaxWaveletLevels)
	}
	return nil
}

// Gate is the slice quality gate (config.yaml quality_gate:).
type Gate struct {
	MaxZeroFrac float64 // a slice with more than this fraction of zero pixels is excluded
	MaxSatFrac  float64 // ... or more than this fraction of pixels >= SatLevel
	MinValid    int     // fewer valid slices fail the channel
}

// GateFromConfig converts the config's quality_gate section.
func GateFromConfig(q config.QualityGate) Gate {
	return Gate{MaxZeroFrac: q.MaxZeroPct, MaxSatFrac: q.MaxSatPct, MinValid: q.MinValidSlices}
}

// SliceStats are one slice's gate counts.
type SliceStats struct {
	Pixels    int64 // W*H
	Zeros     int64 // pixels == 0
	Saturated int64 // pixels >= SatLevel
}

// ZeroFrac and SatFrac are the fractions the gate compares.
func (s SliceStats) ZeroFrac() float64 { return float64(s.Zeros) / float64(s.Pixels) }
func (s SliceStats) SatFrac() float64  { return float64(s.Saturated) / float64(s.Pixels) }

// Valid reports whether the slice passes the gate (the original's strict
// comparisons: excluded when the fraction is greater than the limit).
func (g Gate) Valid(s SliceStats) bool {
	return s.Pixels > 0 && !(s.ZeroFrac() > g.MaxZeroFrac) && !(s.SatFrac() > g.MaxSatFrac)
}

// StatsOf counts one plane's zeros and saturated pixels.
func StatsOf(pix []uint16) SliceStats {
	s := SliceStats{Pixels: int64(len(pix))}
	for _, v := range pix {
		if v == 0 {
			s.Zeros++
		} else if v >= SatLevel {
			s.Saturated++
		}
	}
	return s
}

// ErrTooFewSlices is wrapped by Select's error when fewer slices than the
// gate's MinValid pass it.
var ErrTooFewSlices = errors.New("too few valid slices")

// GateError is Select's failure: the per-slice figures, for the message.
type GateError struct {
	Stats []SliceStats
	Valid int
	Gate  Gate
}

func (e *GateError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d of %d slices pass the quality gate (quality_gate.min_valid_slices %d; excluded: zeros > %g or >= %d counts > %g):",
		ErrTooFewSlices, e.Valid, len(e.Stats), e.Gate.MinValid, e.Gate.MaxZeroFrac, SatLevel, e.Gate.MaxSatFrac)
	for i, s := range e.Stats {
		if i == 12 {
			fmt.Fprintf(&b, " ...")
			break
		}
		fmt.Fprintf(&b, " z%d zeros %.3f sat %.3f;", i+1, s.ZeroFrac(), s.SatFrac())
	}
	return strings.TrimSuffix(b.String(), ";")
}

func (e *GateError) Unwrap() error { return ErrTooFewSlices }

// Select applies the gate: it returns the indices (ascending) of the slices
// to fuse: the valid ones, minus the first and the last valid one when more
// than 4 are valid. Fewer than g.MinValid valid slices is a *GateError.
func Select(stats []SliceStats, g Gate) ([]int, error) {
	var valid []int
	for i, s := range stats {
		if g.Valid(s) {
			valid = append(valid, i)
		}
	}
	if len(valid) < g.MinValid || len(valid) == 0 {
		return nil, &GateError{Stats: stats, Valid: len(valid), Gate: g}
	}
	if len(valid) > 4 {
		valid = valid[1 : len(valid)-1]
	}
	return valid, nil
}

// Result is one channel's EDF.
type Result struct {
	Out   *raster.Gray16 // counts, (y, x)
	Index []uint16       // per pixel: index into the planes given of the slice used (variance; wavelet: the height map)
	Stats []SliceStats   // gate counts of every plane given
	Used  []int          // the planes fused (Select's result)
}

// Fuser computes EDF planes on one device.
type Fuser interface {
	// Name says which implementation runs, for logs.
	Name() string
	// EDF applies the gate to planes (z order, all the same size), selects
	// the slices (Select) and fuses them with p. A gate failure is a
	// *GateError (errors.Is(err, ErrTooFewSlices)).
	EDF(ctx context.Context, planes []*raster.Gray16, g Gate, p Params) (*Result, error)
}

// DeviceStack is a uint16 (z, y, x) stack in counts held in an engine's
// device memory, filled one plane at a time and fused there (the same
// result as Fuser.EDF on the same planes), so that a stage's host holds
// the planes in flight, not the stack. The CUDA engine makes them
// (internal/gpu: EDFDeviceStack); edfstage finds that form by interface
// assertion.
type DeviceStack interface {
	// Put copies pg (H x W) into plane z; it returns when pg may be reused.
	// Safe from several goroutines.
	Put(ctx context.Context, z int, pg *raster.Gray16) error
	// Fuse applies g to the planes, selects the slices and fuses them with p.
	Fuse(ctx context.Context, g Gate, p Params) (*Result, error)
	// Free gives the device memory back; a second Free does nothing.
	Free()
}

// CheckPlanes checks that planes is a non-empty stack of equal-size planes.
func CheckPlanes(planes []*raster.Gray16) error {
	if len(planes) == 0 {
		return errors.New("edf: no planes")
	}
	w, h := 0, 0
	for i, p := range planes {
		if p == nil || p.W < 1 || p.H < 1 || len(p.Pix) != p.W*p.H {
			return fmt.Errorf("edf: plane %d is missing or malformed", i)
		}
		if i == 0 {
			w, h = p.W, p.H
		} else if p.W != w || p.H != h {
			return fmt.Errorf("edf: plane %d is %dx%d, plane 0 is %dx%d (W x H)", i, p.W, p.H, w, h)
		}
	}
	if len(planes) > math.MaxUint16 {
		return fmt.Errorf("edf: %d planes: at most %d", len(planes), math.MaxUint16)
	}
	return nil
}

// GaussWeights returns scipy's _gaussian_kernel1d(sigma, 0, R) half kernel:
// w[j] for j = 0..R, R = int(4*sigma + 0.5), exp(-j²/(2σ²)) normalised so
// that the full kernel w[R..1], w[0], w[1..R] sums to 1 (summed from -R to
// R). sigma 0 gives {1}.
func GaussWeights(sigma float64) []float64 {
	if sigma <= 0 {
		return []float64{1}
	}
	r := int(TruncateGauss*sigma + 0.5)
	full := make([]float64, 2*r+1)
	s2 := sigma * sigma
	var sum float64
	for i := range full {
		x := float64(i - r)
		full[i] = math.Exp(-0.5 / s2 * (x * x))
		sum += full[i]
	}
	w := make([]float64, r+1)
	for j := range w {
		w[j] = full[r+j] / sum
	}
	return w
}

// Reflect maps index i onto [0, n) with scipy's 'reflect' boundary
// (d c b a | a b c d | d c b a), repeated as often as needed.
func Reflect(i, n int) int {
	if i >= 0 && i < n {
		return i
	}
	p := 2 * n
	m := i % p
	if m < 0 {
		m += p
	}
	if m >= n {
		m = p - 1 - m
	}
	return m
}

// RoundIndex is the original's index rounding: numpy round (half to even)
// of the smoothed float32 index, clipped to [0, n-1].
func RoundIndex(v float32, n int) uint16 {
	r := math.RoundToEven(float64(v))
	if !(r > 0) {
		return 0
	}
	if r > float64(n-1) {
		return uint16(n - 1)
	}
	return uint16(r)
}
