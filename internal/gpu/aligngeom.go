package gpu

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
)

// Host-side geometry of the GPU translator: the same crop, window,
// plausibility, hill-climb and sub-pixel rules as align.CPU (see its
// documentation; its exported constants CropSlack, TukeyAlpha, PCMSigma,
// MaxClimb and NPeaks are used directly); the GPU does the FFTs, the peak
// search and the NCC sums.

type pairGeom struct {
	h, w         int
	dir          align.Direction
	nomY, nomX   float64
	minOY, minOX int
}

func newPairGeom(h, w int, dir align.Direction, overlap float64) pairGeom {
	g := pairGeom{h: h, w: w, dir: dir}
	switch dir {
	case align.Left:
		g.nomX = float64(w) * (1 - overlap)
		g.minOX = max(2, int(math.Ceil(overlap*float64(w)/2)))
		g.minOY = max(2, (h+1)/2)
	case align.Top:
		g.nomY = float64(h) * (1 - overlap)
		g.minOY = max(2, int(math.Ceil(overlap*float64(h)/2)))
		g.minOX = max(2, (w+1)/2)
	default:
		panic("gpu: invalid direction")
	}
	return g
}

func (g pairGeom) plausible(dy, dx int) bool {
	if g.dir == align.Left && dx < 0 || g.dir == align.Top && dy < 0 {
		return false
	}
	return g.h-iabs(dy) >= g.minOY && g.w-iabs(dx) >= g.minOX
}

func iabs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// crop is the phase-correlation region: size (h, w), origins in A and B.
// The window and the PCM blur apply also when it is the whole tile.
type crop struct {
	h, w, ay, ax, by, bx int
}

func cropOf(g pairGeom, p align.Params) crop {
	c := crop{h: g.h, w: g.w}
	size := g.w
	if g.dir == align.Top {
		size = g.h
	}
	ov := int(math.Round(p.Overlap * float64(size)))
	pou := int(math.Ceil(p.POU / 100 * float64(size)))
	n := nextSmooth(ov + 2*pou + align.CropSlack)
	if n >= size {
		return c
	}
	switch g.dir {
	case align.Left:
		c.w, c.ax = n, g.w-n
	case align.Top:
		c.h, c.ay = n, g.h-n
	}
	return c
}

// nextSmooth returns the least n' >= n whose only prime factors are 2, 3, 5.
func nextSmooth(n int) int {
	n = max(n, 1)
	for {
		m := n
		for _, p := range []int{2, 3, 5} {
			for m%p == 0 {
				m /= p
			}
		}
		if m == 1 {
			return n
		}
		n++
	}
}

// tukeyWindow returns a Tukey window of n points (alpha 0: ones).
func tukeyWindow(n int, alpha float64) []float64 {
	dst := make([]float64, n)
	ramp := alpha * float64(n-1) / 2
	for i := range dst {
		d := math.Min(float64(i), float64(n-1-i))
		if ramp <= 0 || d >= ramp {
			dst[i] = 1
		} else {
			dst[i] = 0.5 * (1 - math.Cos(math.Pi*d/ramp))
		}
	}
	return dst
}

// gaussLowPass returns the PCM blur's spectral factors along an axis of n
// frequencies: exp(-2 π² σ² f²), f = min(k, n-k)/n (even in k).
func gaussLowPass(n int, sigma float64) []float64 {
	dst := make([]float64, n)
	for k := range dst {
		f := float64(min(k, n-k)) / float64(n)
		dst[k] = math.Exp(-2 * math.Pi * math.Pi * sigma * sigma * f * f)
	}
	return dst
}

// nccFromSums is align.NCC's final step from the float64 sums over an
// overlap of n pixels: Pearson correlation, 0 for zero variance, clamped.
func nccFromSums(sa, sb, saa, sbb, sab, n float64) float64 {
	if !(n > 0) {
		return 0
	}
	va := saa - sa*sa/n
	vb := sbb - sb*sb/n
	if !(va > 0) || !(vb > 0) {
		return 0
	}
	r := (sab - sa*sb/n) / math.Sqrt(va*vb)
	return max(-1, min(1, r))
}

// overlapPixels is the size of the overlap of two h x w tiles at (dy, dx).
func overlapPixels(h, w, dy, dx int) float64 {
	oy := min(h, h+dy) - max(0, dy)
	ox := min(w, w+dx) - max(0, dx)
	if oy <= 0 || ox <= 0 {
		return 0
	}
	return float64(oy) * float64(ox)
}
