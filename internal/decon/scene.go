package decon

import (
	"math"
	"math/rand/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Scene is a synthetic ground truth for tests, the accuracy report and the
// benchmark: a sharp stack, the same blurred with a known PSF (zero
// boundary), and the blurred stack with Poisson shot noise and Gaussian read
// noise (counts, clipped at 0).
type Scene struct {
	Truth, Blurred, Noisy *raster.Stack
}

// NewScene builds an n x h x w scene with seed: sparse point-like nuclei
// (Gaussian spots, sigma 0.6-1.5 px, peaks 500-3000 counts), a few bright
// lines, and a background of 100 counts; blurred by k; readNoise counts RMS.
// Deterministic for a seed.
func NewScene(seed uint64, n, h, w int, k *psf.Kernel, readNoise float64) Scene {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t := raster.NewStack(n, h, w)
	for i := range t.Pix {
		t.Pix[i] = 100
	}
	spots := max(1, n*h*w/150)
	for s := 0; s < spots; s++ {
		z, y, x := r.IntN(n), r.Float64()*float64(h), r.Float64()*float64(w)
		sig := 0.6 + 0.9*r.Float64()
		amp := 500 + 2500*r.Float64()
		rad := int(math.Ceil(3 * sig))
		for yy := max(0, int(y)-rad); yy < min(h, int(y)+rad+1); yy++ {
			for xx := max(0, int(x)-rad); xx < min(w, int(x)+rad+1); xx++ {
				d2 := (float64(yy)-y)*(float64(yy)-y) + (float64(xx)-x)*(float64(xx)-x)
				t.Pix[(z*h+yy)*w+xx] += float32(amp * math.Exp(-d2/(2*sig*sig)))
			}
		}
	}
	for l := 0; l < max(1, h/16); l++ {
		z, y := r.IntN(n), r.IntN(h)
		for x := w / 8; x < w-w/8; x++ {
			t.Pix[(z*h+y)*w+x] += 800
		}
	}
	b := raster.NewStack(n, h, w)
	Conv(b, t, k, 4)
	no := raster.NewStack(n, h, w)
	for i, v := range b.Pix {
		lam := float64(v)
		var c float64
		if lam > 50 {
			c = lam + math.Sqrt(lam)*r.NormFloat64()
		} else {
			c = float64(poisson(r, lam))
		}
		c += readNoise * r.NormFloat64()
		no.Pix[i] = float32(math.Max(0, math.Round(c)))
	}
	return Scene{Truth: t, Blurred: b, Noisy: no}
}

func poisson(r *rand.Rand, lam float64) int {
	l, k, p := math.Exp(-lam), 0, 1.0
	for {
		p *= r.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// RelRMS returns ||a - b||₂ / ||b||₂ (float64 sums).
func RelRMS(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}
