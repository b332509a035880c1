package synth

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Flatfield returns the true flatfield of channel c (1-based) at tile size:
// a 2-D Gaussian vignetting, centre offset by up to ±6 % of the tile, falling
// by 20-40 % (per channel) towards the corners, normalised to mean 1. The same
// for every cycle and z.
func (o Options) Flatfield(c int) *raster.Float32 {
	rng := stream(o.Seed, tagFlat, uint64(c), 1)
	fall := 0.2 + 0.2*rng.Float64() // relative loss at a corner of the centred profile
	k := -math.Log(1 - fall)
	ay, ax := 0.85+0.3*rng.Float64(), 0.85+0.3*rng.Float64()
	cy := float64(o.TileH-1)/2 + (rng.Float64()-0.5)*0.12*float64(o.TileH)
	cx := float64(o.TileW-1)/2 + (rng.Float64()-0.5)*0.12*float64(o.TileW)
	f := raster.NewFloat32(o.TileW, o.TileH)
	fy := make([]float64, o.TileH)
	fx := make([]float64, o.TileW)
	for i := range fy {
		u := ay * (float64(i) - cy) / (float64(o.TileH) / 2)
		fy[i] = math.Exp(-k * u * u / 2)
	}
	for j := range fx {
		v := ax * (float64(j) - cx) / (float64(o.TileW) / 2)
		fx[j] = math.Exp(-k * v * v / 2)
	}
	var sum float64
	for i, a := range fy {
		for j, b := range fx {
			sum += a * b
			f.Pix[i*o.TileW+j] = float32(a * b)
		}
	}
	scale := float64(len(f.Pix)) / sum
	for p := range f.Pix {
		f.Pix[p] = float32(float64(f.Pix[p]) * scale)
	}
	return f
}

// DarkfieldMean is the mean of channel c's darkfield, counts:
// DarkfieldBase + 4·(c-1).
func (o Options) DarkfieldMean(c int) float64 { return o.DarkfieldBase + 4*float64(c-1) }

// Darkfield returns the true darkfield of channel c at tile size, counts: the
// mean DarkfieldMean(c) plus a linear gradient of DarkfieldGradient counts
// peak to peak in a random direction and a broad 3-count bump. The stored
// float32 values have mean DarkfieldMean(c) to within float32 rounding.
func (o Options) Darkfield(c int) *raster.Float32 {
	rng := stream(o.Seed, tagFlat, uint64(c), 2)
	phi := 2 * math.Pi * rng.Float64()
	gy, gx := math.Cos(phi), math.Sin(phi)
	// Peak to peak of gy*u + gx*v over u, v in [-0.5, 0.5] is |gy| + |gx|.
	g := o.DarkfieldGradient / (math.Abs(gy) + math.Abs(gx))
	by, bx := rng.Float64(), rng.Float64()
	d := raster.NewFloat32(o.TileW, o.TileH)
	vals := make([]float64, len(d.Pix))
	var sum float64
	for i := range o.TileH {
		u := float64(i)/float64(max(1, o.TileH-1)) - 0.5
		for j := range o.TileW {
			v := float64(j)/float64(max(1, o.TileW-1)) - 0.5
			du, dv := u+0.5-by, v+0.5-bx
			x := g*(gy*u+gx*v) + 3*math.Exp(-(du*du+dv*dv)/0.18)
			vals[i*o.TileW+j] = x
			sum += x
		}
	}
	o.darkfieldVariation(vals, c) // zero-mean; nothing without DarkfieldVary
	shift := o.DarkfieldMean(c) - sum/float64(len(vals))
	for p, x := range vals {
		d.Pix[p] = float32(x + shift)
	}
	return d
}
