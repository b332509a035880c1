package basic

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkPass times one fused ALM sweep at the production size (63 images
// of 128x128), single goroutine.
func BenchmarkPass(b *testing.B) {
	for _, dark := range []bool{false, true} {
		name := "flat"
		if dark {
			name = "dark"
		}
		b.Run(name, func(b *testing.B) {
			p := Production()
			p.Darkfield = dark
			s := newSolver(128, 63, p, 1)
			rng := rand.New(rand.NewPCG(1, 1))
			for i := range s.d {
				s.d[i] = rng.Float64()
			}
			for i := range s.wIdct {
				s.wIdct[i] = 1 + 0.1*rng.Float64()
				if s.wIdct[i] > 1.05 {
					s.hi[i] = 1
				} else {
					s.lo[i] = 1
				}
			}
			for j := range s.coeff {
				s.coeff[j] = rng.Float64() * 2
				s.valid[j] = s.coeff[j] < 1
			}
			for b.Loop() {
				s.pass(0.01, 0.015)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(s.d)), "ns/elem")
		})
	}
}
