package basic_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestCorrectGray16 checks the correction rule against the formula in
// float64, (x/65535 - dark)/max(flat, flatMin) clipped to [0, 1], on random
// profiles with flatfields below the floor, NaN and zero, and on the edge
// counts 0 and 65535. float32 evaluation of the same expression stays within
// 4 ulp of 1 (2.4e-7) of the float64 value; the clip and the floor are exact.
func TestCorrectGray16(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 1))
	const w, h, flatMin = 37, 23, 0.1
	prof := &basic.Profile{W: w, H: h, Flatfield: make([]float32, w*h), Darkfield: make([]float32, w*h)}
	src := make([]uint16, w*h)
	for i := range src {
		prof.Flatfield[i] = float32(0.02 + 1.6*rng.Float64())
		prof.Darkfield[i] = float32(rng.Float64() * 900 / 65535)
		src[i] = uint16(rng.IntN(65536))
	}
	prof.Flatfield[0], prof.Flatfield[1], prof.Flatfield[2] = 0, float32(math.NaN()), 0.05
	prof.Darkfield[6] = float32(math.NaN()) // NaN result: 0
	src[3], src[4], src[5] = 0, 65535, 65535
	prof.Flatfield[5] = 0.5 // saturates above 1
	dst := make([]float32, w*h)
	basic.CorrectGray16(dst, src, prof, flatMin)
	for i, v := range src {
		f := float64(prof.Flatfield[i])
		if !(f >= flatMin) { // NaN takes the floor too, as CUDA's fmaxf
			f = flatMin
		}
		want := (float64(v)/65535 - float64(prof.Darkfield[i])) / f
		want = min(max(want, 0), 1)
		if d := math.Abs(float64(dst[i]) - want); d > 2.4e-7 {
			t.Errorf("pixel %d (raw %d, flat %g, dark %g): %g, want %g (diff %g)", i, v, prof.Flatfield[i], prof.Darkfield[i], dst[i], want, d)
		}
	}
	if dst[3] != 0 || dst[5] != 1 || dst[6] != 0 {
		t.Errorf("clip: raw 0 -> %g (want 0), saturated over a dim flatfield -> %g (want 1), NaN darkfield -> %g (want 0)", dst[3], dst[5], dst[6])
	}
	// Away from NaN flatfields it is the composition the CPU path always
	// used, bit for bit.
	ref := raster.Normalize16(nil, src)
	basic.Transform(ref, ref, prof, flatMin)
	for i := range ref {
		if math.IsNaN(float64(prof.Flatfield[i])) {
			continue
		}
		ref[i] = min(ref[i], 1)
		if math.Float32bits(ref[i]) != math.Float32bits(dst[i]) {
			t.Fatalf("pixel %d: %g, Normalize16+Transform+clip %g", i, dst[i], ref[i])
		}
	}
}
