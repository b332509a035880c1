package decon

import "math"

// axpyFMA sets o[i] = fma(kv, s[i], o[i]) for every i of o (s at least as
// long): kv*s[i] + o[i] rounded once to float32 (round to nearest, ties to
// even), the IEEE 754 fusedMultiplyAdd of binary32, what the GPU's FFMA
// (__fmaf_rn) computes. It is the inner loop of every convolution of the
// CPU reference: AVX2 FMA instructions where the processor has them
// (amd64), else axpyFMAGo.
func axpyFMA(o, s []float32, kv float32) {
	if len(o) == 0 {
		return
	}
	s = s[:len(o)]
	if haveFMA {
		axpyFMAVec(&o[0], &s[0], len(o), kv)
		return
	}
	axpyFMAGo(o, s, kv)
}

// axpyFMAGo is axpyFMA in portable Go, which has no float32 FMA: it is
// emulated in float64. The product of two float32 values is exact there
// (24 + 24 significant bits), the sum is rounded once to float64, and
// rounding that to float32 gives the single rounding of the exact sum
// unless the float64 sum lies exactly halfway between two float32 values
// (then the sum's rounding error decides; see fma32Tie), so the check for
// that case is a mask test. About 3 times slower than an unfused multiply
// and add.
func axpyFMAGo(o, s []float32, kv float32) {
	k := float64(kv)
	s = s[:len(o)]
	for i, x := range s {
		p := k * float64(x)
		c := float64(o[i])
		sum := p + c
		bits := math.Float64bits(sum)
		// A float32 midpoint (normal range) has the 29 float64 fraction
		// bits below float32's precision equal to 1 followed by zeros;
		// below 2^-126 (float32 subnormals) the spacing differs, so those
		// take the careful path too.
		if bits&(1<<29-1) != 1<<28 && bits&(0x7ff<<52) >= (1023-126)<<52 {
			o[i] = float32(sum)
		} else {
			o[i] = fma32Tie(p, c, sum)
		}
	}
}

// fma32Tie rounds the exact p + c to float32 given s = p + c rounded to
// float64. The exact sum is s + e (TwoSum); rounding s to float32 is right
// unless s is exactly halfway between two float32 values and e is not
// zero, when the exact sum lies on e's side of s. A NaN s (whose fraction
// bits can pass axpyFMAGo's midpoint test) is returned as float32(s).
func fma32Tie(p, c, s float64) float32 {
	bb := s - p
	e := (p - (s - bb)) + (c - bb)
	r := float32(s)
	if e == 0 || float64(r) == s || math.IsInf(s, 0) || math.IsNaN(s) {
		return r
	}
	up := s > float64(r) // the neighbour of r on s's side is above r
	dir := float32(math.Inf(-1))
	if up {
		dir = float32(math.Inf(1))
	}
	r2 := math.Nextafter32(r, dir)
	if float64(r2)-s != s-float64(r) {
		return r // not halfway: float32(s) is the nearest
	}
	if (e > 0) == up {
		return r2
	}
	return r
}
