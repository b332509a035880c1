package raster

import (
	"math"
	"testing"
)

// TestClip16: truncation inside [0, 65535], the clip at both ends, NaN to 0.
func TestClip16(t *testing.T) {
	cases := map[float64]uint16{-1: 0, 0: 0, 0.9: 0, 1.5: 1, 65534.9: 65534, 65535: 65535, 1e9: 65535, math.Inf(1): 65535, math.Inf(-1): 0}
	for c, want := range cases {
		if got := Clip16(c); got != want {
			t.Errorf("Clip16(%g) = %d, want %d", c, got, want)
		}
	}
	if got := Clip16(math.NaN()); got != 0 {
		t.Errorf("Clip16(NaN) = %d, want 0", got)
	}
}

// AllZero16 finds a non-zero count wherever it lies (in a 16-count block or
// in the tail), and says true for all-zero and empty slices.
func TestAllZero16(t *testing.T) {
	for n := 0; n <= 40; n++ {
		pix := make([]uint16, n)
		if !AllZero16(pix) {
			t.Fatalf("n %d: zeros reported as not all zero", n)
		}
		for i := range pix {
			pix[i] = 1 << (i % 16)
			if AllZero16(pix) {
				t.Fatalf("n %d: count %d at %d not found", n, pix[i], i)
			}
			pix[i] = 0
		}
	}
}
