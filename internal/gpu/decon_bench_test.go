//go:build cuda

package gpu

import (
	"context"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// BenchmarkDeconProduction is one production channel's deconvolution on
// the device, the stack already there: 20 x 7493 x 12676 counts (padded to
// 20 x 7680 x 12800), the 9 x 9 x 1 kernel, Richardson-Lucy with the
// stage's defaults (free boundary, no damping, 0.01 % clip) for 10
// iterations without the stop rule: milliseconds per iteration (the
// padding, percentiles and rescale included).
func BenchmarkDeconProduction(b *testing.B) {
	const nz, ny, nx, its = 20, 7493, 12676, 10
	ctx := context.Background()
	k := &psf.Kernel{NZ: 1, NY: 9, NX: 9, Data: make([]float32, 81)}
	for i := range k.Data {
		k.Data[i] = float32(1+i%5) / 241
	}
	in := raster.NewStack(nz, ny, nx)
	for i := range in.Pix {
		in.Pix[i] = float32(100 + (i*7919)%4000)
	}
	p := decon.Params{Algorithm: decon.RichardsonLucy, Iterations: its, StopCriterion: -1, HistClip: 0.01, Boundary: decon.BoundaryFree}
	d, err := testEngine.UploadStack(ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	defer testEngine.FreeStack(d)
	b.ResetTimer()
	for range b.N {
		out, st, err := testEngine.DeconvolveDevice(ctx, d, k, p)
		if err != nil {
			b.Fatal(err)
		}
		testEngine.FreeStack(out)
		if st.Iterations != its {
			b.Fatalf("%d iterations, want %d", st.Iterations, its)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N*its), "ms/iteration")
}
