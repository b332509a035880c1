package decon

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fma32 is axpyFMA for one value: a*b + c rounded once to float32, by the
// dispatching form (vec) or axpyFMAGo.
func fma32(a, b, c float32, vec bool) float32 {
	o := [1]float32{c}
	if vec {
		axpyFMA(o[:], []float32{b}, a)
	} else {
		axpyFMAGo(o[:], []float32{b}, a)
	}
	return o[0]
}

// exactFMA32 rounds a*b + c to float32 through big.Float, exactly: the
// independent reference of fma32.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(600).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(600).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(600).SetFloat64(float64(c)))
	if x.Sign() == 0 {
		// big.Float has no signed zero through arithmetic; IEEE gives +0
		// unless both terms are -0
		return float32(float64(a)*float64(b) + float64(c))
	}
	f, _ := x.Float32()
	return f
}

// TestFMA32 checks axpyFMA and axpyFMAGo (through fma32) bit for bit against the exact sum rounded once:
// random operands over the whole float32 range, intensities like a
// convolution's, subnormals, and sums built to fall within 2^-60 of a
// float32 midpoint, where rounding the float64 sum again gives the wrong
// neighbour (naive counts how often it did).
func TestFMA32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var n, naive, bad int
	check := func(a, b, c float32) {
		n++
		want := exactFMA32(a, b, c)
		for _, vec := range []bool{false, true} {
			got := fma32(a, b, c, vec)
			if math.Float32bits(got) != math.Float32bits(want) {
				bad++
				if bad <= 10 {
					t.Errorf("fma(%g, %g, %g) = %g (%#x), exact %g (%#x) (vector form %v)", a, b, c, got, math.Float32bits(got), want, math.Float32bits(want), vec && haveFMA)
				}
			}
		}
		if float32(float64(a)*float64(b)+float64(c)) != want {
			naive++
		}
	}
	anyBits := func() float32 {
		for {
			f := math.Float32frombits(rng.Uint32())
			if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) && math.Abs(float64(f)) < 1e18 {
				return f
			}
		}
	}
	for range 200000 {
		check(anyBits(), anyBits(), anyBits())
		// a PSF weight times an intensity plus a running sum
		check(float32(rng.Float64()/81), float32(rng.Float64()*65535), float32(rng.Float64()*65535))
		// subnormal results
		check(math.Float32frombits(rng.Uint32()&0x807fffff), float32(rng.Float64()*4), math.Float32frombits(rng.Uint32()&0x80ffffff))
	}
	for range 200000 {
		// c + p within a tiny amount of the midpoint above or below c:
		// p = (u/2)(1 + d)(1 - d) = u/2 - u d^2/2 with a = (1 + d), b = (u/2)(1 - d)
		// (half the spacing u is a power of two, split between a and b so
		// that both are normal even where c is subnormal)
		c := float32(rng.Float64()*1000 + 1e-3)
		if rng.IntN(3) == 0 {
			c = math.Float32frombits(rng.Uint32() & 0x007fffff) // subnormal
		}
		if rng.IntN(2) == 0 {
			c = -c
		}
		u := math.Abs(float64(math.Nextafter32(c, float32(math.Inf(1)))) - float64(c))
		_, e := math.Frexp(u / 2)
		d := math.Ldexp(1, -(10 + rng.IntN(12)))
		sign := 1.0
		if rng.IntN(2) == 0 {
			sign = -1
		}
		a := float32(math.Ldexp(1+sign*d, e/2))
		b := float32(math.Ldexp(0.5*(1-sign*d), e-e/2))
		if rng.IntN(2) == 0 {
			b = -b
		}
		check(a, b, c)
		check(b, a, c)
	}
	t.Logf("%d cases, %d where rounding the float64 sum again is wrong", n, naive)
	if naive == 0 {
		t.Error("no case where the naive double rounding is wrong: the midpoint cases do not test fma32Tie")
	}
}

// TestAxpyFMARows checks the vector form's blocks of 32 and 8 and its
// tail against axpyFMAGo on rows of every length up to 100 (bit for bit),
// and that it touches nothing past n.
func TestAxpyFMARows(t *testing.T) {
	if !haveFMA {
		t.Logf("no AVX2+FMA here: axpyFMA is axpyFMAGo")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 101 {
		s := make([]float32, n+1)
		o := make([]float32, n+1)
		for i := range s {
			s[i] = float32(rng.Float64() * 5000)
			o[i] = float32(rng.Float64() * 5000)
		}
		want := append([]float32(nil), o...)
		kv := float32(rng.Float64())
		axpyFMA(o[:n], s[:n], kv)
		axpyFMAGo(want[:n], s[:n], kv)
		for i := range o {
			if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d: o[%d] = %g, axpyFMAGo %g", n, i, o[i], want[i])
			}
		}
	}
}

// BenchmarkAxpyFMA prints the cost of one tap of the CPU convolution: the
// dispatching form and the portable one.
func BenchmarkAxpyFMA(b *testing.B) {
	o := make([]float32, 4096)
	s := make([]float32, 4096)
	for i := range s {
		s[i] = float32(i%977) * 1.25
	}
	for _, c := range []struct {
		name string
		f    func(o, s []float32, kv float32)
	}{{"dispatch", axpyFMA}, {"go", axpyFMAGo}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f(o, s, 0.0123)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(o)), "ns/tap")
		})
	}
}
