package basic

import (
	"math"
	"math/rand/v2"
	"testing"
)

// dctDirect is the O(n⁴) definition of the orthonormal 2-D DCT-II.
func dctDirect(x []float64, n int) []float64 {
	out := make([]float64, n*n)
	s := func(k int) float64 {
		if k == 0 {
			return math.Sqrt(1 / float64(n))
		}
		return math.Sqrt(2 / float64(n))
	}
	for u := range n {
		for v := range n {
			var acc float64
			for y := range n {
				for xx := range n {
					acc += x[y*n+xx] * math.Cos(math.Pi*float64(2*y+1)*float64(u)/float64(2*n)) *
						math.Cos(math.Pi*float64(2*xx+1)*float64(v)/float64(2*n))
				}
			}
			out[u*n+v] = s(u) * s(v) * acc
		}
	}
	return out
}

// dctTol: float64 rounding of O(n log n) sums of values of order 1.
const dctTol = 1e-12

func TestDCT2MatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 2, 5, 8, 12, 16} {
		x := make([]float64, n*n)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		want := dctDirect(x, n)
		got := make([]float64, n*n)
		d := newDCT2Workers(n, 3) // rows split unevenly over goroutines
		d.forward(got, x)
		worst, at := 0.0, 0
		for i := range got {
			if e := math.Abs(got[i] - want[i]); e > worst {
				worst, at = e, i
			}
		}
		if worst > dctTol {
			t.Errorf("n=%d: forward differs from definition by %g at (%d,%d)", n, worst, at/n, at%n)
		}
		// Inverse recovers x; in-place use (dst aliasing src) works.
		d.inverse(got, got)
		worst = 0
		for i := range got {
			if e := math.Abs(got[i] - x[i]); e > worst {
				worst, at = e, i
			}
		}
		if worst > dctTol {
			t.Errorf("n=%d: round trip error %g at (%d,%d)", n, worst, at/n, at%n)
		}
	}
}

func TestDCT2RoundTrip128(t *testing.T) {
	const n = 128
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, n*n)
	var e0 float64
	for i := range x {
		x[i] = rng.Float64()
		e0 += x[i] * x[i]
	}
	d := newDCT2(n)
	c := make([]float64, n*n)
	d.forward(c, x)
	// Orthonormal: energy preserved; constant term = sum/n.
	var e1, sum float64
	for i := range c {
		e1 += c[i] * c[i]
		sum += x[i]
	}
	if math.Abs(e1-e0) > 1e-9*e0 {
		t.Errorf("energy %g, want %g", e1, e0)
	}
	if math.Abs(c[0]-sum/n) > 1e-10 {
		t.Errorf("DC coefficient %g, want %g", c[0], sum/n)
	}
	back := make([]float64, n*n)
	d.inverse(back, c)
	worst := 0.0
	for i := range back {
		worst = math.Max(worst, math.Abs(back[i]-x[i]))
	}
	if worst > dctTol {
		t.Errorf("round trip error %g", worst)
	}
}

// TestDCT2Separable128 checks the production size, on several goroutines,
// against the separable matrix form C·X·Cᵀ of the definition.
func TestDCT2Separable128(t *testing.T) {
	const n = 128
	c := make([]float64, n*n) // c[u*n+y] = s(u) cos(π(2y+1)u/2n)
	for u := range n {
		s := math.Sqrt(2.0 / n)
		if u == 0 {
			s = math.Sqrt(1.0 / n)
		}
		for y := range n {
			c[u*n+y] = s * math.Cos(math.Pi*float64(2*y+1)*float64(u)/(2*n))
		}
	}
	rng := rand.New(rand.NewPCG(1, 4))
	x := make([]float64, n*n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	tmp := make([]float64, n*n) // C·X
	for u := range n {
		for y := range n {
			cu := c[u*n+y]
			for v := range n {
				tmp[u*n+v] += cu * x[y*n+v]
			}
		}
	}
	want := make([]float64, n*n) // (C·X)·Cᵀ
	for u := range n {
		for v := range n {
			var acc float64
			for k := range n {
				acc += tmp[u*n+k] * c[v*n+k]
			}
			want[u*n+v] = acc
		}
	}
	got := make([]float64, n*n)
	newDCT2Workers(n, 4).forward(got, x)
	worst, at := 0.0, 0
	for i := range got {
		if e := math.Abs(got[i] - want[i]); e > worst {
			worst, at = e, i
		}
	}
	// Sums of 16384 terms of order 1: rounding of order 1e-13.
	if worst > 1e-11 {
		t.Errorf("128x128 DCT differs from C·X·Cᵀ by %g at (%d,%d)", worst, at/n, at%n)
	}
}

func BenchmarkDCT2(b *testing.B) {
	d := newDCT2(128)
	x := make([]float64, 128*128)
	for i := range x {
		x[i] = float64(i % 7)
	}
	for b.Loop() {
		d.forward(x, x)
		d.inverse(x, x)
	}
}
