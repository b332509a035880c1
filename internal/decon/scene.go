package decon

import (
	"fmt"
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
	return observe(r, t, k, readNoise)
}

// SceneKinds are the contents NewSceneKind draws.
var SceneKinds = []string{"spots", "nuclei", "fibres", "membranes"}

// NewSceneKind builds an n x h x w scene of one kind of content on a
// background of 100 counts, blurred by k, with Poisson and readNoise counts
// RMS Gaussian noise (deterministic for a seed):
//   - "spots": NewScene (sparse point-like objects and a few lines);
//   - "nuclei": dense nuclei, soft-edged ellipsoids 3-7 px in radius (a
//     third of their radius in z, at least one plane), 600-2500 counts
//     with a ±20 % chromatin texture, covering about half the area;
//   - "fibres": thin curved fibres (Gaussian profile, sigma 0.5-1 px,
//     400-2000 counts), one or two planes thick;
//   - "membranes": cell outlines, rings of sigma 0.6-0.9 px around cells
//     6-11 px in radius, 300-1500 counts.
func NewSceneKind(kind string, seed uint64, n, h, w int, k *psf.Kernel, readNoise float64) (Scene, error) {
	if kind == "spots" {
		return NewScene(seed, n, h, w, k, readNoise), nil
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t := raster.NewStack(n, h, w)
	for i := range t.Pix {
		t.Pix[i] = 100
	}
	add := func(z, y, x int, v float64) {
		if z >= 0 && z < n && y >= 0 && y < h && x >= 0 && x < w {
			t.Pix[(z*h+y)*w+x] += float32(v)
		}
	}
	switch kind {
	case "nuclei":
		for c := 0; c < max(1, h*w/60); c++ {
			cz, cy, cx := r.Float64()*float64(n), r.Float64()*float64(h), r.Float64()*float64(w)
			ry, rx := 3+4*r.Float64(), 3+4*r.Float64()
			rz := math.Max(0.6, ry/3)
			amp := 600 + 1900*r.Float64()
			fy, fx, ph := 0.5+r.Float64(), 0.5+r.Float64(), 2*math.Pi*r.Float64()
			for z := int(cz - rz - 1); z <= int(cz+rz+1); z++ {
				for y := int(cy - ry - 2); y <= int(cy+ry+2); y++ {
					for x := int(cx - rx - 2); x <= int(cx+rx+2); x++ {
						dz, dy, dx := (float64(z)+0.5-cz)/rz, (float64(y)-cy)/ry, (float64(x)-cx)/rx
						d := math.Sqrt(dz*dz + dy*dy + dx*dx)
						edge := 1 / (1 + math.Exp((d-1)*ry/0.7)) // soft edge, 0.7 px
						tex := 1 + 0.2*math.Sin(fy*float64(y)+fx*float64(x)+ph)
						add(z, y, x, amp*edge*tex)
					}
				}
			}
		}
	case "fibres":
		for f := 0; f < max(1, (h+w)/12); f++ {
			z := r.IntN(n)
			thick := 1 + r.IntN(2)
			y, x := r.Float64()*float64(h), r.Float64()*float64(w)
			dir, curv := 2*math.Pi*r.Float64(), (r.Float64()-0.5)*0.15
			sig, amp := 0.5+0.5*r.Float64(), 400+1600*r.Float64()
			for s := 0; s < 2*(h+w); s++ {
				y, x, dir = y+0.5*math.Sin(dir), x+0.5*math.Cos(dir), dir+curv*0.5
				for yy := int(y) - 3; yy <= int(y)+3; yy++ {
					for xx := int(x) - 3; xx <= int(x)+3; xx++ {
						// distance to the fibre's axis through (y, x) along dir
						py, px := float64(yy)-y, float64(xx)-x
						d := py*math.Cos(dir) - px*math.Sin(dir)
						along := py*math.Sin(dir) + px*math.Cos(dir)
						if math.Abs(along) > 0.25 {
							continue
						}
						for zz := z; zz < z+thick; zz++ {
							add(zz, yy, xx, amp*math.Exp(-d*d/(2*sig*sig)))
						}
					}
				}
			}
		}
	case "membranes":
		for c := 0; c < max(1, h*w/250); c++ {
			cz, cy, cx := r.IntN(n), r.Float64()*float64(h), r.Float64()*float64(w)
			rad, sig, amp := 6+5*r.Float64(), 0.6+0.3*r.Float64(), 300+1200*r.Float64()
			ext := int(rad + 4*sig + 1)
			for y := int(cy) - ext; y <= int(cy)+ext; y++ {
				for x := int(cx) - ext; x <= int(cx)+ext; x++ {
					d := math.Hypot(float64(y)-cy, float64(x)-cx) - rad
					v := amp * math.Exp(-d*d/(2*sig*sig))
					add(cz, y, x, v)
					if n > 1 {
						add(cz+1, y, x, 0.5*v)
						add(cz-1, y, x, 0.5*v)
					}
				}
			}
		}
	default:
		return Scene{}, fmt.Errorf("decon: scene kind %q: want one of %v", kind, SceneKinds)
	}
	return observe(r, t, k, readNoise), nil
}

// observe blurs the truth t by k (zero boundary) and adds Poisson shot
// noise and Gaussian read noise (counts, rounded, clipped at 0).
func observe(r *rand.Rand, t *raster.Stack, k *psf.Kernel, readNoise float64) Scene {
	n, h, w := t.N, t.H, t.W
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

// CropScene returns sc without mz planes, my rows and mx columns at each
// end: built on a larger field, the cropped scene has objects that continue
// beyond its edges and light blurred in from outside, as a camera's field
// of view (NewScene's stacks have nothing beyond their edges).
func CropScene(sc Scene, mz, my, mx int) Scene {
	crop := func(s *raster.Stack) *raster.Stack {
		n, h, w := s.N-2*mz, s.H-2*my, s.W-2*mx
		o := raster.NewStack(n, h, w)
		for z := 0; z < n; z++ {
			for y := 0; y < h; y++ {
				copy(o.Pix[(z*h+y)*w:][:w], s.Pix[((z+mz)*s.H+y+my)*s.W+mx:])
			}
		}
		return o
	}
	return Scene{Truth: crop(sc.Truth), Blurred: crop(sc.Blurred), Noisy: crop(sc.Noisy)}
}
