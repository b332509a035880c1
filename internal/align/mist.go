package align

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// LoopTol is the largest closure error, px per component, of a 2x2 loop
// of first-pass translations whose four translations are then Consistent
// (step 6 of Align). Sub-pixel translations err by at most 0.2 px each
// (aligntest.SubpixelMaxErr), 0.8 px around a loop; integer ones by under
// 0.5 each, so a loop of correct integer translations closes to -1, 0 or 1.
// A wrong translation is a PCM peak of an edge or of noise, several px to
// tens of px away.
const LoopTol = 1.0

// GridPos is a tile's cell in the acquisition grid, 0-based.
type GridPos struct {
	Row, Col int
}

// Result is the outcome of Align. Per-pair slices are indexed like Pairs.
type Result struct {
	// Positions of every tile's pixel (0, 0), px, shifted so that the
	// minimum Y and the minimum X are 0.
	Positions []raster.Point
	Pairs     []Pair
	// First holds the translations as measured by the PairTranslator.
	First []Translation
	// Translations are the final ones: the measured translation for trusted
	// pairs; for the others the stage model (row/column median of trusted
	// ones) with NCC -1, or, when a hill-climb near the stage model found a
	// textured NCC maximum above Threshold, that translation and NCC
	// (Refined).
	Translations []Translation
	Valid        []bool // passed every MIST filter
	// Consistent: the first-pass translation closes a 2x2 loop of the grid
	// (step 6); kept as measured whether Valid or not.
	Consistent []bool
	// Trusted: Consistent, or Valid with texture (step 6); kept as measured.
	Trusted []bool
	Refined []bool // not Trusted, replaced, then re-measured near the model
	// Threshold is the NCC threshold actually used (adaptive).
	Threshold float64
	// Repeatability is MIST's r, px: the tolerance of the per-row/column
	// median check.
	Repeatability int
	// SearchRadius is the half-width of the refinement box around the stage
	// model, px (step 8).
	SearchRadius int
	// Tree lists the indices of the pairs in the maximum spanning tree.
	Tree []int
	// TreePositions are the positions placed along Tree (step 9), shifted
	// so the minimum is 0; Positions without Params.Global.
	TreePositions []raster.Point
	// With Params.Global (step 10), else nil: Accepted pairs are the
	// measurements the positions were solved from, each within GlobalTol
	// of its translation; Outlier pairs were accepted (trusted or refined)
	// and dropped for their residual; Remeasured pairs got a new
	// translation, the NCC local maximum near the solved positions, which
	// replaces theirs in Translations.
	Accepted, Outlier, Remeasured []bool
}

// Pairs returns the neighbour pairs of tiles placed on a rows x cols grid:
// for every tile in index order, its Left pair (r, c) -> (r, c+1), then its
// Top pair (r, c) -> (r+1, c), when that neighbour exists. grid[i] is the
// cell of tile i. It panics on cells outside the grid or used twice.
func Pairs(rows, cols int, grid []GridPos) []Pair {
	at := make([]int, rows*cols)
	for i := range at {
		at[i] = -1
	}
	for i, g := range grid {
		if g.Row < 0 || g.Row >= rows || g.Col < 0 || g.Col >= cols {
			panic(fmt.Sprintf("align: tile %d at (%d, %d) outside a %dx%d grid", i, g.Row, g.Col, rows, cols))
		}
		if at[g.Row*cols+g.Col] >= 0 {
			panic(fmt.Sprintf("align: tiles %d and %d share cell (%d, %d)", at[g.Row*cols+g.Col], i, g.Row, g.Col))
		}
		at[g.Row*cols+g.Col] = i
	}
	var out []Pair
	for i, g := range grid {
		if g.Col+1 < cols {
			if j := at[g.Row*cols+g.Col+1]; j >= 0 {
				out = append(out, Pair{A: i, B: j, Dir: Left})
			}
		}
		if g.Row+1 < rows {
			if j := at[(g.Row+1)*cols+g.Col]; j >= 0 {
				out = append(out, Pair{A: i, B: j, Dir: Top})
			}
		}
	}
	return out
}

// Align computes tile positions of a grid mosaic (MIST, as in the original's
// Kstitch): it measures every neighbour pair with tr, filters the
// translations against the stage model, replaces the rejected ones, and
// places the tiles along a maximum spanning tree of the NCC weights.
//
// Steps, and where this differs from the original (each a fix):
//
//  1. Threshold: if Params.NCCThreshold exceeds the largest measured NCC,
//     use max(min NCC, mean NCC / 2), else Params.NCCThreshold. (The
//     original raised the threshold to the minimum NCC when every pair was
//     above it, which with the strict ">" test rejected the best-correlated
//     mosaic's weakest pair for no reason.)
//  2. Valid1: translation along the stitching axis within
//     size·(1 − overlap ∓ pou/100), bounds included, and NCC > threshold.
//  3. Valid2: per direction, both components within the Tukey fences
//     [q1 − 1.5·iqd, q3 + 1.5·iqd], iqd = max(1, q3 − q1), of the Valid1 set.
//  4. Repeatability r = max over directions of ceil(range/2) of the
//     stitching-axis component of Valid2 translations and ceil(range/2) of
//     the other component within each column (Left) or row (Top); at least
//     1 px (sub-pixel translations are never exactly equal). With no Valid2
//     pair at all, r = ceil(pou % of the larger tile side).
//  5. Valid3: Valid2 and both components within r of the median of the
//     Valid2 translations of the same column (Left pairs, column of B) or
//     row (Top pairs, row of B).
//  6. Trust (an addition): a first-pass translation is trusted when it is
//     Consistent, or Valid and textured. Textured: TextureNCC at the
//     translation above TextureMin, i.e. the overlap shares texture there
//     and not only a smooth gradient (NCC is high on a background ramp or
//     tissue edge at many translations). Consistent: it is in a 2x2 block
//     of the grid whose four pairs are all textured with NCC above the
//     threshold and whose first-pass translations sum to zero around the
//     block, Left(r,c) + Top(r,c+1) − Top(r,c) − Left(r+1,c), within
//     LoopTol per component. Consistent translations are kept as measured,
//     Valid or not: steps 2-5 judge a translation by its distance from the
//     stage model, and when the stage moves by more than pou (Valid1) or r
//     (Valid3) they rejected correct translations with NCC near 1 and put
//     a model several px off in their place (synthetic CODEX 5x6 mosaic of
//     160x200 px tiles, pou 0.5 % = 1 px, stage jitter 1.5 px: 39 of 49
//     pairs rejected, 33 of them measured to within 0.02 px; 18 of these
//     kept a model 2.8-8.6 px off, and tile positions were off by up to
//     3.4 px). A wrong translation (a PCM peak of an edge or of noise) is
//     px to tens of px off and breaks every loop it is in.
//  7. Untrusted pairs get the median of the trusted translations of their
//     column/row, else of their direction, else the nominal translation
//     from Params.Overlap (the original's last resort, the median of all
//     raw measurements, is by then known to be untrusted), with NCC −1.
//  8. Refinement: each replaced translation is hill-climbed on NCC within
//     ±R of the model, R = 2·max(r, r') with r' the repeatability of step
//     4 computed over the trusted translations; the climb starts from the
//     model and, when it lies in the box, from the first-pass translation,
//     and the higher NCC wins. The result is kept (Refined) only if its NCC
//     exceeds the threshold, it is a local maximum inside the box, not on
//     its edge, and it is textured; otherwise the model stays. (The
//     original climbed from the model within ±r and kept whatever it
//     found: on a textureless overlap a random walk or a point on a
//     background edge, and when the true translation lies beyond r a point
//     on the box edge that is not a measurement. r' sees the stage moves
//     that the loop check confirmed beyond pou or r. r and r' are half the
//     range of the translations seen; the model of a row or column with
//     one or two trusted translations can sit at one end of that range and
//     the pair at the other, so the box spans the whole range either way.
//     The texture test keeps the larger box from catching NCC maxima of
//     smooth gradients: on the synthetic 5x6 mosaic, uncorrected tiles,
//     one such maximum was 8 px off.)
//     Trusted translations are not climbed again: the translator already
//     returns an NCC local maximum (and its sub-pixel peak).
//  9. Maximum spanning tree (Kruskal, ties by pair order) with weight
//     NCC + 10 for trusted pairs; positions by traversal from tile 0;
//     shifted so the minimum is 0. Positions stay real-valued (the original
//     truncated to int32); grid components not connected to tile 0 are
//     placed by the stage model.
//  10. Global refinement (an addition; Params.Global): the tree uses one
//     path between two tiles and ignores every other pair, so a pair off
//     the tree ends wherever the errors along that path put it (on real
//     tiles 9 of 93 pairs more than 1 px from the NCC optimum of their
//     own overlap). The positions are solved instead by weighted least
//     squares over all accepted pairs (trusted or refined), weight NCC,
//     with Huber reweighting (HuberDelta), from the tree positions; the
//     tree's edges that are not accepted (stage-model translations) join
//     as exact constraints, so a tile without an accepted pair is placed
//     as the tree places it, and each tree component keeps its root
//     where the tree put it. Then the accepted pair with the largest
//     residual above GlobalTol is dropped (Outlier; never one whose
//     removal would disconnect the graph) and the solve repeated, until
//     none is above. Last, every pair not accepted is climbed on NCC from
//     the solved relative offset within ±2 px; a local maximum inside
//     that box, above the threshold, textured and within GlobalTol of the
//     offset is accepted as the pair's translation (Remeasured) and the
//     solve and drops repeated (at most 3 rounds; a pair is re-measured
//     once). ASHLAR (shortest-path tree) and MIST (maximum spanning tree)
//     place tiles along a tree; this follows BigStitcher's global
//     optimisation, which drops disagreeing links and re-solves (its
//     defaults: 3.5 px absolute error), with the tolerance at the 0.5 px
//     this step guarantees.
func Align(ctx context.Context, tr PairTranslator, tiles []*raster.Float32, rows, cols int, grid []GridPos, p Params) (Result, error) {
	if rows <= 0 || cols <= 0 {
		return Result{}, fmt.Errorf("align: invalid grid %dx%d", rows, cols)
	}
	if len(grid) != len(tiles) {
		return Result{}, fmt.Errorf("align: %d grid cells for %d tiles", len(grid), len(tiles))
	}
	if err := CheckInputs(tiles, nil, p); err != nil {
		return Result{}, err
	}
	seen := make(map[GridPos]int, len(grid))
	for i, g := range grid {
		if g.Row < 0 || g.Row >= rows || g.Col < 0 || g.Col >= cols {
			return Result{}, fmt.Errorf("align: tile %d at (%d, %d) outside the %dx%d grid", i, g.Row, g.Col, rows, cols)
		}
		if j, ok := seen[g]; ok {
			return Result{}, fmt.Errorf("align: tiles %d and %d share grid cell (%d, %d)", j, i, g.Row, g.Col)
		}
		seen[g] = i
	}
	pairs := Pairs(rows, cols, grid)
	first, err := tr.Translate(ctx, tiles, pairs, p)
	if err != nil {
		return Result{}, fmt.Errorf("align: %w", err)
	}
	if len(first) != len(pairs) {
		return Result{}, fmt.Errorf("align: translator returned %d translations for %d pairs", len(first), len(pairs))
	}
	m := newMist(tiles, pairs, grid, first, p)
	m.filter()
	if err := m.trust(ctx); err != nil {
		return Result{}, err
	}
	final, refined, err := m.replace(ctx)
	if err != nil {
		return Result{}, err
	}
	tree := spanningTree(len(tiles), pairs, final, m.trusted)
	pos := place(len(tiles), grid, pairs, final, tree, m.model())
	res := Result{
		Positions: pos, TreePositions: shiftToZero(slices.Clone(pos)), Pairs: pairs, First: first, Translations: final,
		Valid: m.valid3, Consistent: m.consistent, Trusted: m.trusted, Refined: refined, Threshold: m.thr,
		Repeatability: m.r, SearchRadius: m.radius, Tree: tree,
	}
	if !p.Global {
		res.Positions = res.TreePositions
		return res, nil
	}
	accepted := make([]bool, len(pairs))
	for i := range accepted {
		accepted[i] = m.trusted[i] || refined[i]
	}
	g, err := m.refineGlobal(ctx, len(tiles), final, accepted, tree, pos)
	if err != nil {
		return Result{}, err
	}
	res.Positions = shiftToZero(g.pos)
	res.Translations, res.Accepted, res.Outlier, res.Remeasured = g.t, g.accepted, g.outlier, g.remeasured
	return res, nil
}

// mist holds the filtering state of one Align call.
type mist struct {
	pairs  []Pair
	grid   []GridPos
	first  []Translation
	h, w   int
	p      Params
	thr    float64
	r      int
	radius int // refinement half-width R, px
	valid3 []bool
	// texture: TextureNCC at the first-pass translation (0 when its NCC is
	// not above the threshold); consistent: closes a 2x2 loop (step 6);
	// trusted: consistent, or valid3 with texture
	texture             []float64
	consistent, trusted []bool
	// medians of trusted translations per (direction, group) and direction
	groupMed map[[2]int][2]float64
	dirMed   [2]*[2]float64
	// scorers memoise each pair's NCC and TextureNCC over steps 6-10 (one
	// goroutine per pair at a time)
	scorers []*scorer
}

// newMist returns the state of an Align call over tiles (at least one) with
// first-pass translations first, before filtering.
func newMist(tiles []*raster.Float32, pairs []Pair, grid []GridPos, first []Translation, p Params) *mist {
	h, w := tiles[0].H, tiles[0].W
	m := &mist{pairs: pairs, grid: grid, first: first, h: h, w: w, p: p, scorers: make([]*scorer, len(pairs))}
	for i, pr := range pairs {
		m.scorers[i] = newScorer(tiles[pr.A], tiles[pr.B], NewPairGeometry(h, w, pr.Dir, p.Overlap))
	}
	return m
}

// group is the column (Left) or row (Top) of a pair's B tile: pairs of one
// group share a stage move.
func (m *mist) group(i int) int {
	pr := m.pairs[i]
	if pr.Dir == Left {
		return m.grid[pr.B].Col
	}
	return m.grid[pr.B].Row
}

// components returns (stitching axis, other axis) of translation t for dir.
func components(t Translation, dir Direction) (float64, float64) {
	if dir == Left {
		return t.DX, t.DY
	}
	return t.DY, t.DX
}

func finite(t Translation) bool {
	return !math.IsNaN(t.DY+t.DX+t.NCC) && !math.IsInf(t.DY+t.DX+t.NCC, 0)
}

func (m *mist) nominal(dir Direction) Translation {
	if dir == Left {
		return Translation{DX: float64(m.w) * (1 - m.p.Overlap)}
	}
	return Translation{DY: float64(m.h) * (1 - m.p.Overlap)}
}

func (m *mist) filter() {
	n := len(m.pairs)
	// 1. adaptive threshold over the measured NCCs (−1 means no candidate)
	var nccs []float64
	for _, t := range m.first {
		if finite(t) && t.NCC > -1 {
			nccs = append(nccs, t.NCC)
		}
	}
	m.thr = m.p.NCCThreshold
	if len(nccs) > 0 {
		lo, hi, sum := nccs[0], nccs[0], 0.0
		for _, v := range nccs {
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		if m.thr > hi {
			m.thr = max(lo, 0.5*sum/float64(len(nccs)))
		}
	}
	// 2. Valid1: range along the stitching axis and NCC
	valid := make([]bool, n)
	for i, pr := range m.pairs {
		t := m.first[i]
		size := float64(m.w)
		if pr.Dir == Top {
			size = float64(m.h)
		}
		lo := size * (1 - m.p.Overlap - m.p.POU/100)
		hi := size * (1 - m.p.Overlap + m.p.POU/100)
		a, _ := components(t, pr.Dir)
		valid[i] = finite(t) && a >= lo && a <= hi && t.NCC > m.thr
	}
	// 3. Valid2: IQR fences per direction and component
	for _, dir := range []Direction{Left, Top} {
		var ys, xs []float64
		for i, pr := range m.pairs {
			if pr.Dir == dir && valid[i] {
				ys, xs = append(ys, m.first[i].DY), append(xs, m.first[i].DX)
			}
		}
		if len(ys) == 0 {
			continue
		}
		fy0, fy1 := fences(ys)
		fx0, fx1 := fences(xs)
		for i, pr := range m.pairs {
			if pr.Dir == dir && valid[i] {
				t := m.first[i]
				valid[i] = t.DY >= fy0 && t.DY <= fy1 && t.DX >= fx0 && t.DX <= fx1
			}
		}
	}
	// 4. repeatability
	r, any2 := m.repeatability(valid)
	if !any2 {
		r = math.Ceil(m.p.POU / 100 * float64(max(m.h, m.w)))
	}
	m.r = max(1, int(r))
	// 5. Valid3: within r of the Valid2 median of the pair's column/row
	med2 := m.medians(valid)
	m.valid3 = make([]bool, n)
	for i, pr := range m.pairs {
		if !valid[i] {
			continue
		}
		md := med2[[2]int{int(pr.Dir), m.group(i)}]
		t := m.first[i]
		m.valid3[i] = math.Abs(t.DY-md[0]) <= float64(m.r) && math.Abs(t.DX-md[1]) <= float64(m.r) && t.NCC > m.thr
	}
	m.trusted = m.valid3
	m.setModel()
}

// trust is step 6 of Align: the texture and loop checks, then the stage
// model and the refinement radius from the trusted translations.
func (m *mist) trust(ctx context.Context) error {
	n := len(m.pairs)
	m.texture = make([]float64, n)
	err := par.ForEach(ctx, n, runtime.GOMAXPROCS(0), func(i int) error {
		if f := m.first[i]; finite(f) && f.NCC > m.thr {
			m.texture[i] = m.scorers[i].texture(int(math.Round(f.DY)), int(math.Round(f.DX)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("align: texture check: %w", err)
	}
	m.consistent = m.loops()
	m.trusted = make([]bool, n)
	for i := range m.trusted {
		m.trusted[i] = m.consistent[i] || m.valid3[i] && m.texture[i] > TextureMin
	}
	m.setModel()
	rt, _ := m.repeatability(m.trusted)
	m.radius = 2 * max(m.r, int(rt))
	return nil
}

// setModel computes the medians of the trusted translations per group and
// per direction (the stage model).
func (m *mist) setModel() {
	m.groupMed = m.medians(m.trusted)
	m.dirMed = [2]*[2]float64{}
	for _, dir := range []Direction{Left, Top} {
		var ys, xs []float64
		for i, pr := range m.pairs {
			if pr.Dir == dir && m.trusted[i] {
				ys, xs = append(ys, m.first[i].DY), append(xs, m.first[i].DX)
			}
		}
		if len(ys) > 0 {
			m.dirMed[dir] = &[2]float64{median(ys), median(xs)}
		}
	}
}

// repeatability returns MIST's r (step 4 of Align) over the selected
// first-pass translations, and whether any was selected.
func (m *mist) repeatability(sel []bool) (float64, bool) {
	r, found := 0.0, false
	for _, dir := range []Direction{Left, Top} {
		var prim []float64
		other := map[int][]float64{}
		for i, pr := range m.pairs {
			if pr.Dir == dir && sel[i] {
				a, b := components(m.first[i], dir)
				prim = append(prim, a)
				other[m.group(i)] = append(other[m.group(i)], b)
			}
		}
		if len(prim) == 0 {
			continue
		}
		found = true
		r = max(r, math.Ceil(spread(prim)/2))
		for _, v := range other {
			r = max(r, math.Ceil(spread(v)/2))
		}
	}
	return r, found
}

// loops returns which pairs close a 2x2 loop of the grid (step 6 of
// Align): all four first-pass NCCs above the threshold and both components
// of the closure within LoopTol.
func (m *mist) loops() []bool {
	out := make([]bool, len(m.pairs))
	// pair index by (A, direction)
	from := make(map[[2]int]int, len(m.pairs))
	for i, pr := range m.pairs {
		from[[2]int{pr.A, int(pr.Dir)}] = i
	}
	get := func(a int, d Direction) (int, bool) {
		i, ok := from[[2]int{a, int(d)}]
		return i, ok
	}
	ok := func(i int) bool { return finite(m.first[i]) && m.first[i].NCC > m.thr && m.texture[i] > TextureMin }
	for a := range m.grid {
		l0, ok1 := get(a, Left) // (r, c) -> (r, c+1)
		t0, ok2 := get(a, Top)  // (r, c) -> (r+1, c)
		if !ok1 || !ok2 {
			continue
		}
		t1, ok3 := get(m.pairs[l0].B, Top)  // (r, c+1) -> (r+1, c+1)
		l1, ok4 := get(m.pairs[t0].B, Left) // (r+1, c) -> (r+1, c+1)
		if !ok3 || !ok4 || m.pairs[t1].B != m.pairs[l1].B {
			continue
		}
		if !ok(l0) || !ok(t0) || !ok(t1) || !ok(l1) {
			continue
		}
		f := m.first
		cy := f[l0].DY + f[t1].DY - f[t0].DY - f[l1].DY
		cx := f[l0].DX + f[t1].DX - f[t0].DX - f[l1].DX
		if math.Abs(cy) <= LoopTol && math.Abs(cx) <= LoopTol {
			out[l0], out[t0], out[t1], out[l1] = true, true, true, true
		}
	}
	return out
}

// medians returns the (DY, DX) medians of the selected first-pass
// translations per (direction, group).
func (m *mist) medians(sel []bool) map[[2]int][2]float64 {
	ys := map[[2]int][]float64{}
	xs := map[[2]int][]float64{}
	for i, pr := range m.pairs {
		if sel[i] {
			k := [2]int{int(pr.Dir), m.group(i)}
			ys[k] = append(ys[k], m.first[i].DY)
			xs[k] = append(xs[k], m.first[i].DX)
		}
	}
	out := make(map[[2]int][2]float64, len(ys))
	for k := range ys {
		out[k] = [2]float64{median(ys[k]), median(xs[k])}
	}
	return out
}

// estimate is the stage-model translation of pair i: the trusted median of
// its group, else of its direction, else the nominal translation.
func (m *mist) estimate(i int) Translation {
	pr := m.pairs[i]
	if md, ok := m.groupMed[[2]int{int(pr.Dir), m.group(i)}]; ok {
		return Translation{DY: md[0], DX: md[1], NCC: -1}
	}
	if md := m.dirMed[pr.Dir]; md != nil {
		return Translation{DY: md[0], DX: md[1], NCC: -1}
	}
	t := m.nominal(pr.Dir)
	t.NCC = -1
	return t
}

// model returns the per-direction stage-model translations (Left, Top).
func (m *mist) model() [2]Translation {
	var out [2]Translation
	for _, dir := range []Direction{Left, Top} {
		if md := m.dirMed[dir]; md != nil {
			out[dir] = Translation{DY: md[0], DX: md[1]}
		} else {
			out[dir] = m.nominal(dir)
		}
	}
	return out
}

// replace builds the final translations: valid ones as measured, the others
// replaced by the model and refined (step 7 of Align), in parallel.
func (m *mist) replace(ctx context.Context) ([]Translation, []bool, error) {
	final := make([]Translation, len(m.pairs))
	refined := make([]bool, len(m.pairs))
	var todo []int
	for i := range m.pairs {
		if m.trusted[i] {
			final[i] = m.first[i]
		} else {
			final[i] = m.estimate(i)
			todo = append(todo, i)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(todo)) {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= len(todo) || ctx.Err() != nil {
					return
				}
				i := todo[k]
				if t, ok := m.refine(i, final[i]); ok {
					final[i], refined[i] = t, true
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("align: refine translations: %w", err)
	}
	return final, refined, nil
}

// refine hill-climbs pair i's NCC within ±radius of the model estimate
// est, from est and from the first-pass translation when it lies in the
// box, and reports the best local maximum inside the box (not on its edge)
// when its NCC exceeds the threshold and it is textured (step 8 of Align).
func (m *mist) refine(i int, est Translation) (Translation, bool) {
	s := m.scorers[i]
	y0, x0 := int(math.Round(est.DY)), int(math.Round(est.DX))
	bx := &box{y0 - m.radius, y0 + m.radius, x0 - m.radius, x0 + m.radius}
	starts := [][2]int{{y0, x0}}
	if f := m.first[i]; finite(f) {
		fy, fx := int(math.Round(f.DY)), int(math.Round(f.DX))
		if bx.contains(fy, fx) && (fy != y0 || fx != x0) {
			starts = append(starts, [2]int{fy, fx})
		}
	}
	found := false
	var y, x int
	var v float64
	for _, st := range starts {
		sv, ok := s.score(st[0], st[1])
		if !ok {
			continue
		}
		cy, cx, cv := s.climb(st[0], st[1], sv, bx)
		if cy == bx.y0 || cy == bx.y1 || cx == bx.x0 || cx == bx.x1 {
			// stopped at the edge of the search box: not a local maximum
			continue
		}
		if !found || cv > v {
			y, x, v, found = cy, cx, cv, true
		}
	}
	if !found {
		return Translation{}, false
	}
	return m.measurement(s, y, x, v)
}

// measurement turns the NCC local maximum (y, x) of a pair, NCC v, scored
// by s, into a translation (sub-pixel with Params.Subpixel) when v exceeds
// the threshold and the overlap is textured there; otherwise there is no
// measurement.
func (m *mist) measurement(s *scorer, y, x int, v float64) (Translation, bool) {
	if !(v > m.thr) {
		// no local maximum above the threshold: no measurement, keep the model
		return Translation{}, false
	}
	if !(s.texture(y, x) > TextureMin) {
		// the NCC follows a smooth gradient, not shared texture
		return Translation{}, false
	}
	t := Translation{DY: float64(y), DX: float64(x), NCC: v}
	if m.p.Subpixel {
		t.DY, t.DX = s.subpixel(y, x)
	}
	return t, true
}

// spanningTree returns the pair indices of a maximum spanning forest with
// weights NCC (+10 when valid, that is trusted), by Kruskal; equal weights
// keep pair order.
func spanningTree(n int, pairs []Pair, t []Translation, valid []bool) []int {
	wt := func(i int) float64 {
		v := t[i].NCC
		if math.IsNaN(v) {
			v = -1
		}
		if valid[i] {
			v += 10
		}
		return v
	}
	order := make([]int, len(pairs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(wt(b), wt(a)) })
	f := newForest(n)
	var tree []int
	for _, i := range order {
		if f.union(pairs[i].A, pairs[i].B) {
			tree = append(tree, i)
		}
	}
	slices.Sort(tree)
	return tree
}

// forest is a union-find over tiles: each tile's parent, a root its own.
type forest []int

func newForest(n int) forest {
	f := make(forest, n)
	for i := range f {
		f[i] = i
	}
	return f
}

// find returns the root of i's component: its lowest tile.
func (f forest) find(i int) int {
	for f[i] != i {
		f[i] = f[f[i]]
		i = f[i]
	}
	return i
}

// union joins the components of a and b and reports whether they were
// apart.
func (f forest) union(a, b int) bool {
	ra, rb := f.find(a), f.find(b)
	if ra == rb {
		return false
	}
	f[max(ra, rb)] = min(ra, rb)
	return true
}

// place computes tile positions by traversing the tree from tile 0 (and,
// for components not connected to it, from their lowest tile placed by the
// stage model); tile 0 is at (0, 0).
func place(n int, grid []GridPos, pairs []Pair, t []Translation, tree []int, model [2]Translation) []raster.Point {
	adj := make([][]int, n)
	for _, i := range tree {
		adj[pairs[i].A] = append(adj[pairs[i].A], i)
		adj[pairs[i].B] = append(adj[pairs[i].B], i)
	}
	pos := make([]raster.Point, n)
	done := make([]bool, n)
	modelAt := func(i int) raster.Point {
		g := grid[i]
		return raster.Point{
			Y: float64(g.Row)*model[Top].DY + float64(g.Col)*model[Left].DY,
			X: float64(g.Row)*model[Top].DX + float64(g.Col)*model[Left].DX,
		}
	}
	for root := range n {
		if done[root] {
			continue
		}
		if root != 0 {
			m0, mr := modelAt(0), modelAt(root)
			pos[root] = raster.Point{Y: pos[0].Y + mr.Y - m0.Y, X: pos[0].X + mr.X - m0.X}
		}
		done[root] = true
		queue := []int{root}
		for len(queue) > 0 {
			a := queue[0]
			queue = queue[1:]
			for _, e := range adj[a] {
				pr := pairs[e]
				var b int
				var sgn float64
				if pr.A == a {
					b, sgn = pr.B, 1
				} else {
					b, sgn = pr.A, -1
				}
				if done[b] {
					continue
				}
				pos[b] = raster.Point{Y: pos[a].Y + sgn*t[e].DY, X: pos[a].X + sgn*t[e].DX}
				done[b] = true
				queue = append(queue, b)
			}
		}
	}
	return pos
}

// shiftToZero shifts pos in place so that the minimum Y and the minimum X
// are 0, and returns it.
func shiftToZero(pos []raster.Point) []raster.Point {
	minY, minX := math.Inf(1), math.Inf(1)
	for _, q := range pos {
		minY, minX = min(minY, q.Y), min(minX, q.X)
	}
	for i := range pos {
		pos[i].Y -= minY
		pos[i].X -= minX
	}
	return pos
}

// fences returns Tukey's outlier fences of v: q1 − 1.5·iqd and q3 + 1.5·iqd
// with iqd = max(1, q3 − q1) (quartiles by linear interpolation, as numpy).
func fences(v []float64) (float64, float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	q1, q3 := quantileSorted(s, 0.25), quantileSorted(s, 0.75)
	iqd := max(1, q3-q1)
	return q1 - 1.5*iqd, q3 + 1.5*iqd
}

func quantileSorted(s []float64, q float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	pos := q * float64(len(s)-1)
	i := int(math.Floor(pos))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	f := pos - float64(i)
	return s[i] + f*(s[i+1]-s[i])
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return quantileSorted(s, 0.5)
}

func spread(v []float64) float64 {
	return slices.Max(v) - slices.Min(v)
}
