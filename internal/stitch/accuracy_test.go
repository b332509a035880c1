package stitch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/align/aligntest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// Tolerances of TestAlignSyntheticCODEX, px, on the relative position of
// two tiles whose overlap shares texture, and on the position of every tile
// of the largest group of tiles joined by such overlaps (after removing the
// group's mean offset).
const (
	// With the true flatfield and darkfield, well-textured overlaps give
	// translations exact to about 0.05 px (CPU: 0.04 px worst); an overlap
	// with a few nuclei by the tissue edge, where the NCC peak is broad
	// along the edge, was measured to 0.48 px (5x6 seed 5, tiles 19-30).
	correctedPairTol = 0.5
	correctedTileTol = 0.5
	// correctedBulk is the least fraction of textured pairs within
	// bulkTol: all but the sparsely textured ones (CPU: 0 to 1 pair beyond
	// 0.1 px per case).
	correctedBulk = 0.9
	bulkTol       = 0.1
	// Without correction the 20-40 % vignetting (a stand-in for a poor
	// BaSiC fit) scales the two sides of an overlap by different smooth
	// gains, which biases translations by up to 0.63 px (CPU, 5x6 seed 2):
	// the goal of the stage, every tile within 1 px and most pairs within
	// 0.5 px.
	uncorrectedPairTol = 1.0
	uncorrectedTileTol = 1.0
	// uncorrectedBulk is the least fraction of textured pairs within 0.5 px
	// without correction (CPU: 100 % on these cases).
	uncorrectedBulk    = 0.9
	uncorrectedBulkTol = 0.5
)

// TestAlignSyntheticCODEX runs the stage's alignment (alignTiles: the
// reference plane read through dataset, corrected, aligned with the keys of
// the config the synthetic project comes with, pou 0.5 %) on synthetic CODEX
// mosaics of the tiny preset, 160x200 px tiles with a stage jitter of 1.5 px
// (pair translations vary by up to 9 px, pou allows 1 px), and compares the
// positions with the truth. BaSiC is left out: the tiles are corrected with
// the true profiles, or not at all, so that the test measures the alignment
// alone.
//
// Only overlaps that share texture (nuclei; TextureNCC at the true
// translation above align.TextureMin) carry information about the relative
// position of two tiles; a tile whose overlaps are all off the tissue can
// only be placed by the stage model, within the stage jitter, and is not
// held to the tolerances (its error is logged).
func TestAlignSyntheticCODEX(t *testing.T) {
	cases := []struct {
		rows, cols, nz int
		seed           uint64
		short          bool // also run with -short
	}{
		{2, 3, 5, 1, true}, // the tiny preset
		{5, 6, 3, 1, true},
		{2, 3, 5, 5, false},
		{5, 6, 3, 4, false},
		{5, 6, 3, 5, false},
	}
	for _, c := range cases {
		if testing.Short() && !c.short {
			continue
		}
		name := fmt.Sprintf("%dx%d_z%d_seed%d", c.rows, c.cols, c.nz, c.seed)
		t.Run(name, func(t *testing.T) {
			o := synthtest.Tiny(t)
			o.OutDir = t.TempDir()
			o.Rows, o.Cols, o.NZ, o.Seed = c.rows, c.cols, c.nz, c.seed
			o.NCycles, o.Channels, o.WriteTruthScene, o.Workers = 1, []int{1}, false, 2
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			ctx := context.Background()
			cfg := synthProject(t, o)
			cyc, err := dataset.Discover(ctx, cfg.ProjectDir, 1, dataset.Options{
				Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: cfg.Channels, NZPlanes: cfg.NZPlanes, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			// the stage's reference plane (stitch.go) is the one the truth
			// describes
			refZ := cyc.Z[max(1, len(cyc.Z)/2)-1]
			if refZ != o.RefZ() {
				t.Fatalf("stage reference plane Z%d, synth's Z%d", refZ, o.RefZ())
			}
			raw, err := cyc.ReadPlane(ctx, refZ, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			flat, dark := o.Flatfield(1), o.Darkfield(1)
			truthProf := basic.Profile{W: o.TileW, H: o.TileH, Flatfield: flat.Pix, Darkfield: make([]float32, len(dark.Pix))}
			for i, v := range dark.Pix {
				truthProf.Darkfield[i] = v / 65535
			}
			noProf := basic.Profile{W: o.TileW, H: o.TileH, Flatfield: make([]float32, len(flat.Pix)), Darkfield: make([]float32, len(dark.Pix))}
			for i := range noProf.Flatfield {
				noProf.Flatfield[i] = 1
			}
			truth := o.TilePositions(1)
			opts := Options{Config: cfg, Cycle: 1, Engine: NewCPUEngine(2), Workers: 2}
			for _, v := range []struct {
				name             string
				prof             *basic.Profile
				pairTol, tileTol float64
				bulk, bulkTol    float64
			}{
				{"corrected", &truthProf, correctedPairTol, correctedTileTol, correctedBulk, bulkTol},
				{"uncorrected", &noProf, uncorrectedPairTol, uncorrectedTileTol, uncorrectedBulk, uncorrectedBulkTol},
			} {
				pos, err := alignTiles(ctx, opts, cyc, raw, v.prof, 2)
				if err != nil {
					t.Fatal(err)
				}
				corr, err := Correct(ctx, raw, v.prof, float32(cfg.BasicFlatfieldMin), 2)
				if err != nil {
					t.Fatal(err)
				}
				checkPositions(t, v.name, cyc, corr, pos, truth, v.pairTol, v.tileTol, v.bulk, v.bulkTol)
				// stitching.global_refinement reaches the alignment: off,
				// the tree's positions, which differ and are no closer to
				// the truth (beyond aligntest.EqualTol)
				treeCfg := *cfg
				treeCfg.Stitching.GlobalRefinement = false
				treeOpts := opts
				treeOpts.Config = &treeCfg
				treePos, err := alignTiles(ctx, treeOpts, cyc, raw, v.prof, 2)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Equal(treePos, pos) {
					t.Errorf("%s: global_refinement on and off give the same positions", v.name)
				}
				if g, tr := rmsError(pos, truth), rmsError(treePos, truth); g > tr+aligntest.EqualTol {
					t.Errorf("%s: global refinement position rms %.3f px, tree %.3f", v.name, g, tr)
				}
			}
		})
	}
}

// checkPositions compares fitted positions with the truth (both in
// acquisition order) as TestAlignSyntheticCODEX describes.
func checkPositions(t *testing.T, name string, cyc *dataset.Cycle, tiles []*raster.Float32, pos, truth []raster.Point, pairTol, tileTol, bulk, bulkTol float64) {
	t.Helper()
	n := len(tiles)
	grid := make([]align.GridPos, n)
	for k := range grid {
		grid[k].Row, grid[k].Col = dataset.Grid(k, cyc.Cols)
	}
	pairs := align.Pairs(cyc.Rows, cyc.Cols, grid)
	// textured pairs and the groups of tiles they join (union-find)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	textured := make([]bool, len(pairs))
	nTex, within, worstPair, worstAt := 0, 0, 0.0, -1
	for i, pr := range pairs {
		ty, tx := truth[pr.B].Y-truth[pr.A].Y, truth[pr.B].X-truth[pr.A].X
		textured[i] = align.TextureNCC(tiles[pr.A], tiles[pr.B], int(math.Round(ty)), int(math.Round(tx))) > align.TextureMin
		if !textured[i] {
			continue
		}
		parent[find(pr.A)] = find(pr.B)
		nTex++
		e := math.Hypot(pos[pr.B].Y-pos[pr.A].Y-ty, pos[pr.B].X-pos[pr.A].X-tx)
		if e <= bulkTol {
			within++
		}
		if e > worstPair || worstAt < 0 {
			worstPair, worstAt = e, i
		}
		if e > pairTol {
			t.Errorf("%s: tiles %d-%d: relative position off by %.2f px > %.2f (fitted (%.2f, %.2f), true (%.2f, %.2f))",
				name, pr.A+1, pr.B+1, e, pairTol, pos[pr.B].Y-pos[pr.A].Y, pos[pr.B].X-pos[pr.A].X, ty, tx)
		}
	}
	if nTex == 0 {
		t.Fatalf("%s: no textured pair", name)
	}
	if f := float64(within) / float64(nTex); f < bulk {
		t.Errorf("%s: %d of %d textured pairs within %.2f px (%.0f %%), want at least %.0f %%", name, within, nTex, bulkTol, 100*f, 100*bulk)
	}
	// the largest group
	size := map[int]int{}
	big := 0
	for i := range n {
		r := find(i)
		size[r]++
		if size[r] > size[big] || size[r] == size[big] && r < big {
			big = r
		}
	}
	big = find(big)
	var oy, ox float64
	for i := range n {
		if find(i) == big {
			oy += (pos[i].Y - truth[i].Y) / float64(size[big])
			ox += (pos[i].X - truth[i].X) / float64(size[big])
		}
	}
	worstTile, tileAt := 0.0, -1
	var outside []string
	for i := range n {
		e := math.Hypot(pos[i].Y-truth[i].Y-oy, pos[i].X-truth[i].X-ox)
		if find(i) != big {
			outside = append(outside, fmt.Sprintf("%d: %.2f px", i+1, e))
			continue
		}
		if e > worstTile || tileAt < 0 {
			worstTile, tileAt = e, i
		}
		if e > tileTol {
			t.Errorf("%s: tile %d position off by %.2f px > %.2f (fitted %+v, true %+v, offset (%.2f, %.2f))",
				name, i+1, e, tileTol, pos[i], truth[i], oy, ox)
		}
	}
	pr := pairs[worstAt]
	t.Logf("%s: %d/%d pairs textured, %d within %.2f px, worst %.3f px (%d-%d); %d tiles joined by them, worst %.3f px (tile %d); placed by the stage model only: %v",
		name, nTex, len(pairs), within, bulkTol, worstPair, pr.A+1, pr.B+1, size[big], worstTile, tileAt+1, outside)
}

// rmsError is the RMS position error of pos against truth, px, after
// removing the mean offset.
func rmsError(pos, truth []raster.Point) float64 {
	var oy, ox float64
	for i := range pos {
		oy += (pos[i].Y - truth[i].Y) / float64(len(pos))
		ox += (pos[i].X - truth[i].X) / float64(len(pos))
	}
	var ss float64
	for i := range pos {
		dy, dx := pos[i].Y-truth[i].Y-oy, pos[i].X-truth[i].X-ox
		ss += dy*dy + dx*dx
	}
	return math.Sqrt(ss / float64(len(pos)))
}
