// Package psf computes the point spread functions of the deconvolution
// stage: the original's light-sheet model (a port of LsDeconv's LsMakePSF,
// which KINTSUGI's Kdecon/psf.py transcribes) and a widefield Born-Wolf model.
//
// Units: lengths in nm (pixel sizes, wavelengths), apertures in mm. All
// maths is float64; the kernel is float32, normalised to sum 1, with odd
// sizes and its centre at (NZ/2, NY/2, NX/2).
//
// Axis order: a Kernel is indexed (z, y, x), x fastest, the same as a
// raster.Stack. The original builds its arrays in MATLAB order (x, y, z)
// with x the image column; its light-sheet PSF is not symmetric in x and y
// (the sheet's factor depends on x), and Kernel keeps that factor on x, the
// image columns, as the original applies it.
package psf

import (
	"errors"
	"fmt"
	"math"
)

// Kernel is a normalised PSF, (z, y, x), x fastest.
type Kernel struct {
	NZ, NY, NX int
	Data       []float32
}

// At returns the value at (z, y, x).
func (k *Kernel) At(z, y, x int) float32 { return k.Data[(z*k.NY+y)*k.NX+x] }

// Flipped returns the kernel reversed along every axis (the adjoint used by
// Richardson-Lucy's correction step).
func (k *Kernel) Flipped() *Kernel {
	out := &Kernel{NZ: k.NZ, NY: k.NY, NX: k.NX, Data: make([]float32, len(k.Data))}
	n := len(k.Data)
	for i, v := range k.Data {
		out.Data[n-1-i] = v
	}
	return out
}

// Check reports a kernel that cannot be used: even or non-positive sizes,
// wrong length, negative or non-finite values, or a zero sum.
func (k *Kernel) Check() error {
	if k == nil {
		return errors.New("psf: nil kernel")
	}
	if k.NZ < 1 || k.NY < 1 || k.NX < 1 || k.NZ%2 == 0 || k.NY%2 == 0 || k.NX%2 == 0 {
		return fmt.Errorf("psf: kernel %dx%dx%d (z,y,x): sizes must be odd and positive", k.NZ, k.NY, k.NX)
	}
	if len(k.Data) != k.NZ*k.NY*k.NX {
		return fmt.Errorf("psf: kernel %dx%dx%d has %d values", k.NZ, k.NY, k.NX, len(k.Data))
	}
	var s float64
	for _, v := range k.Data {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("psf: kernel value %g: want finite and >= 0", v)
		}
		s += float64(v)
	}
	if !(s > 0) {
		return errors.New("psf: kernel sums to 0")
	}
	return nil
}

// String describes the size, e.g. "9x9x1 (x,y,z)" in the original's order.
func (k *Kernel) String() string { return fmt.Sprintf("%dx%dx%d", k.NX, k.NY, k.NZ) }

// Optics are the microscope and channel values a PSF is computed from.
type Optics struct {
	DXY, DZ float64 // image pixel size and z step, nm
	NA      float64 // numerical aperture of the detection objective
	RI      float64 // refractive index of the tissue (immersion)
	ExNM    float64 // excitation wavelength, nm
	EmNM    float64 // emission wavelength, nm
	SlitMM  float64 // light-sheet slit aperture width, mm (light-sheet model)
	FCylMM  float64 // focal length of the cylinder lens, mm (light-sheet model)
}

// ErrOptics wraps every validation error of Optics; errors.As to *OpticsError.
var ErrOptics = errors.New("psf: non-physical optics")

// OpticsError names the offending value by its config key.
type OpticsError struct{ Key, Msg string }

func (e *OpticsError) Error() string { return fmt.Sprintf("psf: %s: %s", e.Key, e.Msg) }
func (e *OpticsError) Unwrap() error { return ErrOptics }

// Validate checks the values are physical. lightSheet also checks the slit
// and the cylinder lens. Keys are named as in config.yaml.
func (o Optics) Validate(lightSheet bool) error {
	pos := func(key string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return &OpticsError{Key: key, Msg: fmt.Sprintf("%g: want a positive finite value", v)}
		}
		return nil
	}
	for _, c := range []struct {
		k string
		v float64
	}{{"xy_pixel_size", o.DXY}, {"z_step_size", o.DZ}, {"numerical_aperture", o.NA},
		{"tissue_refractive_index", o.RI}, {"wavelengths (excitation)", o.ExNM}, {"wavelengths (emission)", o.EmNM}} {
		if err := pos(c.k, c.v); err != nil {
			return err
		}
	}
	if o.NA >= o.RI {
		return &OpticsError{Key: "numerical_aperture", Msg: fmt.Sprintf("%g >= tissue_refractive_index %g: an aperture cannot exceed the medium's index", o.NA, o.RI)}
	}
	if lightSheet {
		if err := pos("decon.slit_aperture", o.SlitMM); err != nil {
			return err
		}
		if err := pos("decon.f_cyl", o.FCylMM); err != nil {
			return err
		}
	}
	return nil
}

// Info describes how a kernel was made, for logs and DECONV_parameters.txt.
type Info struct {
	Model      string  // "lightsheet" or "widefield"
	FWHMxy     float64 // nm, along x
	FWHMz      float64 // nm
	SampleXY   float64 // nm: lateral sampling step of the kernel
	SampleZ    float64 // nm
	Rxy        float64 // 0.61 λem/NA, nm
	NALightSht float64 // light-sheet NA (light-sheet model only)
}

// beamIntegral returns 4|∫₀¹ J0(a p) exp(-i b p²) p dp|², the intensity of
// a focused beam (Born-Wolf, paraxial) with a = lateral and b = axial
// optical coordinates. Composite Gauss-Legendre quadrature, panels doubled
// until two successive values agree to 1e-12 relative (the integrand is
// smooth; |a| and |b| stay below ~100 for every grid this package samples).
func beamIntegral(a, b float64) float64 {
	prevRe, prevIm := math.NaN(), math.NaN()
	for panels := 4; ; panels *= 2 {
		var re, im float64
		h := 1.0 / float64(panels)
		for k := 0; k < panels; k++ {
			lo := float64(k) * h
			for i, x := range glX {
				p := lo + h*(x+1)/2
				w := glW[i] * h / 2
				j := math.J0(a * p)
				s, c := math.Sincos(-b * p * p)
				re += w * j * c * p
				im += w * j * s * p
			}
		}
		if panels >= 4096 || math.Hypot(re-prevRe, im-prevIm) <= 1e-12*math.Hypot(re, im) {
			return 4 * (re*re + im*im)
		}
		prevRe, prevIm = re, im
	}
}

// glX, glW: 16-point Gauss-Legendre nodes and weights on [-1, 1].
var glX, glW = gaussLegendre(16)

func gaussLegendre(n int) (x, w []float64) {
	x, w = make([]float64, n), make([]float64, n)
	for i := 0; i < n; i++ {
		z := math.Cos(math.Pi * (float64(i) + 0.75) / (float64(n) + 0.5))
		var dp float64
		for it := 0; it < 100; it++ {
			p0, p1 := 1.0, z
			for k := 2; k <= n; k++ {
				p0, p1 = p1, ((2*float64(k)-1)*z*p1-(float64(k)-1)*p0)/float64(k)
			}
			dp = float64(n) * (z*p1 - p0) / (z*z - 1)
			dz := p1 / dp
			z -= dz
			if math.Abs(dz) < 1e-16 {
				break
			}
		}
		x[i], w[i] = z, 2/((1-z*z)*dp*dp)
	}
	return x, w
}

// psf1 is the original's PSF(x, y, z, NA, n, λ): 4|∫₀¹ J0(2π NA r p/(λ n))
// exp(-iπ p² z NA²/(λ n²)) p dp|², r = sqrt(x²+y²). (The original divides by
// n where the textbook Born-Wolf form has none; kept for compatibility.)
func psf1(x, y, z, na, n, lambda float64) float64 {
	r := math.Hypot(x, y)
	return beamIntegral(2*math.Pi*na*r/(lambda*n), math.Pi*z*na*na/(lambda*n*n))
}

// lsEq is the original's LsPSFeq: the light sheet's intensity at (x, y, z)
// (propagating along x, focused along z) times the detection PSF.
func lsEq(x, y, z float64, o Optics, naLS float64) float64 {
	return psf1(z, 0, x, naLS, o.RI, o.ExNM) * psf1(x, y, z, o.NA, o.RI, o.EmNM)
}

// bwEq is the widefield (Born-Wolf, paraxial) detection PSF at (x, y, z):
// |∫₀¹ J0(k NA r ρ) exp(-i k NA² z ρ²/(2n)) ρ dρ|² (times 4), k = 2π/λem.
func bwEq(x, y, z float64, o Optics) float64 {
	r := math.Hypot(x, y)
	return beamIntegral(2*math.Pi*o.NA*r/o.EmNM, math.Pi*o.NA*o.NA*z/(o.EmNM*o.RI))
}

// halfMaxRoot returns the x in [lo, hi] where f(x) = f(0)/2 by bisection to
// 1e-9 nm (the original uses fzero / brentq on the same bracket). It fails
// if f does not fall below half its peak inside the bracket.
func halfMaxRoot(f func(float64) float64, lo, hi float64) (float64, error) {
	half := 0.5 * f(0)
	g := func(x float64) float64 { return f(x) - half }
	glo, ghi := g(lo), g(hi)
	if glo*ghi > 0 {
		return 0, fmt.Errorf("psf: half maximum not bracketed in [%g, %g] nm", lo, hi)
	}
	for i := 0; i < 200 && hi-lo > 1e-9; i++ {
		m := 0.5 * (lo + hi)
		gm := g(m)
		if (gm > 0) == (glo > 0) {
			lo, glo = m, gm
		} else {
			hi = m
		}
	}
	return 0.5 * (lo + hi), nil
}

// oddCeil returns ceil(v), made odd by adding 1 when even (the original's rule).
func oddCeil(v float64) int {
	n := int(math.Ceil(v - 1e-12*math.Abs(v)))
	if n < 1 {
		n = 1
	}
	if n%2 == 0 {
		n++
	}
	return n
}

// LightSheetNA is the light sheet's aperture: sin(atan(slit/(2 f_cyl))).
func LightSheetNA(slitMM, fcylMM float64) float64 { return math.Sin(math.Atan(slitMM / (2 * fcylMM))) }

// LightSheet computes the original's light-sheet PSF (LsDeconv LsMakePSF
// with the process() sampling rule): sampled laterally at dxy_corr =
// min(dxy, Rxy/3), Rxy = 0.61 λem/NA, axially at dz; FWHM by root-finding on
// half the peak along x in [1, 5000] nm and along z in [1, 20000] nm;
// nxy = ceil(2 FWHMxy/dxy_corr), nz = ceil(2 FWHMz/dz), made odd; the first
// octant computed and mirrored; normalised to sum 1. As in the original the
// kernel is sampled at dxy_corr but applied on the image grid.
func LightSheet(o Optics) (*Kernel, Info, error) {
	if err := o.Validate(true); err != nil {
		return nil, Info{}, err
	}
	naLS := LightSheetNA(o.SlitMM, o.FCylMM)
	rxy := 0.61 * o.EmNM / o.NA
	dxy := math.Min(o.DXY, rxy/3)
	fx := func(x float64) float64 { return lsEq(x, 0, 0, o, naLS) }
	fz := func(z float64) float64 { return lsEq(0, 0, z, o, naLS) }
	hx, err := halfMaxRoot(fx, 1, 5000)
	if err != nil {
		return nil, Info{}, fmt.Errorf("lateral FWHM: %w", err)
	}
	hz, err := halfMaxRoot(fz, 1, 20000)
	if err != nil {
		return nil, Info{}, fmt.Errorf("axial FWHM: %w", err)
	}
	info := Info{Model: "lightsheet", FWHMxy: 2 * hx, FWHMz: 2 * hz, SampleXY: dxy, SampleZ: o.DZ, Rxy: rxy, NALightSht: naLS}
	nxy := oddCeil(2 * info.FWHMxy / dxy)
	nz := oddCeil(2 * info.FWHMz / o.DZ)
	k := sample(nz, nxy, nxy, func(z, y, x int) float64 {
		return lsEq(float64(x)*dxy, float64(y)*dxy, float64(z)*o.DZ, o, naLS)
	})
	return k, info, nil
}

// WidefieldGrid is how many FWHMs a widefield kernel spans per axis: 4
// covers the first side lobes, which hold a visible part of the energy of
// a Born-Wolf PSF along z.
const WidefieldGrid = 4

// Widefield computes a Born-Wolf (paraxial, scalar) widefield PSF sampled
// on the image grid (dxy, dz). Lateral FWHM 0.5145 λem/NA, axial FWHM
// 1.7718 n λem/NA²; sizes ceil(WidefieldGrid·FWHM/step), made odd.
func Widefield(o Optics) (*Kernel, Info, error) {
	if err := o.Validate(false); err != nil {
		return nil, Info{}, err
	}
	fx := func(x float64) float64 { return bwEq(x, 0, 0, o) }
	fz := func(z float64) float64 { return bwEq(0, 0, z, o) }
	hx, err := halfMaxRoot(fx, 1e-3, 20*o.EmNM/o.NA)
	if err != nil {
		return nil, Info{}, fmt.Errorf("lateral FWHM: %w", err)
	}
	hz, err := halfMaxRoot(fz, 1e-3, 20*o.EmNM*o.RI/(o.NA*o.NA))
	if err != nil {
		return nil, Info{}, fmt.Errorf("axial FWHM: %w", err)
	}
	info := Info{Model: "widefield", FWHMxy: 2 * hx, FWHMz: 2 * hz, SampleXY: o.DXY, SampleZ: o.DZ, Rxy: 0.61 * o.EmNM / o.NA}
	nxy := oddCeil(WidefieldGrid * info.FWHMxy / o.DXY)
	nz := oddCeil(WidefieldGrid * info.FWHMz / o.DZ)
	k := sample(nz, nxy, nxy, func(z, y, x int) float64 {
		return bwEq(float64(x)*o.DXY, float64(y)*o.DXY, float64(z)*o.DZ, o)
	})
	return k, info, nil
}

// FWHM returns the full widths at half maximum (nm) of a model along x and
// z, by the same root-finding the kernels use (exposed for tests and logs).
func FWHM(model string, o Optics) (xy, z float64, err error) {
	var k Info
	switch model {
	case "lightsheet":
		_, k, err = LightSheet(o)
	case "widefield":
		_, k, err = Widefield(o)
	default:
		return 0, 0, fmt.Errorf("psf: model %q: want lightsheet or widefield", model)
	}
	return k.FWHMxy, k.FWHMz, err
}

// Make computes the kernel of a named model ("lightsheet" or "widefield").
func Make(model string, o Optics) (*Kernel, Info, error) {
	switch model {
	case "lightsheet", "":
		return LightSheet(o)
	case "widefield":
		return Widefield(o)
	}
	return nil, Info{}, &OpticsError{Key: "decon.psf_model", Msg: fmt.Sprintf("%q: want lightsheet or widefield", model)}
}

// sample evaluates f on the first octant (z, y, x >= 0 offsets from the
// centre), mirrors it to all eight, normalises to sum 1 (float64) and
// converts to float32.
func sample(nz, ny, nx int, f func(z, y, x int) float64) *Kernel {
	cz, cy, cx := nz/2, ny/2, nx/2
	oct := make([]float64, (cz+1)*(cy+1)*(cx+1))
	for z := 0; z <= cz; z++ {
		for y := 0; y <= cy; y++ {
			for x := 0; x <= cx; x++ {
				oct[(z*(cy+1)+y)*(cx+1)+x] = f(z, y, x)
			}
		}
	}
	full := make([]float64, nz*ny*nx)
	var sum float64
	for z := 0; z < nz; z++ {
		az := abs(z - cz)
		for y := 0; y < ny; y++ {
			ay := abs(y - cy)
			for x := 0; x < nx; x++ {
				v := oct[(az*(cy+1)+ay)*(cx+1)+abs(x-cx)]
				full[(z*ny+y)*nx+x] = v
				sum += v
			}
		}
	}
	k := &Kernel{NZ: nz, NY: ny, NX: nx, Data: make([]float32, len(full))}
	for i, v := range full {
		k.Data[i] = float32(v / sum)
	}
	return k
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
