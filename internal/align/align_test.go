package align_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/align/aligntest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

func TestCPUConformance(t *testing.T) {
	aligntest.Run(t, align.CPU{Workers: 2})
}

// TestCropMatchesWholeTiles checks the cropping of CPU against the
// original's whole-tile phase correlation on the standard mosaics: wherever
// the whole-tile method finds the true translation (within 1 px), the
// cropped one returns exactly the same translation; and the cropped one
// finds every textured pair.
func TestCropMatchesWholeTiles(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	agree, wholeMissed := 0, 0
	for _, seed := range seeds {
		m := aligntest.StandardMosaic(seed, 0.02, false)
		p := aligntest.StandardParams(false)
		crop, err := align.CPU{Workers: 2}.Translate(context.Background(), m.Tiles, m.Pairs, p)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := align.TranslateWhole(context.Background(), m.Tiles, m.Pairs, p, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Pairs {
			if m.Textureless[i] {
				continue
			}
			dy, dx := m.TrueTranslation(i)
			if math.Hypot(crop[i].DY-dy, crop[i].DX-dx) > 1 {
				t.Errorf("seed %d pair %d: cropped PCM missed: got (%g, %g), true (%.2f, %.2f)", seed, i, crop[i].DY, crop[i].DX, dy, dx)
			}
			if math.Hypot(whole[i].DY-dy, whole[i].DX-dx) > 1 {
				wholeMissed++
				continue
			}
			if crop[i] != whole[i] {
				t.Errorf("seed %d pair %d: cropped %+v, whole tiles %+v", seed, i, crop[i], whole[i])
			}
			agree++
		}
	}
	t.Logf("cropped = whole-tile translation on %d textured pairs; whole tiles missed %d that cropping found", agree, wholeMissed)
	if agree == 0 {
		t.Error("no pair to compare")
	}
}

// TestWorkersIndependent checks that results do not depend on Workers.
func TestWorkersIndependent(t *testing.T) {
	m := aligntest.StandardMosaic(10, 0.02, false)
	p := aligntest.StandardParams(true)
	a, err := align.CPU{Workers: 1}.Translate(context.Background(), m.Tiles, m.Pairs, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := align.CPU{Workers: 3}.Translate(context.Background(), m.Tiles, m.Pairs, p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("pair %d: 1 worker %+v, 3 workers %+v", i, a[i], b[i])
		}
	}
}

func BenchmarkTranslate(b *testing.B) {
	for _, w := range []int{1, 4, 16} {
		if w > runtime.NumCPU() {
			continue
		}
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) { aligntest.Bench(b, align.CPU{Workers: w}, true) })
	}
}

// TestAlignSmallGrids covers grids without one of the directions.
func TestAlignSmallGrids(t *testing.T) {
	ctx := context.Background()
	p := aligntest.StandardParams(true)
	// one tile: no pairs, position 0
	m := aligntest.NewMosaic(aligntest.MosaicConfig{Rows: 1, Cols: 1, H: 60, W: 80, Overlap: 0.3, Seed: 11})
	res, err := align.Align(ctx, align.CPU{}, m.Tiles, 1, 1, m.Grid, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pairs) != 0 || len(res.Positions) != 1 || res.Positions[0] != (raster.Point{}) {
		t.Errorf("1x1: pairs %v positions %v", res.Pairs, res.Positions)
	}
	// one row (no Top pairs) and one column (no Left pairs)
	for _, rc := range [][2]int{{1, 3}, {3, 1}} {
		m := aligntest.NewMosaic(aligntest.MosaicConfig{Rows: rc[0], Cols: rc[1], H: 120, W: 150, Overlap: 0.3,
			Jitter: 3, Noise: 0.02, Seed: 12})
		res, err := align.Align(ctx, align.CPU{}, m.Tiles, rc[0], rc[1], m.Grid, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range aligntest.PositionErrors(m, res.Positions) {
			if e > aligntest.PositionMaxErr {
				t.Errorf("%dx%d: tile %d position error %.3f px", rc[0], rc[1], i, e)
			}
		}
	}
	// input errors
	if _, err := align.Align(ctx, align.CPU{}, m.Tiles, 1, 1, nil, p); err == nil {
		t.Error("missing grid: no error")
	}
	two := aligntest.NewMosaic(aligntest.MosaicConfig{Rows: 1, Cols: 2, H: 60, W: 80, Overlap: 0.3, Seed: 13})
	if _, err := align.Align(ctx, align.CPU{}, two.Tiles, 1, 2, []align.GridPos{{Row: 0, Col: 0}, {Row: 0, Col: 0}}, p); err == nil {
		t.Error("two tiles in one cell: no error")
	}
	if _, err := align.Align(ctx, align.CPU{}, two.Tiles, 1, 2, []align.GridPos{{Row: 0, Col: 0}, {Row: 1, Col: 0}}, p); err == nil {
		t.Error("cell outside the grid: no error")
	}
}
