package basic_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

var productionStack = sync.OnceValue(func() *raster.Stack {
	sc := basictest.DefaultScene()
	sc.N, sc.H, sc.W, sc.Background, sc.BlobScale = 63, 1440, 1920, 3, 6
	st, _ := basictest.Make(sc)
	return st
})

// BenchmarkProductionFit is one production-like fit: 63 tiles of
// 1440 x 1920 (normalised counts) -> 128 x 128 with Production() settings,
// with all cores and with one. It reports seconds per fit, the inner
// iterations, and the resize of the 63 tiles to the working size on its own.
func BenchmarkProductionFit(b *testing.B) {
	st := productionStack()
	p := basic.Production()
	for _, w := range []int{runtime.NumCPU(), 1} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			f := basic.CPU{Workers: w}
			var iters, rounds int
			for b.Loop() {
				prof, err := f.Fit(context.Background(), []*raster.Stack{st}, p)
				if err != nil {
					b.Fatal(err)
				}
				iters, rounds = prof[0].Iterations, prof[0].Reweights
			}
			perFit := b.Elapsed().Seconds() / float64(b.N)
			start := time.Now()
			basic.ResizeToWorking(nil, st, p.WorkingSize, w)
			resize := time.Since(start).Seconds()
			b.ReportMetric(perFit, "s/fit")
			b.ReportMetric(float64(iters), "iterations")
			b.ReportMetric(float64(rounds), "rounds")
			b.ReportMetric(resize, "resize-s")
			b.Logf("workers %d: 63 x 1440x1920 -> 128: %.2f s per fit (%d rounds, %d iterations, %.2f ms/iteration incl. setup); resize alone %.2f s",
				w, perFit, rounds, iters, 1000*(perFit-resize)/float64(iters), resize)
		})
	}
}
