//go:build cuda

package gpu

import (
	"context"
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/align/aligntest"
)

// gpuCPUTransTol bounds |GPU - CPU| of a translation component, px: both
// take the same discrete decisions (peaks, candidates, climb), so integer
// translations are equal; the sub-pixel fit uses NCCs that differ only by
// summation order (~1e-12), which moves the quadratic's peak by far less.
const gpuCPUTransTol = 1e-6

// The GPU translator agrees with align.CPU pair by pair.
func TestTranslatorMatchesCPU(t *testing.T) {
	for _, sub := range []bool{false, true} {
		m := aligntest.StandardMosaic(3, 0.02, false)
		p := aligntest.StandardParams(sub)
		want, err := align.CPU{}.Translate(context.Background(), m.Tiles, m.Pairs, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testEngine.Translator().Translate(context.Background(), m.Tiles, m.Pairs, p)
		if err != nil {
			t.Fatal(err)
		}
		worst, wn, at := 0.0, 0.0, 0
		for i := range want {
			d := math.Max(math.Abs(got[i].DY-want[i].DY), math.Abs(got[i].DX-want[i].DX))
			if d > worst || math.IsNaN(d) {
				worst, at = d, i
			}
			wn = math.Max(wn, math.Abs(got[i].NCC-want[i].NCC))
		}
		t.Logf("subpixel %v: %d pairs, worst translation difference %.3g px (pair %d: gpu %+v cpu %+v), worst NCC difference %.3g",
			sub, len(want), worst, at, got[at], want[at], wn)
		if !(worst <= gpuCPUTransTol) {
			t.Errorf("subpixel %v: pair %d: GPU %+v, CPU %+v", sub, at, got[at], want[at])
		}
		if !(wn <= 1e-9) {
			t.Errorf("subpixel %v: NCC differs from the CPU by %.3g", sub, wn)
		}
	}
}

// BenchmarkTranslator is aligntest's production-size workload (110 pairs
// of 1440x1920).
func BenchmarkTranslator(b *testing.B) {
	aligntest.Bench(b, testEngine.Translator(), false)
}
