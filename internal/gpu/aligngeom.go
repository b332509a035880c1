package gpu

import (
	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
)

// Host-side geometry of the GPU translator: it uses align's own pair
// geometry, crop, window, PCM blur, NCC and sub-pixel rules (PairGeometry,
// Crop, Tukey, GaussLowPass, NCCFromSums, QuadPeak and the constants
// CropSlack, TukeyAlpha, PCMSigma, MaxClimb, NPeaks), so the CPU and GPU
// translators cannot drift apart; the GPU does the FFTs, the peak search and
// the NCC sums.

// tukeyWindow returns align's Tukey window of n points.
func tukeyWindow(n int, alpha float64) []float64 {
	w := make([]float64, n)
	align.Tukey(w, alpha)
	return w
}

// gaussLowPass returns align's PCM blur factors for an axis of n frequencies.
func gaussLowPass(n int, sigma float64) []float64 {
	l := make([]float64, n)
	align.GaussLowPass(l, sigma)
	return l
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
