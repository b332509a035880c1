package align

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Constants of the global refinement (step 10 of Align).
const (
	// GlobalTol is the largest residual, px (Euclidean), that an accepted
	// pair keeps after the global solve: |p_B − p_A − t| <= GlobalTol,
	// with t the pair's translation, an NCC local maximum (with its
	// sub-pixel peak). A pair whose residual is larger is dropped and the
	// solve repeated, so every accepted pair ends within GlobalTol of its
	// own local optimum. Correct sub-pixel translations err by at most
	// 0.2 px each (aligntest.SubpixelMaxErr), so a correct pair's residual
	// stays well below 0.5 px; a wrong peak (an edge, noise, a period of a
	// repetitive texture) is px away.
	GlobalTol = 0.5
	// HuberDelta is the residual, px, above which a pair's weight falls as
	// HuberDelta/residual (iteratively reweighted least squares with the
	// Huber loss): a wrong translation then pulls its tiles with a bounded
	// force, and its residual shows its whole error, so the drop step finds
	// it rather than spreading its error over the correct pairs of its
	// loops.
	HuberDelta = 0.25
	// MinGlobalWeight floors the NCC weight of an accepted pair.
	MinGlobalWeight = 0.05
	// globalIters bounds the IRLS iterations of one solve; globalStep is
	// the largest position change, px, at which IRLS has converged.
	globalIters = 50
	globalStep  = 1e-6
	// dropCandidates bounds the pairs tried by leaving them out in one
	// step of solveDropping.
	dropCandidates = 8
	// verifyRadius is the half-width, px, of the climb box of verify.
	verifyRadius = 3
	// remeasureRounds bounds the rounds of re-measurement (a pair that is
	// re-measured and then dropped again is not re-measured again).
	remeasureRounds = 3
)

// globalSolve is the state of one global refinement (step 10 of Align).
type globalSolve struct {
	n          int
	pairs      []Pair
	t          []Translation // translations, updated for re-measured pairs
	accepted   []bool        // measurements constraining the positions
	connector  []bool        // spanning-tree edges that are not accepted (bridges)
	outlier    []bool        // accepted once, dropped for its residual
	remeasured []bool        // re-measured at the solved positions and accepted
	roots      []int         // per tile, the root of its component in the tree
	pos        []raster.Point
}

// refineGlobal is step 10 of Align: weighted robust least squares over the
// accepted pairs, starting from the tree placement pos0 (before its shift
// to 0), with outlier dropping and re-measurement. It returns the unshifted
// positions and fills the per-pair state.
func (m *mist) refineGlobal(ctx context.Context, n int, final []Translation, accepted []bool, tree []int, pos0 []raster.Point) (*globalSolve, error) {
	g := &globalSolve{
		n: n, pairs: m.pairs, t: slices.Clone(final), accepted: slices.Clone(accepted),
		connector: make([]bool, len(m.pairs)), outlier: make([]bool, len(m.pairs)),
		remeasured: make([]bool, len(m.pairs)), pos: slices.Clone(pos0),
	}
	for _, i := range tree {
		if !g.accepted[i] {
			g.connector[i] = true
		}
	}
	// component roots in the tree: the lowest tile index, as place uses
	f := newForest(n)
	for _, i := range tree {
		f.union(m.pairs[i].A, m.pairs[i].B)
	}
	g.roots = make([]int, n)
	for i := range g.roots {
		g.roots[i] = f.find(i)
	}
	tried := make([]bool, len(m.pairs))    // re-measured once already (solveDropping)
	triedOff := make([]bool, len(m.pairs)) // not accepted and climbed once already (remeasure)
	for round := 0; ; round++ {
		m.solveDropping(g, tried)
		if round == remeasureRounds || ctx.Err() != nil {
			break
		}
		moved, err := m.verify(ctx, g, tried)
		if err != nil {
			return nil, err
		}
		got, err := m.remeasure(ctx, g, triedOff)
		if err != nil {
			return nil, err
		}
		if moved+got == 0 {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("align: global refinement: %w", err)
	}
	return g, nil
}

// solveDropping runs the robust solve and, while an accepted pair's
// residual exceeds GlobalTol, resolves the worst disagreement: of the (at
// most dropCandidates) accepted pairs above GlobalTol whose removal keeps
// the graph connected, each is left out in turn, the rest solved, and the
// pair climbed on NCC from its new relative offset (climbNear); a pair
// with a local maximum there, within 2·GlobalTol of that offset (the
// other pairs' errors still move it a little) and more than GlobalTol from
// its translation, was measured at a wrong peak, and the one with the
// highest NCC there gets that translation (Remeasured, once per pair; the
// next solve holds it to GlobalTol like any other). When no candidate has
// one, the candidate with the largest residual is dropped (Outlier). The
// re-measurement is what tells the wrong pair of a loop from the right
// ones when the residuals cannot: in a loop of four pairs, one of them
// wrong, any three agree, and the NCC the translator reported for a
// wrong peak may be as high as the true one's.
func (m *mist) solveDropping(g *globalSolve, tried []bool) {
	for range 2*len(g.pairs) + 1 {
		g.solve()
		var cands []int
		for i := range g.pairs {
			if g.accepted[i] && g.residual(i) > GlobalTol && !g.bridge(i) {
				cands = append(cands, i)
			}
		}
		if len(cands) == 0 {
			return
		}
		slices.SortStableFunc(cands, func(a, b int) int { return cmp.Compare(g.residual(b), g.residual(a)) })
		cands = cands[:min(len(cands), dropCandidates)]
		best, bestT := -1, Translation{}
		saved := slices.Clone(g.pos)
		for _, c := range cands {
			if tried[c] {
				continue
			}
			g.accepted[c] = false
			g.solve()
			pr := g.pairs[c]
			oy, ox := g.pos[pr.B].Y-g.pos[pr.A].Y, g.pos[pr.B].X-g.pos[pr.A].X
			t, ok := m.climbNear(c, oy, ox, int(math.Ceil(GlobalTol))+1)
			if ok && math.Hypot(t.DY-oy, t.DX-ox) <= 2*GlobalTol && math.Hypot(t.DY-g.t[c].DY, t.DX-g.t[c].DX) > GlobalTol &&
				(best < 0 || t.NCC > bestT.NCC) {
				best, bestT = c, t
			}
			g.accepted[c] = true
			copy(g.pos, saved)
		}
		if best >= 0 {
			g.t[best], g.remeasured[best], tried[best] = bestT, true, true
			continue
		}
		g.accepted[cands[0]], g.outlier[cands[0]] = false, true
	}
}

// residual is pair i's |p_B − p_A − t|, px.
func (g *globalSolve) residual(i int) float64 {
	pr := g.pairs[i]
	return math.Hypot(g.pos[pr.B].Y-g.pos[pr.A].Y-g.t[i].DY, g.pos[pr.B].X-g.pos[pr.A].X-g.t[i].DX)
}

// bridge reports whether removing accepted pair i disconnects its tiles in
// the graph of accepted pairs and connectors.
func (g *globalSolve) bridge(i int) bool {
	adj := g.adjacency(i)
	a, b := g.pairs[i].A, g.pairs[i].B
	seen := make([]bool, g.n)
	seen[a] = true
	stack := []int{a}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range adj[u] {
			if v == b {
				return false
			}
			if !seen[v] {
				seen[v] = true
				stack = append(stack, v)
			}
		}
	}
	return true
}

// adjacency lists the neighbours of each tile over the accepted pairs and
// connectors, without pair skip (-1: none).
func (g *globalSolve) adjacency(skip int) [][]int {
	adj := make([][]int, g.n)
	for i, pr := range g.pairs {
		if i != skip && (g.accepted[i] || g.connector[i]) {
			adj[pr.A] = append(adj[pr.A], pr.B)
			adj[pr.B] = append(adj[pr.B], pr.A)
		}
	}
	return adj
}

// solve minimises sum_i w_i·h_i·|p_B − p_A − t_i|² over the accepted pairs
// and connectors, each tree component's root held at its current position,
// with w_i the NCC (floored at MinGlobalWeight; 1 for connectors, which are
// bridges and so met exactly) and h_i the Huber weight of the previous
// iterate's residual, until the positions move by less than globalStep.
func (g *globalSolve) solve() {
	w := make([]float64, len(g.pairs))
	for it := 0; it < globalIters; it++ {
		for i := range g.pairs {
			switch {
			case g.connector[i]:
				w[i] = 1
			case g.accepted[i]:
				w[i] = max(MinGlobalWeight, g.t[i].NCC)
				if r := g.residual(i); it > 0 && r > HuberDelta {
					w[i] *= HuberDelta / r
				}
			default:
				w[i] = 0
			}
		}
		prev := slices.Clone(g.pos)
		g.weightedSolve(w)
		step := 0.0
		for k := range g.pos {
			step = max(step, math.Abs(g.pos[k].Y-prev[k].Y), math.Abs(g.pos[k].X-prev[k].X))
		}
		if step < globalStep {
			return
		}
	}
}

// weightedSolve solves the weighted graph Laplacian system L p = b for both
// axes by conjugate gradients with a Jacobi preconditioner, from the
// current positions, with each component root fixed.
func (g *globalSolve) weightedSolve(w []float64) {
	fixed := make([]bool, g.n)
	for i, r := range g.roots {
		fixed[i] = r == i
	}
	diag := make([]float64, g.n)
	for i, pr := range g.pairs {
		diag[pr.A] += w[i]
		diag[pr.B] += w[i]
	}
	apply := func(dst, x []float64) {
		clear(dst)
		for i, pr := range g.pairs {
			if w[i] == 0 {
				continue
			}
			d := w[i] * (x[pr.B] - x[pr.A])
			dst[pr.B] += d
			dst[pr.A] -= d
		}
		for k := range dst {
			if fixed[k] {
				dst[k] = 0
			}
		}
	}
	for axis := range 2 {
		x := make([]float64, g.n)
		rhs := make([]float64, g.n)
		for k, q := range g.pos {
			x[k] = q.Y
			if axis == 1 {
				x[k] = q.X
			}
		}
		for i, pr := range g.pairs {
			v := g.t[i].DY
			if axis == 1 {
				v = g.t[i].DX
			}
			rhs[pr.B] += w[i] * v
			rhs[pr.A] -= w[i] * v
		}
		for k := range rhs {
			if fixed[k] {
				rhs[k] = 0
			}
		}
		conjugateGradient(apply, diag, fixed, rhs, x)
		for k := range g.pos {
			if axis == 0 {
				g.pos[k].Y = x[k]
			} else {
				g.pos[k].X = x[k]
			}
		}
	}
}

// conjugateGradient solves A x = b on the free entries (A symmetric
// positive semi-definite, apply(dst, x) = A x with fixed entries of dst
// zeroed) from x, with the Jacobi preconditioner diag; fixed entries of x
// keep their values. It stops at a residual norm below 1e-12 of the
// right-hand side's (absolute 1e-12 px when that is 0) or after
// 4·len(x)+20 iterations.
func conjugateGradient(apply func(dst, x []float64), diag []float64, fixed []bool, b, x []float64) {
	n := len(x)
	r := make([]float64, n)
	z := make([]float64, n)
	p := make([]float64, n)
	q := make([]float64, n)
	apply(q, x)
	var bn float64
	for k := range r {
		if !fixed[k] {
			r[k] = b[k] - q[k]
			bn += b[k] * b[k]
		}
	}
	tol := 1e-12 * max(math.Sqrt(bn), 1)
	prec := func() float64 {
		var rz float64
		for k := range z {
			z[k] = 0
			if !fixed[k] && diag[k] > 0 {
				z[k] = r[k] / diag[k]
			}
			rz += r[k] * z[k]
		}
		return rz
	}
	rz := prec()
	copy(p, z)
	for range 4*n + 20 {
		var rn float64
		for _, v := range r {
			rn += v * v
		}
		if math.Sqrt(rn) < tol {
			return
		}
		apply(q, p)
		var pq float64
		for k := range p {
			pq += p[k] * q[k]
		}
		if !(pq > 0) {
			return
		}
		a := rz / pq
		for k := range x {
			x[k] += a * p[k]
			r[k] -= a * q[k]
		}
		rz1 := prec()
		beta := rz1 / rz
		rz = rz1
		for k := range p {
			p[k] = z[k] + beta*p[k]
		}
	}
}

// verify climbs the NCC of every accepted pair (not re-measured before)
// from its relative offset at the solved positions, within ±verifyRadius
// px; when that local maximum lies more than GlobalTol from the pair's
// translation and its NCC is higher than the NCC of the overlap at the
// translation (scored again on the tiles, not taken from the
// translator), the translation was not the optimum of its overlap (a
// wrong peak whose error the solve spread over a long loop, each pair's
// share below GlobalTol) and the local maximum replaces it (Remeasured).
// A correct pair climbs back to its own translation, or, from an offset
// moved by another pair's error, to a lower maximum, and keeps it. It
// returns how many were replaced.
func (m *mist) verify(ctx context.Context, g *globalSolve, tried []bool) (int, error) {
	var todo []int
	for i := range m.pairs {
		if g.accepted[i] && !tried[i] {
			todo = append(todo, i)
		}
	}
	found, err := m.climbAll(ctx, g, todo, verifyRadius, func(i int, t Translation, _, _ float64) bool {
		return math.Hypot(t.DY-g.t[i].DY, t.DX-g.t[i].DX) > GlobalTol &&
			t.NCC > m.scorers[i].ncc(int(math.Round(g.t[i].DY)), int(math.Round(g.t[i].DX)))
	})
	if err != nil {
		return 0, fmt.Errorf("align: global refinement: verify: %w", err)
	}
	got := 0
	for k, t := range found {
		if t != nil {
			i := todo[k]
			g.t[i], g.remeasured[i], tried[i] = *t, true, true
			got++
		}
	}
	return got, nil
}

// remeasure climbs the NCC of every pair that is not accepted (and not
// re-measured before) from the relative offset of the solved positions,
// within ±(ceil(GlobalTol)+1) px; a local maximum inside that box whose
// NCC exceeds the threshold, that is textured and whose translation
// (sub-pixel with Params.Subpixel) lies within GlobalTol of the offset is
// accepted as the pair's translation. It returns how many were accepted.
func (m *mist) remeasure(ctx context.Context, g *globalSolve, tried []bool) (int, error) {
	var todo []int
	for i := range m.pairs {
		if !g.accepted[i] && !tried[i] {
			todo = append(todo, i)
			tried[i] = true
		}
	}
	found, err := m.climbAll(ctx, g, todo, int(math.Ceil(GlobalTol))+1, func(_ int, t Translation, oy, ox float64) bool {
		return math.Hypot(t.DY-oy, t.DX-ox) <= GlobalTol
	})
	if err != nil {
		return 0, fmt.Errorf("align: global refinement: re-measure: %w", err)
	}
	got := 0
	for k, t := range found {
		if t != nil {
			i := todo[k]
			g.t[i], g.accepted[i], g.remeasured[i], g.outlier[i], g.connector[i] = *t, true, true, false, false
			got++
		}
	}
	return got, nil
}

// climbAll runs climbNear for the pairs todo, in parallel, from their
// relative offsets at the solved positions, and returns per entry of todo
// the local maximum found when keep(pair, it, offset y, offset x) holds,
// else nil.
func (m *mist) climbAll(ctx context.Context, g *globalSolve, todo []int, radius int,
	keep func(i int, t Translation, oy, ox float64) bool) ([]*Translation, error) {
	found := make([]*Translation, len(todo))
	err := par.ForEach(ctx, len(todo), runtime.GOMAXPROCS(0), func(k int) error {
		i := todo[k]
		pr := m.pairs[i]
		oy := g.pos[pr.B].Y - g.pos[pr.A].Y
		ox := g.pos[pr.B].X - g.pos[pr.A].X
		if t, ok := m.climbNear(i, oy, ox, radius); ok && keep(i, t, oy, ox) {
			found[k] = &t
		}
		return nil
	})
	return found, err
}

// climbNear hill-climbs pair i's NCC from the integer translation nearest
// (oy, ox) within ±radius of it and returns the local maximum when it lies
// inside the box (not on its edge), its NCC exceeds the threshold and the
// overlap is textured there; sub-pixel with Params.Subpixel.
func (m *mist) climbNear(i int, oy, ox float64, radius int) (Translation, bool) {
	s := m.scorers[i]
	y0, x0 := int(math.Round(oy)), int(math.Round(ox))
	bx := &box{y0 - radius, y0 + radius, x0 - radius, x0 + radius}
	v, ok := s.score(y0, x0)
	if !ok {
		return Translation{}, false
	}
	y, x, v := s.climb(y0, x0, v, bx)
	if y == bx.y0 || y == bx.y1 || x == bx.x0 || x == bx.x1 {
		return Translation{}, false
	}
	return m.measurement(s, y, x, v)
}
