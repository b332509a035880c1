package basic_test

import (
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
)

func TestTransform(t *testing.T) {
	prof := &basic.Profile{W: 3, H: 2,
		Flatfield: []float32{1, 2, 0.05, 0.5, 1, 1},
		Darkfield: []float32{0.1, 0.1, 0.1, 0.2, 0.5, 0},
	}
	src := []float32{0.6, 0.5, 0.11, 0.3, 0.2, float32(math.NaN())}
	// (src - dark)/max(flat, 0.1), clipped at 0 below (not above).
	want := []float32{0.5, 0.2, 0.1, 0.2, 0, 0}
	dst := make([]float32, 6)
	basic.Transform(dst, src, prof, 0.1)
	for i := range want {
		if math.Abs(float64(dst[i]-want[i])) > 1e-6 {
			t.Errorf("pixel %d: got %g, want %g", i, dst[i], want[i])
		}
	}
	// In place.
	basic.Transform(src, src, prof, 0.1)
	for i := range want {
		if src[i] != dst[i] {
			t.Errorf("in place, pixel %d: got %g, want %g", i, src[i], dst[i])
		}
	}
	// Values above 1 are kept (the stitch stage clips).
	prof.Darkfield[0] = 0
	one := []float32{2, 0, 0, 0, 0, 0}
	basic.Transform(one, one, prof, 0.1)
	if one[0] != 2 {
		t.Errorf("value above 1 clipped: %g", one[0])
	}
}
