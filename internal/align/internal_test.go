package align

import (
	"context"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// naiveDFT2 is the textbook O(n^2) 2-D DFT.
func naiveDFT2(x []complex128, h, w int, inverse bool) []complex128 {
	sgn := -1.0
	if inverse {
		sgn = 1
	}
	out := make([]complex128, h*w)
	for u := range h {
		for v := range w {
			var s complex128
			for y := range h {
				for xx := range w {
					ph := sgn * 2 * math.Pi * (float64(u*y)/float64(h) + float64(v*xx)/float64(w))
					s += x[y*w+xx] * cmplx.Rect(1, ph)
				}
			}
			out[u*w+v] = s
		}
	}
	return out
}

func TestFFT2MatchesNaiveDFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	// 1e-9 relative: float64 FFT round-off on sums of ~100 terms of O(1)
	const tol = 1e-9
	for _, sz := range [][2]int{{1, 1}, {3, 5}, {8, 6}, {7, 11}, {12, 10}, {13, 9}} {
		h, w := sz[0], sz[1]
		x := make([]complex128, h*w)
		for i := range x {
			x[i] = complex(rng.NormFloat64(), rng.NormFloat64())
		}
		for _, inv := range []bool{false, true} {
			want := naiveDFT2(x, h, w, inv)
			got := append([]complex128(nil), x...)
			newFFT2(h, w).transform(got, inv)
			for i := range got {
				if e := cmplx.Abs(got[i] - want[i]); e > tol*float64(h*w) {
					t.Fatalf("%dx%d inverse=%v: element %d = %v, want %v", h, w, inv, i, got[i], want[i])
				}
			}
		}
	}
}

// TestCrossPowerPacking checks the two-real-images-in-one-FFT unpacking
// against separately computed spectra, and the PCM sign convention.
func TestCrossPowerPacking(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	h, w := 9, 10
	a := make([]float64, h*w)
	for i := range a {
		a[i] = rng.Float64()
	}
	// b(y, x) = a(y+sy, x+sx), circularly
	sy, sx := 3, 7
	b := make([]float64, h*w)
	for y := range h {
		for x := range w {
			b[y*w+x] = a[((y+sy)%h)*w+(x+sx)%w]
		}
	}
	z := make([]complex128, h*w)
	za := make([]complex128, h*w)
	zb := make([]complex128, h*w)
	for i := range z {
		z[i] = complex(a[i], b[i])
		za[i] = complex(a[i], 0)
		zb[i] = complex(b[i], 0)
	}
	f := newFFT2(h, w)
	f.transform(z, false)
	f.transform(za, false)
	f.transform(zb, false)
	crossPower(z, h, w, nil, nil)
	for i := range z {
		c := za[i] * cmplx.Conj(zb[i])
		want := c / complex(cmplx.Abs(c), 0)
		if cmplx.Abs(z[i]-want) > 1e-9 {
			t.Fatalf("R[%d] = %v, want %v", i, z[i], want)
		}
	}
	f.transform(z, true)
	pk := topPeaks(nil, z, h, w, 2)
	if pk[0].y != sy || pk[0].x != sx {
		t.Errorf("PCM peak at (%d, %d), want the shift (%d, %d)", pk[0].y, pk[0].x, sy, sx)
	}
	if math.Abs(pk[0].v-float64(h*w)) > 1e-6 {
		t.Errorf("PCM peak %g, want h*w = %d for a pure circular shift", pk[0].v, h*w)
	}
}

func TestTopPeaks(t *testing.T) {
	h, w := 6, 7
	z := make([]complex128, h*w)
	set := func(y, x int, v float64) { z[y*w+x] = complex(v, 0) }
	set(1, 1, 5)
	set(1, 2, 4.9) // shoulder of (1,1): not a local maximum
	set(4, 6, 3)   // neighbours wrap to column 0
	set(4, 0, 2.5) // shoulder of (4,6) across the wrap
	set(0, 4, 4)
	got := topPeaks(nil, z, h, w, 3)
	want := []peak{{1, 1, 5}, {0, 4, 4}, {4, 6, 3}}
	if len(got) != 3 {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("peaks %v, want %v", got, want)
		}
	}
}

// naiveNCC is the two-pass Pearson correlation of the overlap.
func naiveNCC(a, b *raster.Float32, dy, dx int) float64 {
	var va, vb []float64
	for y := range a.H {
		for x := range a.W {
			yb, xb := y-dy, x-dx
			if yb >= 0 && yb < b.H && xb >= 0 && xb < b.W {
				va = append(va, float64(a.At(y, x)))
				vb = append(vb, float64(b.At(yb, xb)))
			}
		}
	}
	return refPearson(va, vb)
}

func TestNCC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	a := raster.NewFloat32(23, 17)
	b := raster.NewFloat32(23, 17)
	for i := range a.Pix {
		a.Pix[i] = float32(rng.Float64())
		b.Pix[i] = float32(rng.Float64())
	}
	// b(y, x) = a(y+2, x+5) where defined
	for y := range b.H {
		for x := range b.W {
			if y+2 < a.H && x+5 < a.W {
				b.Pix[y*b.W+x] = a.At(y+2, x+5)
			}
		}
	}
	// 1e-12: one-pass float64 sums of < 400 float32 values
	for _, d := range [][2]int{{2, 5}, {0, 0}, {-3, 4}, {5, -7}, {-16, 22}} {
		got, want := NCC(a, b, d[0], d[1]), naiveNCC(a, b, d[0], d[1])
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("NCC at %v = %.15f, naive %.15f", d, got, want)
		}
	}
	if v := NCC(a, b, 2, 5); math.Abs(v-1) > 1e-12 {
		t.Errorf("NCC at the true shift = %.15f, want 1", v)
	}
	// Mean subtraction in numerator and denominator: an affine change of
	// intensity (gain 3, offset 10) leaves NCC unchanged. The original's
	// raw-norm denominator would shrink it by std/rms (about 0.03 here).
	c := raster.NewFloat32(23, 17)
	for i, v := range b.Pix {
		c.Pix[i] = 3*v + 10
	}
	if u, v := NCC(a, b, 1, 3), NCC(a, c, 1, 3); math.Abs(u-v) > 1e-6 {
		t.Errorf("NCC not offset/gain invariant: %.9f vs %.9f", u, v)
	}
	if v := NCC(a, b, 17, 0); v != 0 {
		t.Errorf("NCC of an empty overlap = %g, want 0", v)
	}
	flat := raster.NewFloat32(23, 17)
	if v := NCC(a, flat, 0, 0); v != 0 {
		t.Errorf("NCC against a constant tile = %g, want 0", v)
	}
}

func TestQuadPeak(t *testing.T) {
	// exact for a concave quadratic with cross term
	y0, x0 := 0.31, -0.22
	f := func(u, v float64) float64 {
		du, dv := u-y0, v-x0
		return 0.9 - 0.05*du*du - 0.08*dv*dv + 0.02*du*dv
	}
	var s [3][3]float64
	for i := range 3 {
		for j := range 3 {
			s[i][j] = f(float64(i-1), float64(j-1))
		}
	}
	oy, ox, ok := QuadPeak(&s)
	if !ok || math.Abs(oy-y0) > 1e-12 || math.Abs(ox-x0) > 1e-12 {
		t.Errorf("quadPeak = (%g, %g, %v), want (%g, %g)", oy, ox, ok, y0, x0)
	}
	// a saddle is not a maximum
	for i := range 3 {
		for j := range 3 {
			u, v := float64(i-1), float64(j-1)
			s[i][j] = u*u - v*v
		}
	}
	if _, _, ok := QuadPeak(&s); ok {
		t.Error("quadPeak accepted a saddle")
	}
}

func TestFencesAndMedian(t *testing.T) {
	// numpy.quantile([1, 2, 3, 4, 100], [0.25, 0.75]) = [2, 4] (linear)
	lo, hi := fences([]float64{100, 2, 3, 1, 4})
	if lo != 2-1.5*2 || hi != 4+1.5*2 {
		t.Errorf("fences = %g, %g; want -1, 7", lo, hi)
	}
	// iqd floored at 1
	lo, hi = fences([]float64{5, 5, 5, 5})
	if lo != 3.5 || hi != 6.5 {
		t.Errorf("fences of constant = %g, %g; want 3.5, 6.5", lo, hi)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %g, want 2.5", m)
	}
	if cands := nextSmooth5(628); cands != 640 {
		t.Errorf("nextSmooth5(628) = %d, want 640", cands)
	}
}

func TestSpanningTreeAndPlace(t *testing.T) {
	// 2x2 grid: 0 1 / 2 3; pairs 0-1 L, 0-2 T, 1-3 T, 2-3 L
	grid := []GridPos{{0, 0}, {0, 1}, {1, 0}, {1, 1}}
	pairs := Pairs(2, 2, grid)
	want := []Pair{{0, 1, Left}, {0, 2, Top}, {1, 3, Top}, {2, 3, Left}}
	for i := range want {
		if pairs[i] != want[i] {
			t.Fatalf("Pairs = %v, want %v", pairs, want)
		}
	}
	tr := []Translation{
		{DY: 1, DX: 10, NCC: 0.9},
		{DY: 8, DX: -1, NCC: 0.95},
		{DY: 50, DX: 50, NCC: 0.99}, // wrong but high NCC, not valid
		{DY: 2, DX: 11, NCC: 0.5},
	}
	valid := []bool{true, true, false, true}
	tree := spanningTree(4, pairs, tr, valid)
	if len(tree) != 3 || tree[0] != 0 || tree[1] != 1 || tree[2] != 3 {
		t.Fatalf("tree = %v, want [0 1 3] (valid edges beat a higher-NCC invalid one)", tree)
	}
	pos := shiftToZero(place(4, grid, pairs, tr, tree, [2]Translation{{DX: 10}, {DY: 8}}))
	// tile 0 (0,0); 1 (1,10); 2 (8,-1); 3 = 2 + (2,11) = (10,10); shift x by +1
	wantPos := []raster.Point{{Y: 0, X: 1}, {Y: 1, X: 11}, {Y: 8, X: 0}, {Y: 10, X: 11}}
	for i := range wantPos {
		if pos[i] != wantPos[i] {
			t.Fatalf("positions %v, want %v", pos, wantPos)
		}
	}
	// a grid with a hole: tile 2 sits at (1,1) with no neighbour pair to 0, 1
	grid = []GridPos{{0, 0}, {0, 1}, {2, 1}}
	pairs = Pairs(3, 2, grid)
	if len(pairs) != 1 {
		t.Fatalf("pairs %v, want only 0-1", pairs)
	}
	tree = spanningTree(3, pairs, []Translation{{DY: 0.5, DX: 9, NCC: 1}}, []bool{true})
	pos = shiftToZero(place(3, grid, pairs, []Translation{{DY: 0.5, DX: 9, NCC: 1}}, tree, [2]Translation{{DX: 9}, {DY: 7}}))
	// tile 2 by the model: 2*(7,0) + 1*(0,9) = (14, 9)
	if pos[2] != (raster.Point{Y: 14, X: 9}) || pos[1] != (raster.Point{Y: 0.5, X: 9}) {
		t.Errorf("disconnected placement %v", pos)
	}
}

// TestFilter drives the MIST filters with hand-made translations.
func TestFilter(t *testing.T) {
	// 3x3 grid of 100x100 tiles, 20 % overlap: nominal Left (0, 80), Top (80, 0)
	rows, cols := 3, 3
	grid := fullGrid(rows, cols)
	pairs := Pairs(rows, cols, grid)
	p := Params{Overlap: 0.2, NCCThreshold: 0.078, POU: 3}
	mk := func() []Translation {
		out := make([]Translation, len(pairs))
		for i, pr := range pairs {
			if pr.Dir == Left {
				out[i] = Translation{DY: float64(i % 2), DX: 80 + float64(i%3), NCC: 0.9}
			} else {
				out[i] = Translation{DY: 79 + float64(i%2), DX: -1, NCC: 0.8}
			}
		}
		return out
	}
	idx := func(a, b int) int {
		for i, pr := range pairs {
			if pr.A == a && pr.B == b {
				return i
			}
		}
		panic("no pair")
	}
	first := mk()
	bad := idx(4, 5)
	first[bad] = Translation{DY: 0, DX: 90, NCC: 0.95} // outside 80 ± 3
	low := idx(3, 6)
	first[low].NCC = 0.05 // below threshold
	m := &mist{pairs: pairs, grid: grid, first: first, h: 100, w: 100, p: p}
	m.filter()
	if m.thr != 0.078 {
		t.Errorf("threshold %g, want 0.078 (max NCC above it)", m.thr)
	}
	for i := range pairs {
		want := i != bad && i != low
		if m.valid3[i] != want {
			t.Errorf("pair %d %+v valid %v, want %v", i, pairs[i], m.valid3[i], want)
		}
	}
	// replaced by the column median of valid Left pairs of column 2
	e := m.estimate(bad)
	if e.NCC != -1 || e.DX != median([]float64{first[idx(1, 2)].DX, first[idx(7, 8)].DX}) {
		t.Errorf("estimate for the bad pair %+v", e)
	}
	// every NCC above the threshold: it stays, and every pair passes (the
	// original raised it to the minimum NCC and rejected that pair)
	first = mk()
	m = &mist{pairs: pairs, grid: grid, first: first, h: 100, w: 100, p: p}
	m.filter()
	if m.thr != 0.078 {
		t.Errorf("threshold %g, want 0.078 when every NCC is above it", m.thr)
	}
	for i := range pairs {
		if !m.valid3[i] {
			t.Errorf("clean pair %d %+v rejected", i, pairs[i])
		}
	}
	// adaptive threshold when every NCC is below the initial one
	first = mk()
	for i := range first {
		first[i].NCC = 0.02 + 0.001*float64(i)
	}
	m = &mist{pairs: pairs, grid: grid, first: first, h: 100, w: 100, p: p}
	m.filter()
	var sum float64
	for _, f := range first {
		sum += f.NCC
	}
	if want := max(0.02, 0.5*sum/float64(len(first))); math.Abs(m.thr-want) > 1e-15 {
		t.Errorf("adaptive threshold %g, want %g", m.thr, want)
	}
	// no valid pair at all: nominal model and r from pou
	for i := range first {
		first[i].NCC = -1
	}
	m = &mist{pairs: pairs, grid: grid, first: first, h: 100, w: 100, p: p}
	m.filter()
	if e := m.estimate(0); e.DX != 80 || e.DY != 0 {
		t.Errorf("fallback estimate %+v, want nominal (0, 80)", e)
	}
	if m.r != 3 {
		t.Errorf("r = %d, want ceil(3 %% of 100) = 3", m.r)
	}
}

// TestGlobalDropsOutlier drives the global refinement (step 10 of Align)
// with hand-made translations on flat tiles, where no NCC climb finds a
// measurement, so only the drop step can remove a wrong translation: on a
// 3x3 grid every pair is accepted, the translations are the truth plus
// 0.05 px, and one interior pair (in two loops) is 3 px off with NCC 0.99.
func TestGlobalDropsOutlier(t *testing.T) {
	rows, cols, h, w := 3, 3, 40, 40
	var grid []GridPos
	truth := make([]raster.Point, 0, rows*cols)
	for r := range rows {
		for c := range cols {
			grid = append(grid, GridPos{r, c})
			truth = append(truth, raster.Point{Y: 32*float64(r) + 0.3*float64(c), X: 32*float64(c) - 0.2*float64(r*r)})
		}
	}
	pairs := Pairs(rows, cols, grid)
	tr := make([]Translation, len(pairs))
	accepted := make([]bool, len(pairs))
	wrong := -1
	for i, pr := range pairs {
		e := 0.05 * float64(i%3-1)
		tr[i] = Translation{DY: truth[pr.B].Y - truth[pr.A].Y + e, DX: truth[pr.B].X - truth[pr.A].X - e, NCC: 0.8}
		accepted[i] = true
		if pr.A == 4 && pr.Dir == Left { // tiles 4-5: centre to the right
			wrong = i
			tr[i].DY += 3
			tr[i].NCC = 0.99
		}
	}
	tiles := make([]*raster.Float32, len(grid))
	for i := range tiles {
		tiles[i] = raster.NewFloat32(w, h)
		for k := range tiles[i].Pix {
			tiles[i].Pix[k] = 1
		}
	}
	m := newMist(tiles, pairs, grid, tr, Params{Overlap: 0.2, NCCThreshold: 0.078, POU: 3})
	m.thr = 0.078
	tree := spanningTree(len(grid), pairs, tr, accepted)
	pos0 := place(len(grid), grid, pairs, tr, tree, [2]Translation{{DX: 32}, {DY: 32}})
	g, err := m.refineGlobal(context.Background(), len(tiles), tr, accepted, tree, pos0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pairs {
		if got, want := g.outlier[i], i == wrong; got != want || g.accepted[i] == want {
			t.Errorf("pair %d %+v: outlier %v accepted %v, want outlier %v", i, pairs[i], got, g.accepted[i], want)
		}
		if g.accepted[i] && g.residual(i) > GlobalTol {
			t.Errorf("accepted pair %d: residual %.3f px > %.2f", i, g.residual(i), GlobalTol)
		}
	}
	for k, q := range g.pos {
		dy, dx := q.Y-g.pos[0].Y-(truth[k].Y-truth[0].Y), q.X-g.pos[0].X-(truth[k].X-truth[0].X)
		if e := math.Hypot(dy, dx); e > 0.15 {
			t.Errorf("tile %d: position error %.3f px > 0.15 with the wrong pair dropped", k, e)
		}
	}
}

// fullGrid returns every position of a rows x cols tile grid, row by row.
func fullGrid(rows, cols int) []GridPos {
	var grid []GridPos
	for r := range rows {
		for c := range cols {
			grid = append(grid, GridPos{r, c})
		}
	}
	return grid
}
