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
