package align_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/align/aligntest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// productionMosaic is the production acquisition's shape: 7 rows x 9
// columns of 1440x1920 px tiles at 30 % overlap (110 pairs), stage jitter
// of up to 3 px per axis, noise 0.02, and two textureless tiles (a corner
// and one inside the grid) so that the stage-model replacement, the
// refinement climbs and the global re-measurement all run. Built once per
// process: rendering 63 tiles takes a while.
var productionMosaic = sync.OnceValue(func() *aligntest.Mosaic {
	return aligntest.NewMosaic(aligntest.MosaicConfig{
		Rows: 7, Cols: 9, H: 1440, W: 1920, Overlap: 0.3, Jitter: 3, Noise: 0.02, Seed: 21,
		EmptyTiles: []int{0, 31}, Workers: runtime.GOMAXPROCS(0),
	})
})

// productionParams are the settings internal/stitch passes for the
// production configuration (tile_overlap 0.3, ncc_threshold 0.078, pou 0.5,
// global refinement on).
var productionParams = align.Params{Overlap: 0.3, NCCThreshold: 0.078, POU: 0.5, Subpixel: true, Global: true}

// timedTranslator records the wall and process CPU time spent in its
// translator, so that the benchmark can split Align into the pair
// translations and the rest (filtering, texture checks, refinement climbs,
// global solve). Nothing else runs during Translate.
type timedTranslator struct {
	tr        align.PairTranslator
	wall, cpu time.Duration
}

func (t *timedTranslator) Translate(ctx context.Context, tiles []*raster.Float32, pairs []align.Pair, p align.Params) ([]align.Translation, error) {
	start, cpu0 := time.Now(), processCPU()
	defer func() {
		t.wall += time.Since(start)
		t.cpu += processCPU() - cpu0
	}()
	return t.tr.Translate(ctx, tiles, pairs, p)
}

// BenchmarkAlignProduction times align.Align with the CPU translator at 4
// workers on the production-size mosaic (see productionMosaic). Reported,
// per Align call: s/align and cpu-s/align (wall and process CPU time, the
// latter on Linux only), the same split into the CPU translator's share
// (s/translate, cpu-s/translate) and the rest, steps 1-10 of Align
// (s/mist, cpu-s/mist); the number of accepted pairs and the worst tile
// position error, px.
func BenchmarkAlignProduction(b *testing.B) {
	m := productionMosaic()
	tr := &timedTranslator{tr: align.CPU{Workers: 4}}
	var res align.Result
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		var err error
		res, err = align.Align(context.Background(), tr, m.Tiles, m.Cfg.Rows, m.Cfg.Cols, m.Grid, productionParams)
		if err != nil {
			b.Fatal(err)
		}
	}
	cpu := processCPU() - cpu0
	n := float64(b.N)
	wall, wallTr := b.Elapsed().Seconds()/n, tr.wall.Seconds()/n
	accepted := 0
	for _, a := range res.Accepted {
		if a {
			accepted++
		}
	}
	worst := 0.0
	for i, e := range aligntest.PositionErrors(m, res.Positions) {
		if !m.EmptyTile[i] {
			worst = max(worst, e)
		}
	}
	if math.IsNaN(worst) {
		b.Fatal("NaN position error")
	}
	b.ReportMetric(wall, "s/align")
	b.ReportMetric(wallTr, "s/translate")
	b.ReportMetric(wall-wallTr, "s/mist")
	if cpu >= 0 {
		cpuAll, cpuTr := cpu.Seconds()/n, tr.cpu.Seconds()/n
		b.ReportMetric(cpuAll, "cpu-s/align")
		b.ReportMetric(cpuTr, "cpu-s/translate")
		b.ReportMetric(cpuAll-cpuTr, "cpu-s/mist")
	}
	b.ReportMetric(float64(accepted), "accepted")
	b.ReportMetric(worst, "max-pos-err-px")
	fmt.Printf("align production bench: %d tiles of 1440x1920, %d pairs, GOMAXPROCS %d: Align %.3f s wall, %.3f s CPU (translate %.3f s, %.3f s CPU; rest %.3f s, %.3f s CPU); %d accepted, max position error %.3f px\n",
		len(m.Tiles), len(res.Pairs), runtime.GOMAXPROCS(0), wall, cpu.Seconds()/n, wallTr, tr.cpu.Seconds()/n,
		wall-wallTr, (cpu-tr.cpu).Seconds()/n, accepted, worst)
}
