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

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

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
	// Translations are the final ones: the measured translation for valid
	// pairs; for the others the stage model (row/column median of valid
	// ones) with NCC -1, or, when a hill-climb near the stage model found an
	// NCC above Threshold, that translation and NCC (Refined).
	Translations []Translation
	Valid        []bool // passed every MIST filter
	Refined      []bool // invalid, replaced, then re-measured near the model
	// Threshold is the NCC threshold actually used (adaptive).
	Threshold float64
	// Repeatability is MIST's r, px: the search radius around the stage
	// model and the tolerance of the per-row/column median check.
	Repeatability int
	// Tree lists the indices of the pairs in the maximum spanning tree.
	Tree []int
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
//  6. Invalid pairs get the median of the Valid3 translations of their
//     column/row, else of their direction, else the nominal translation from
//     Params.Overlap (the original's last resort, the median of all raw
//     measurements, is by then known to be untrusted), with NCC −1.
//  7. Refinement: each replaced translation is hill-climbed on NCC within
//     ±r of the model. The result is kept (Refined) only if its NCC exceeds
//     the threshold and it is a local maximum inside the search box, not on
//     its edge; otherwise the model stays. (The original kept whatever the
//     climb found: on a textureless overlap a random walk, and when the true
//     translation lies beyond r a point on the box edge that is not a
//     measurement.)
//     Valid translations are not climbed again: the translator already
//     returns an NCC local maximum (and its sub-pixel peak).
//  8. Maximum spanning tree (Kruskal, ties by pair order) with weight
//     NCC + 10 for valid pairs; positions by traversal from tile 0;
//     shifted so the minimum is 0. Positions stay real-valued (the original
//     truncated to int32); grid components not connected to tile 0 are
//     placed by the stage model.
func Align(ctx context.Context, tr PairTranslator, tiles []*raster.Float32, rows, cols int, grid []GridPos, p Params) (Result, error) {
	if rows <= 0 || cols <= 0 {
		return Result{}, fmt.Errorf("align: invalid grid %dx%d", rows, cols)
	}
	if len(grid) != len(tiles) {
		return Result{}, fmt.Errorf("align: %d grid cells for %d tiles", len(grid), len(tiles))
	}
	if err := checkInputs(tiles, nil, p); err != nil {
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
	h, w := tiles[0].H, tiles[0].W
	m := &mist{pairs: pairs, grid: grid, first: first, h: h, w: w, p: p}
	m.filter()
	final, refined, err := m.replace(ctx, tiles)
	if err != nil {
		return Result{}, err
	}
	tree := spanningTree(len(tiles), pairs, final, m.valid3)
	pos := place(len(tiles), grid, pairs, final, tree, m.model())
	return Result{
		Positions: pos, Pairs: pairs, First: first, Translations: final,
		Valid: m.valid3, Refined: refined, Threshold: m.thr, Repeatability: m.r, Tree: tree,
	}, nil
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
	valid3 []bool
	// medians of valid3 translations per (direction, group) and direction
	groupMed map[[2]int][2]float64
	dirMed   [2]*[2]float64
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
	r, any2 := 0.0, false
	for _, dir := range []Direction{Left, Top} {
		var prim []float64
		other := map[int][]float64{}
		for i, pr := range m.pairs {
			if pr.Dir == dir && valid[i] {
				a, b := components(m.first[i], dir)
				prim = append(prim, a)
				other[m.group(i)] = append(other[m.group(i)], b)
			}
		}
		if len(prim) == 0 {
			continue
		}
		any2 = true
		r = max(r, math.Ceil(spread(prim)/2))
		for _, v := range other {
			r = max(r, math.Ceil(spread(v)/2))
		}
	}
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
	// medians of Valid3, used for replacement and the stage model
	m.groupMed = m.medians(m.valid3)
	for _, dir := range []Direction{Left, Top} {
		var ys, xs []float64
		for i, pr := range m.pairs {
			if pr.Dir == dir && m.valid3[i] {
				ys, xs = append(ys, m.first[i].DY), append(xs, m.first[i].DX)
			}
		}
		if len(ys) > 0 {
			m.dirMed[dir] = &[2]float64{median(ys), median(xs)}
		}
	}
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

// estimate is the stage-model translation of pair i: the Valid3 median of
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
func (m *mist) replace(ctx context.Context, tiles []*raster.Float32) ([]Translation, []bool, error) {
	final := make([]Translation, len(m.pairs))
	refined := make([]bool, len(m.pairs))
	var todo []int
	for i := range m.pairs {
		if m.valid3[i] {
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
				if t, ok := m.refine(tiles, i, final[i]); ok {
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

// refine hill-climbs pair i's NCC from the model estimate est within ±r and
// reports the result when its NCC exceeds the threshold.
func (m *mist) refine(tiles []*raster.Float32, i int, est Translation) (Translation, bool) {
	pr := m.pairs[i]
	g := newGeometry(m.h, m.w, pr.Dir, m.p.Overlap)
	s := newScorer(tiles[pr.A], tiles[pr.B], g)
	y, x := int(math.Round(est.DY)), int(math.Round(est.DX))
	v, ok := s.score(y, x)
	if !ok {
		return Translation{}, false
	}
	bx := &box{y - m.r, y + m.r, x - m.r, x + m.r}
	y, x, v = s.climb(y, x, v, bx)
	if !(v > m.thr) || y == bx.y0 || y == bx.y1 || x == bx.x0 || x == bx.x1 {
		// below threshold, or stopped at the edge of the search box, so
		// not a local maximum: no measurement, keep the model
		return Translation{}, false
	}
	t := Translation{DY: float64(y), DX: float64(x), NCC: v}
	if m.p.Subpixel {
		t.DY, t.DX = s.subpixel(y, x)
	}
	return t, true
}

// spanningTree returns the pair indices of a maximum spanning forest with
// weights NCC (+10 when valid), by Kruskal; equal weights keep pair order.
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
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	var tree []int
	for _, i := range order {
		a, b := find(pairs[i].A), find(pairs[i].B)
		if a != b {
			parent[a] = b
			tree = append(tree, i)
		}
	}
	slices.Sort(tree)
	return tree
}

// place computes tile positions by traversing the tree from tile 0 (and,
// for components not connected to it, from their lowest tile placed by the
// stage model), then shifts them so the minimum is 0.
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
