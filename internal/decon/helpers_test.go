package decon

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

func TestSmooth5AndPad(t *testing.T) {
	for n, want := range map[int]int{1: 1, 7: 8, 11: 12, 13: 15, 49: 50, 12712: 12800, 7529: 7680} {
		if got := Smooth5(n); got != want {
			t.Errorf("Smooth5(%d) = %d, want %d", n, got, want)
		}
	}
	// 20 planes with a 1-deep PSF: 20+4 = 24 = 2^3·3, 2 before, 2 after;
	// 12676 columns with a 9-wide PSF: 12712 -> 12800, 62 before, 62 after;
	// 7493 rows: 7529 -> 7680, 93 before, 94 after.
	for _, c := range [][4]int{{20, 1, 24, 2}, {12676, 9, 12800, 62}, {7493, 9, 7680, 93}} {
		if tot, b := PadSize(c[0], c[1]); tot != c[2] || b != c[3] {
			t.Errorf("PadSize(%d, %d) = %d, %d; want %d, %d", c[0], c[1], tot, b, c[2], c[3])
		}
	}
}

func TestMirror(t *testing.T) {
	// numpy.pad([0,1,2], 4, 'symmetric') = [0 1 2 2 1 0 | 0 1 2 | 2 1 0 0 1 2 ...]
	want := map[int]int{-1: 0, -2: 1, -3: 2, -4: 2, -6: 0, 3: 2, 4: 1, 5: 0, 6: 0, 7: 1}
	for i, w := range want {
		if got := raster.Mirror(i, 3); got != w {
			t.Errorf("raster.Mirror(%d, 3) = %d, want %d", i, got, w)
		}
	}
}

// TestPercentilesExact compares the radix selection with sorting, on data
// with ties, zeros and a wide range.
func TestPercentilesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 10, 1001, 100000} {
		d := make([]float32, n)
		for i := range d {
			switch r.IntN(4) {
			case 0:
				d[i] = 0
			case 1:
				d[i] = float32(r.IntN(5))
			default:
				d[i] = float32(math.Exp(r.NormFloat64() * 4))
			}
		}
		s := make([]float64, n)
		for i, v := range d {
			s[i] = float64(v)
		}
		sort.Float64s(s)
		for _, q := range []float64{0, 0.01, 1, 50, 99.99, 100} {
			got, _ := Percentiles(d, q)
			want := Percentile(n, q, func(i int) float64 { return s[i] })
			if got != want {
				t.Errorf("n %d q %g: %g, sorted %g", n, q, got, want)
			}
		}
	}
}
