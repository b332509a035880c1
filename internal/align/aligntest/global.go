package aligntest

import (
	"context"
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// EqualTol is how far, px, the global positions' RMS and worst error may
// exceed the spanning tree's and still count as equal: on the standard
// mosaic both sit at the sub-pixel noise floor (tree 0.009 / 0.015, global
// 0.010 / 0.015 px RMS / max).
const EqualTol = 0.01

// optimumBox is the half-width, px, of the exhaustive search for a pair's
// NCC local optimum around its final relative offset (localOptimum).
const optimumBox = 2

// localOptimum returns the NCC local optimum of pair i of m near the
// relative offset (oy, ox): the largest NCC over the integer translations
// within ±optimumBox of the nearest integer, refined by align.QuadPeak
// with subpixel. ok is false when that maximum lies on the box's edge (no
// local maximum near the offset). It is an exhaustive search, independent
// of the translators' hill-climb.
func localOptimum(m *Mosaic, i int, oy, ox float64, subpixel bool) (y, x float64, ok bool) {
	pr := m.Pairs[i]
	a, b := m.Tiles[pr.A], m.Tiles[pr.B]
	y0, x0 := int(math.Round(oy)), int(math.Round(ox))
	by, bx, bv := 0, 0, math.Inf(-1)
	for dy := -optimumBox; dy <= optimumBox; dy++ {
		for dx := -optimumBox; dx <= optimumBox; dx++ {
			if v := align.NCC(a, b, y0+dy, x0+dx); v > bv {
				by, bx, bv = dy, dx, v
			}
		}
	}
	if abs(by) == optimumBox || abs(bx) == optimumBox {
		return 0, 0, false
	}
	y, x = float64(y0+by), float64(x0+bx)
	if subpixel {
		var f [3][3]float64
		for u := -1; u <= 1; u++ {
			for v := -1; v <= 1; v++ {
				f[u+1][v+1] = align.NCC(a, b, y0+by+u, x0+bx+v)
			}
		}
		if oy, ox, ok := align.QuadPeak(&f); ok {
			y, x = y+oy, x+ox
		}
	}
	return y, x, true
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// offsetFromOptimum is the distance, px, of pair i's relative offset in
// pos from its NCC local optimum (+Inf when there is none within
// optimumBox).
func offsetFromOptimum(m *Mosaic, pos []raster.Point, i int, subpixel bool) float64 {
	pr := m.Pairs[i]
	oy, ox := pos[pr.B].Y-pos[pr.A].Y, pos[pr.B].X-pos[pr.A].X
	y, x, ok := localOptimum(m, i, oy, ox, subpixel)
	if !ok {
		return math.Inf(1)
	}
	return math.Hypot(oy-y, ox-x)
}

// wrongPeaks wraps a PairTranslator and moves the measurements of the
// listed pairs by the given (dy, dx), px, with NCC 0.99: a confident wrong
// peak, as on a repetitive texture (a lattice vector off) or a shared edge.
type wrongPeaks struct {
	tr    align.PairTranslator
	shift map[int][2]float64
}

func (w wrongPeaks) Translate(ctx context.Context, tiles []*raster.Float32, pairs []align.Pair, p align.Params) ([]align.Translation, error) {
	out, err := w.tr.Translate(ctx, tiles, pairs, p)
	if err != nil {
		return out, err
	}
	for k, d := range w.shift {
		if k < len(out) {
			out[k] = align.Translation{DY: out[k].DY + d[0], DX: out[k].DX + d[1], NCC: 0.99}
		}
	}
	return out, nil
}

// globalCase is one mosaic of the global-refinement suite.
type globalCase struct {
	name  string
	cfg   MosaicConfig
	p     align.Params
	wrong map[int][2]float64 // injected wrong peaks by pair index
	// maxErr bounds the global positions' worst error over textured
	// tiles, px; treeWorse > 0 requires the tree's worst error to exceed
	// it (the case is one the tree gets wrong).
	maxErr, treeWorse float64
}

// GlobalCases are the mosaics the global refinement is held to: the
// standard mosaic; weak (10 %) overlaps with more noise; a repetitive
// texture (a 9 px lattice) with three pairs measured one lattice vector
// off, which the MIST filters catch at this jitter; the standard
// mosaic with three confident wrong peaks 2-3 px off; a real-data-like
// 6 x 9 grid of 256 x 256 tiles at 10 % overlap with vignetting, noise,
// pou 0.5 % and a tissue edge (textureless tiles).
func globalCases() []globalCase {
	std := StandardMosaic(6, 0.02, false).Cfg
	rep := std
	rep.Period, rep.Jitter, rep.EmptyTiles, rep.EmptyPairs, rep.Seed = 9, 1.5, nil, nil, 11
	return []globalCase{
		{name: "Standard", cfg: std, p: StandardParams(true), maxErr: PositionMaxErr},
		{name: "WeakOverlap", cfg: MosaicConfig{Rows: 3, Cols: 4, H: 200, W: 240, Overlap: 0.1, Jitter: jitter,
			Noise: 0.08, Seed: 12, EmptyTiles: []int{11}, Workers: 2},
			p: align.Params{Overlap: 0.1, NCCThreshold: thresh, POU: pou, Subpixel: true}, maxErr: 0.5},
		{name: "Repetitive", cfg: rep, p: StandardParams(true),
			// one lattice vector off: pairs 0 (tiles 0-1), 4 (2-3) and 9 (5-6) are Left pairs
			wrong: map[int][2]float64{0: {9, 0}, 4: {0, 9}, 9: {-9, 0}}, maxErr: PositionMaxErr},
		{name: "WrongPeaks", cfg: std, p: StandardParams(true),
			// Top pairs 0-4, 3-7 and 6-10
			wrong: map[int][2]float64{1: {2, -2}, 6: {-3, 0}, 12: {0, 2.5}}, maxErr: PositionMaxErr, treeWorse: 1},
		{name: "RealLike", cfg: MosaicConfig{Rows: 6, Cols: 9, H: 256, W: 256, Overlap: 0.1, Jitter: 1.5,
			Noise: 0.03, Vignette: 0.3, Seed: 13, EmptyTiles: []int{0, 1, 9}, Workers: 2},
			p: align.Params{Overlap: 0.1, NCCThreshold: thresh, POU: 0.5, Subpixel: true}, maxErr: 0.5},
	}
}

// testGlobal checks Align with Params.Global on every globalCase: every
// accepted pair within align.GlobalTol of its own NCC local optimum
// (found by exhaustive search), the injected wrong peaks not kept, and
// tile positions at least as close to the truth as the spanning tree's
// (RMS and worst tile) and within the case's bound.
func testGlobal(t *testing.T, tr align.PairTranslator) {
	for _, c := range globalCases() {
		t.Run(c.name, func(t *testing.T) {
			m := NewMosaic(c.cfg)
			p := c.p
			p.Global = true
			var use align.PairTranslator = tr
			if len(c.wrong) > 0 {
				use = wrongPeaks{tr, c.wrong}
			}
			res, err := align.Align(context.Background(), use, m.Tiles, m.Cfg.Rows, m.Cfg.Cols, m.Grid, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Accepted) != len(m.Pairs) || len(res.Outlier) != len(m.Pairs) || len(res.Remeasured) != len(m.Pairs) {
				t.Fatalf("Accepted/Outlier/Remeasured sizes %d/%d/%d, want %d", len(res.Accepted), len(res.Outlier), len(res.Remeasured), len(m.Pairs))
			}
			nAcc, nOut, nRe, treeAt, globAt, textured := 0, 0, 0, 0, 0, 0
			for i := range m.Pairs {
				if res.Outlier[i] {
					nOut++
				}
				if res.Remeasured[i] {
					nRe++
				}
				if !m.Textureless[i] {
					textured++
					if offsetFromOptimum(m, res.TreePositions, i, p.Subpixel) <= align.GlobalTol {
						treeAt++
					}
					if offsetFromOptimum(m, res.Positions, i, p.Subpixel) <= align.GlobalTol {
						globAt++
					}
				}
				if !res.Accepted[i] {
					continue
				}
				nAcc++
				if d := offsetFromOptimum(m, res.Positions, i, p.Subpixel); !(d <= align.GlobalTol) {
					t.Errorf("accepted pair %d %+v: final offset %.3f px from its NCC local optimum, want <= %.2f",
						i, m.Pairs[i], d, align.GlobalTol)
				}
				if m.Textureless[i] {
					t.Errorf("textureless pair %d %+v accepted (translation %+v)", i, m.Pairs[i], res.Translations[i])
				}
				if _, ok := c.wrong[i]; ok {
					dy, dx := m.TrueTranslation(i)
					if e := math.Hypot(res.Translations[i].DY-dy, res.Translations[i].DX-dx); e > SubpixelMaxErr {
						t.Errorf("injected wrong pair %d accepted at (%.2f, %.2f), true (%.2f, %.2f)", i,
							res.Translations[i].DY, res.Translations[i].DX, dy, dx)
					}
				}
			}
			gRMS, gMax, gAt := positionStats(m, res.Positions)
			tRMS, tMax, tAt := positionStats(m, res.TreePositions)
			t.Logf("%d pairs (%d textured): %d accepted, %d outliers dropped, %d re-measured; textured pairs within %.1f px of their NCC optimum: tree %d, global %d; position error rms/max: tree %.3f/%.3f px (tile %d), global %.3f/%.3f px (tile %d)",
				len(m.Pairs), textured, nAcc, nOut, nRe, align.GlobalTol, treeAt, globAt, tRMS, tMax, tAt, gRMS, gMax, gAt)
			if globAt < treeAt {
				t.Errorf("%d textured pairs at their NCC optimum with the global refinement, %d with the tree", globAt, treeAt)
			}
			if gRMS > tRMS+EqualTol || gMax > tMax+EqualTol {
				t.Errorf("global positions rms %.4f / max %.4f px, worse than the tree's %.4f / %.4f", gRMS, gMax, tRMS, tMax)
			}
			if gMax > c.maxErr {
				t.Errorf("global position error %.3f px at tile %d > %.2f", gMax, gAt, c.maxErr)
			}
			if c.treeWorse > 0 && !(tMax > c.treeWorse) {
				t.Errorf("tree position error %.3f px <= %.1f: the injected wrong peaks no longer reach the tree, the case tests nothing", tMax, c.treeWorse)
			}
		})
	}
}

// positionStats returns the RMS and worst position error over tiles not
// marked empty (PositionErrors) and the worst tile.
func positionStats(m *Mosaic, pos []raster.Point) (rms, worst float64, at int) {
	var ss float64
	n := 0
	at = -1
	for i, e := range PositionErrors(m, pos) {
		if m.EmptyTile[i] {
			continue
		}
		ss += e * e
		n++
		if e > worst || at < 0 {
			worst, at = e, i
		}
	}
	return math.Sqrt(ss / float64(n)), worst, at
}
