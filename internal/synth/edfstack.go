package synth

import (
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// EDFStackOptions describe a synthetic z-stack with a known, smooth,
// spatially varying in-focus depth (for the EDF stage): a field of
// Gaussian blobs on a flat background; each blob is in focus at the depth
// map's value at its centre and in plane z is blurred to variance
// PSF² + (Blur·(z − depth))² with its integral kept (exact for Gaussians).
// Units: px, plane indices (0-based z), counts.
type EDFStackOptions struct {
	W, H, NZ   int
	DepthLo    float64 // depth map range, planes (0-based z; may be fractional)
	DepthHi    float64
	Density    float64 // blobs per px
	PSF        float64 // in-focus blob sigma range is PSF .. 2·PSF, px
	Blur       float64 // defocus blur sigma per plane of defocus, px
	Background float64 // counts
	Amp        float64 // blob peak amplitude range Amp/2 .. Amp, counts
	ReadNoise  float64 // Gaussian noise sigma, counts
	Seed       uint64
}

// DefaultEDFStack is a small stack for tests: 192 x 160 px, 9 planes, the
// depth ranging over planes 2..6.
func DefaultEDFStack() EDFStackOptions {
	return EDFStackOptions{W: 192, H: 160, NZ: 9, DepthLo: 2, DepthHi: 6, Density: 0.005, PSF: 1.2, Blur: 1.5,
		Background: 400, Amp: 6000, ReadNoise: 8, Seed: 1}
}

// EDFStack is a rendered stack and its truth.
type EDFStack struct {
	Planes []*raster.Gray16 // z order, counts
	Sharp  *raster.Float32  // every blob in focus, counts (no noise)
	Depth  []float64        // in-focus depth per pixel, planes, (y, x)
}

// EDFDepth is the depth map: a tilt plus a broad bump, scaled to
// [DepthLo, DepthHi] (a smooth function of (y, x) in px).
func (o EDFStackOptions) EDFDepth(y, x float64) float64 {
	u := 2*x/float64(max(1, o.W-1)) - 1
	v := 2*y/float64(max(1, o.H-1)) - 1
	f := 0.5 + 0.3*u + 0.2*math.Cos(math.Pi*v)*math.Cos(0.5*math.Pi*u) // in [0, 1]
	return o.DepthLo + (o.DepthHi-o.DepthLo)*f
}

// MakeEDFStack renders a stack; it is deterministic for given options.
func MakeEDFStack(o EDFStackOptions) (*EDFStack, error) {
	if o.W < 1 || o.H < 1 || o.NZ < 1 || o.PSF <= 0 || o.Density < 0 {
		return nil, fmt.Errorf("synth: bad EDF stack options %+v", o)
	}
	rng := stream(o.Seed, 0xedf, uint64(o.W), uint64(o.H), uint64(o.NZ))
	type blob struct{ y, x, s, a, z float64 }
	nb := int(o.Density * float64(o.W*o.H))
	blobs := make([]blob, nb)
	for i := range blobs {
		b := blob{y: rng.Float64() * float64(o.H), x: rng.Float64() * float64(o.W),
			s: o.PSF * (1 + rng.Float64()), a: o.Amp * (0.5 + 0.5*rng.Float64())}
		b.z = o.EDFDepth(b.y, b.x)
		blobs[i] = b
	}
	render := func(dst []float64, z float64, sharp bool) {
		for i := range dst {
			dst[i] = o.Background
		}
		for _, b := range blobs {
			v := b.s * b.s
			if !sharp {
				d := o.Blur * (z - b.z)
				v += d * d
			}
			amp := b.a * b.s * b.s / v
			r := math.Ceil(4 * math.Sqrt(v))
			y0, y1 := max(0, int(b.y-r)), min(o.H-1, int(b.y+r))
			x0, x1 := max(0, int(b.x-r)), min(o.W-1, int(b.x+r))
			for y := y0; y <= y1; y++ {
				dy := float64(y) - b.y
				for x := x0; x <= x1; x++ {
					dx := float64(x) - b.x
					dst[y*o.W+x] += amp * math.Exp(-(dy*dy+dx*dx)/(2*v))
				}
			}
		}
	}
	st := &EDFStack{Sharp: raster.NewFloat32(o.W, o.H), Depth: make([]float64, o.W*o.H)}
	buf := make([]float64, o.W*o.H)
	render(buf, 0, true)
	for i, v := range buf {
		st.Sharp.Pix[i] = float32(v)
	}
	for y := range o.H {
		for x := range o.W {
			st.Depth[y*o.W+x] = o.EDFDepth(float64(y), float64(x))
		}
	}
	for z := range o.NZ {
		render(buf, float64(z), false)
		pl := raster.NewGray16(o.W, o.H)
		nr := stream(o.Seed, 0xedf1, uint64(z))
		for i, v := range buf {
			c := math.Round(v + o.ReadNoise*nr.NormFloat64())
			pl.Pix[i] = uint16(max(0, min(65535, c)))
		}
		st.Planes = append(st.Planes, pl)
	}
	return st, nil
}
