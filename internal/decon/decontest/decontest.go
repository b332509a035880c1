// Package decontest is the conformance suite every decon.Deconvolver
// passes (the CPU reference in internal/decon, the CUDA engine in
// internal/gpu): Run(t, impl).
package decontest

import (
	"context"
	"errors"
	"math"
	"sort"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Tolerances, with their reasons.
const (
	// refTol: the implementation (float32 convolutions) against the float64
	// reference below after up to 8 iterations: float32 rounding grows
	// slowly through the iterations; 2e-4 of the maximum leaves margin.
	refTol = 2e-4
	// chunkTol: the bound for chunked vs unchunked results (relative
	// to the maximum); windows make the iterates equal up to the order of the
	// stop-rule and α sums.
	chunkTol = 1e-4
	// pctTol: the bound for the percentile clip values.
	pctTol = 1e-3
)

// asymKernel is a 3x3x5 (z,y,x) kernel with no symmetry, so flips,
// axis order and centring errors show.
func asymKernel() *psf.Kernel {
	k := &psf.Kernel{NZ: 3, NY: 3, NX: 5, Data: make([]float32, 45)}
	var s float64
	for i := range k.Data {
		v := 1 + float64((i*7)%11) + 3*float64(i%5)
		if i == 22 {
			v = 40
		}
		k.Data[i] = float32(v)
		s += v
	}
	for i := range k.Data {
		k.Data[i] = float32(float64(k.Data[i]) / s)
	}
	return k
}

func lightSheet(t *testing.T) *psf.Kernel {
	k, _, err := psf.LightSheet(psf.Optics{DXY: 377, DZ: 1500, NA: 0.75, RI: 1.44, ExNM: 560, EmNM: 575, SlitMM: 6.5, FCylMM: 1})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Run runs the suite on impl.
func Run(t *testing.T, impl decon.Deconvolver) {
	t.Run("Reference", func(t *testing.T) { testReference(t, impl) })
	t.Run("Improves", func(t *testing.T) { testImproves(t, impl) })
	t.Run("StopRule", func(t *testing.T) { testStopRule(t, impl) })
	t.Run("Percentile", func(t *testing.T) { testPercentile(t, impl) })
	t.Run("Chunks", func(t *testing.T) { testChunks(t, impl) })
	t.Run("Delta", func(t *testing.T) { testDelta(t, impl) })
	t.Run("BadInput", func(t *testing.T) { testBad(t, impl) })
}

func params(alg string, iters int) decon.Params {
	return decon.Params{Algorithm: alg, Iterations: iters, StopCriterion: 5, HistClip: 0.01}
}

// maxRel returns max|a-b| / max|b| and where.
func maxRel(a, b []float32) (float64, int) {
	var m, d float64
	at := -1
	for i := range b {
		m = math.Max(m, math.Abs(float64(b[i])))
		if e := math.Abs(float64(a[i]) - float64(b[i])); e > d {
			d, at = e, i
		}
	}
	return d / m, at
}

// testReference compares with an independent float64 transcription of the
// original (padding, RL or Biggs, stop rule, crop) on an asymmetric kernel.
func testReference(t *testing.T, impl decon.Deconvolver) {
	k := asymKernel()
	sc := decon.NewScene(1, 4, 21, 26, k, 3)
	for _, c := range refCases() {
		alg, damp := c.alg, c.damp
		{
			p := params(alg, 8)
			p.NoScale, p.Damping, p.StopCriterion, p.Boundary = true, damp, -1e9, c.boundary
			if alg == decon.RichardsonLucyTV {
				p.TV = 0.02 // ten times the default, so that a wrong TV term shows
			}
			got, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
			if err != nil {
				t.Fatal(err)
			}
			want, rels := reference(sc.Noisy, k, p)
			if st.Iterations != 8 || len(st.DeltaRel) != 8 {
				t.Fatalf("%s: %d iterations (%d deltas), want 8", alg, st.Iterations, len(st.DeltaRel))
			}
			for i := range rels {
				if math.Abs(st.DeltaRel[i]-rels[i]) > 1e-2*math.Max(1, math.Abs(rels[i])) {
					t.Errorf("%s damping %g boundary %q: delta_rel[%d] = %g, reference %g", alg, damp, c.boundary, i, st.DeltaRel[i], rels[i])
				}
			}
			if e, at := maxRel(got.Pix, want); e > refTol {
				t.Errorf("%s damping %g boundary %q: max error %.3g of the maximum at %d (got %g, reference %g), tolerance %g", alg, damp, c.boundary, e, at, got.Pix[at], want[at], refTol)
			}
		}
	}
}

type refCase struct {
	alg      string
	damp     float64
	boundary string
}

// refCases are the reference comparisons: every algorithm, undamped and
// damped, with either boundary.
func refCases() []refCase {
	var cs []refCase
	for _, alg := range []string{decon.RichardsonLucy, decon.BiggsAndrews, decon.RichardsonLucyTV} {
		for _, damp := range []float64{0, 0.3} {
			for _, b := range []string{decon.BoundaryMirror, decon.BoundaryFree} {
				cs = append(cs, refCase{alg, damp, b})
			}
		}
	}
	return cs
}

// reference is the original's algorithm in float64, written from its
// description (decon package doc), independent of the implementations.
func reference(in *raster.Stack, k *psf.Kernel, p decon.Params) ([]float32, []float64) {
	g := decon.NewGeometry(in.N, in.H, in.W, k)
	P := [3]int{g.PN, g.PH, g.PW}
	B := [3]int{g.BN, g.BH, g.BW}
	S := [3]int{in.N, in.H, in.W}
	sz := P[0] * P[1] * P[2]
	idx := func(z, y, x int) int { return (z*P[1]+y)*P[2] + x }
	obs := make([]float64, sz)
	for z := 0; z < P[0]; z++ {
		for y := 0; y < P[1]; y++ {
			for x := 0; x < P[2]; x++ {
				c := [3]int{z - B[0], y - B[1], x - B[2]}
				for a := range c { // symmetric reflection
					for c[a] < 0 || c[a] >= S[a] {
						if c[a] < 0 {
							c[a] = -c[a] - 1
						} else {
							c[a] = 2*S[a] - 1 - c[a]
						}
					}
				}
				obs[idx(z, y, x)] = float64(in.Pix[(c[0]*in.H+c[1])*in.W+c[2]])
			}
		}
	}
	x := append([]float64(nil), obs...) // the iterate starts from the mirrored stack
	// BoundaryFree (Bertero-Boccacci): mask M of the observed voxels; the
	// data are M·obs, the correction is divided by conv(M, flip k) (0 where
	// that is below decon.FreeAlphaMin), the delta is summed over M.
	mask := make([]float64, sz)
	for z := 0; z < P[0]; z++ {
		for y := 0; y < P[1]; y++ {
			for xx := 0; xx < P[2]; xx++ {
				in := z >= B[0] && z < B[0]+S[0] && y >= B[1] && y < B[1]+S[1] && xx >= B[2] && xx < B[2]+S[2]
				if in || !p.Free() {
					mask[idx(z, y, xx)] = 1
				}
			}
		}
	}
	for i := range obs {
		obs[i] *= mask[i]
	}
	conv := func(src []float64, kd []float32, kn [3]int, flip bool) []float64 {
		out := make([]float64, sz)
		for z := 0; z < P[0]; z++ {
			for y := 0; y < P[1]; y++ {
				for x := 0; x < P[2]; x++ {
					var s float64
					for a := 0; a < kn[0]; a++ {
						for b := 0; b < kn[1]; b++ {
							for c := 0; c < kn[2]; c++ {
								// convolution: out(p) = Σ k(q) src(p + centre - q)
								sz_, sy, sx := z+kn[0]/2-a, y+kn[1]/2-b, x+kn[2]/2-c
								if sz_ < 0 || sy < 0 || sx < 0 || sz_ >= P[0] || sy >= P[1] || sx >= P[2] {
									continue
								}
								ka, kb, kc := a, b, c
								if flip {
									ka, kb, kc = kn[0]-1-a, kn[1]-1-b, kn[2]-1-c
								}
								s += float64(kd[(ka*kn[1]+kb)*kn[2]+kc]) * src[idx(sz_, sy, sx)]
							}
						}
					}
					out[idx(z, y, x)] = s
				}
			}
		}
		return out
	}
	kn := [3]int{k.NZ, k.NY, k.NX}
	R := decon.DampingKernel()
	eps := float64(decon.Eps)
	alpha := make([]float64, sz)
	for i := range alpha {
		alpha[i] = 1
	}
	if p.Free() {
		alpha = conv(mask, k.Data, kn, true)
	}
	var xprev, gprev, gprev2 []float64
	var rels []float64
	var deltaPrev float64
	for it := 0; it < p.Iterations; it++ {
		y := x
		if p.Biggs() && it >= 2 {
			var dot, nrm float64
			for i := range gprev {
				dot += mask[i] * gprev[i] * gprev2[i]
				nrm += mask[i] * gprev2[i] * gprev2[i]
			}
			alpha := math.Max(0, math.Min(1, dot/(nrm+2.220446049250313e-16)))
			y = make([]float64, sz)
			for i := range y {
				y[i] = math.Max(0, x[i]+alpha*(x[i]-xprev[i]))
			}
		}
		den := conv(y, k.Data, kn, false)
		for i := range den {
			den[i] = obs[i] / math.Max(den[i], eps)
		}
		corr := conv(den, k.Data, kn, true)
		for i := range corr {
			if alpha[i] < decon.FreeAlphaMin {
				corr[i] = 0
			} else {
				corr[i] /= alpha[i]
			}
		}
		var damp []float64
		if p.Damping > 0 {
			damp = conv(y, R.Data, [3]int{3, 3, 3}, false)
		}
		tv := tvDenominator(y, P, p.TVWeight(), float64(decon.TVEps)*float64(decon.RawMax(in.Pix)))
		xn := make([]float64, sz)
		var d2 float64
		for i := range xn {
			xn[i] = corr[i] * y[i] / tv[i]
			if damp != nil {
				xn[i] = (1-p.Damping)*xn[i] + p.Damping*damp[i]
			}
			d2 += mask[i] * (x[i] - xn[i]) * (x[i] - xn[i])
		}
		if p.Biggs() {
			g := make([]float64, sz)
			for i := range g {
				g[i] = xn[i] - y[i]
			}
			gprev2, gprev = gprev, g
		}
		delta := math.Sqrt(d2)
		rel := 0.0
		if it > 0 {
			rel = (deltaPrev - delta) / deltaPrev * 100
		}
		rels = append(rels, rel)
		deltaPrev = delta
		xprev, x = x, xn
		if it > 0 && rel <= p.StopCriterion && !(p.Biggs() && rel < 0) {
			break
		}
	}
	out := make([]float32, in.N*in.H*in.W)
	for z := 0; z < in.N; z++ {
		for y := 0; y < in.H; y++ {
			for xx := 0; xx < in.W; xx++ {
				out[(z*in.H+y)*in.W+xx] = float32(math.Abs(x[idx(z+B[0], y+B[1], xx+B[2])]))
			}
		}
	}
	return out, rels
}

// tvDenominator is Dey et al.'s 1 - λ·div(∇u/|∇u|) of every plane of u
// (p planes of p[1] x p[2]) in float64: forward differences (0 at the last
// row/column), |∇u| = sqrt(dx² + dy² + eps²), backward-difference
// divergence (n = 0 before the first row/column). λ = 0 gives ones.
func tvDenominator(u []float64, P [3]int, lambda, eps float64) []float64 {
	out := make([]float64, len(u))
	at := func(z, y, x int) float64 { return u[(z*P[1]+y)*P[2]+x] }
	n := func(z, y, x int) (float64, float64) {
		var dx, dy float64
		if x+1 < P[2] {
			dx = at(z, y, x+1) - at(z, y, x)
		}
		if y+1 < P[1] {
			dy = at(z, y+1, x) - at(z, y, x)
		}
		m := math.Sqrt(dx*dx + dy*dy + eps*eps)
		return dx / m, dy / m
	}
	for z := 0; z < P[0]; z++ {
		for y := 0; y < P[1]; y++ {
			for x := 0; x < P[2]; x++ {
				nx, ny := n(z, y, x)
				div := nx + ny
				if x > 0 {
					l, _ := n(z, y, x-1)
					div -= l
				}
				if y > 0 {
					_, u := n(z, y-1, x)
					div -= u
				}
				out[(z*P[1]+y)*P[2]+x] = 1 - lambda*div
			}
		}
	}
	return out
}

// testImproves: on a noisy blurred scene with the original's light-sheet
// PSF, every variant brings the result closer to the sharp truth than the
// observation, and Biggs-Andrews gets at least as close as RL in the same
// number of iterations; on dense nuclei RL-TV (the default λ) gets closer
// than RL after 20 iterations (at least 0.2 %; the test logs the margin).
func testImproves(t *testing.T, impl decon.Deconvolver) {
	k := lightSheet(t)
	sc := decon.NewScene(2, 3, 64, 80, k, 3)
	before := decon.RelRMS(sc.Noisy.Pix, sc.Truth.Pix)
	errs := map[string]float64{}
	for _, alg := range []string{decon.RichardsonLucy, decon.BiggsAndrews, decon.RichardsonLucyTV} {
		errs[alg] = fixedErr(t, impl, sc, k, alg, 10)
		if !(errs[alg] < 0.9*before) {
			t.Errorf("%s: relative RMS error %.4f after, %.4f before: want a reduction of at least 10%%", alg, errs[alg], before)
		}
	}
	if !(errs[decon.BiggsAndrews] <= errs[decon.RichardsonLucy]*1.001) {
		t.Errorf("Biggs-Andrews error %.4f above RL's %.4f after 10 iterations", errs[decon.BiggsAndrews], errs[decon.RichardsonLucy])
	}
	// the free boundary fits only the observed voxels: closer to the truth
	// than the mirrored padding in the same iterations (this scene is
	// blurred with nothing beyond its edges, which the mirror gets wrong)
	p := params(decon.RichardsonLucy, 10)
	p.NoScale, p.StopCriterion, p.Boundary = true, -1e9, decon.BoundaryFree
	free, _, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
	if err != nil {
		t.Fatal(err)
	}
	fe := decon.RelRMS(free.Pix, sc.Truth.Pix)
	t.Logf("10 iterations: RL %.4f, free boundary %.4f (%+.2f%%)", errs[decon.RichardsonLucy], fe, 100*(fe/errs[decon.RichardsonLucy]-1))
	if !(fe < 0.98*errs[decon.RichardsonLucy]) {
		t.Errorf("free boundary: error %.4f, mirror %.4f after 10 iterations: want at least 2%% below", fe, errs[decon.RichardsonLucy])
	}
	nu, err := decon.NewSceneKind("nuclei", 2, 3, 64, 80, k, 3)
	if err != nil {
		t.Fatal(err)
	}
	rl, tv := fixedErr(t, impl, nu, k, decon.RichardsonLucy, 20), fixedErr(t, impl, nu, k, decon.RichardsonLucyTV, 20)
	t.Logf("nuclei, 20 iterations: RL %.4f, RL-TV %.4f (%+.2f%%)", rl, tv, 100*(tv/rl-1))
	if !(tv < rl*0.998) {
		t.Errorf("nuclei, 20 iterations: RL-TV error %.4f, RL %.4f: want RL-TV at least 0.2%% below", tv, rl)
	}
}

// fixedErr returns the relative RMS error against sc's truth of alg after
// iters iterations (stop rule off, |RL| unscaled).
func fixedErr(t *testing.T, impl decon.Deconvolver, sc decon.Scene, k *psf.Kernel, alg string, iters int) float64 {
	t.Helper()
	p := params(alg, iters)
	p.NoScale, p.StopCriterion = true, -1e9
	got, _, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
	if err != nil {
		t.Fatal(err)
	}
	return decon.RelRMS(got.Pix, sc.Truth.Pix)
}

// testStopRule: the reported deltas obey the rule: the run ends at the
// first iteration i > 0 with delta_rel <= criterion, or at the cap.
func testStopRule(t *testing.T, impl decon.Deconvolver) {
	k := lightSheet(t)
	sc := decon.NewScene(3, 2, 40, 48, k, 3)
	for _, crit := range []float64{5, 20, -1e9} {
		for _, cap := range []int{1, 3, 25} {
			p := params(decon.RichardsonLucy, cap)
			p.StopCriterion = crit
			_, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Iterations < 1 || st.Iterations > cap || len(st.DeltaRel) != st.Iterations {
				t.Fatalf("criterion %g cap %d: %d iterations, %d deltas", crit, cap, st.Iterations, len(st.DeltaRel))
			}
			for i := 1; i < st.Iterations-1; i++ {
				if st.DeltaRel[i] <= crit {
					t.Errorf("criterion %g: delta_rel[%d] = %g should have stopped the loop", crit, i, st.DeltaRel[i])
				}
			}
			last := st.DeltaRel[st.Iterations-1]
			if st.Stopped != (st.Iterations > 1 && last <= crit) || (!st.Stopped && st.Iterations != cap) {
				t.Errorf("criterion %g cap %d: stopped=%v after %d iterations, last delta_rel %g", crit, cap, st.Stopped, st.Iterations, last)
			}
			if crit == 5 && cap == 25 && !(st.Iterations > 2 && st.Iterations < 25) {
				t.Errorf("5%% rule ended after %d iterations; want it to act before the cap on this scene", st.Iterations)
			}
		}
	}
}

// testPercentile: the clip values equal numpy's percentiles of |RL| (sorted
// copy) within 1e-3 relative, and the output is the rescale formula.
func testPercentile(t *testing.T, impl decon.Deconvolver) {
	k := lightSheet(t)
	sc := decon.NewScene(4, 3, 50, 70, k, 3)
	for _, clip := range []float64{0.01, 1, 0} {
		p := params(decon.RichardsonLucy, 6)
		p.HistClip = clip
		p.NoScale = true
		raw, _, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
		if err != nil {
			t.Fatal(err)
		}
		p.NoScale = false
		out, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
		if err != nil {
			t.Fatal(err)
		}
		s := make([]float64, len(raw.Pix))
		for i, v := range raw.Pix {
			s[i] = float64(v)
		}
		sort.Float64s(s)
		np := func(q float64) float64 {
			pos := q / 100 * float64(len(s)-1)
			i := int(math.Floor(pos))
			if i+1 >= len(s) {
				return s[len(s)-1]
			}
			return s[i] + (pos-float64(i))*(s[i+1]-s[i])
		}
		lo, hi := np(clip), np(100-clip)
		if math.Abs(st.Lo-lo) > pctTol*math.Abs(lo) || math.Abs(st.Hi-hi) > pctTol*math.Abs(hi) {
			t.Errorf("clip %g%%: lo %g hi %g, exact %g %g", clip, st.Lo, st.Hi, lo, hi)
		}
		rawMax := decon.RawMax(sc.Noisy.Pix)
		if st.RawMax != rawMax {
			t.Errorf("raw max %g, want %g", st.RawMax, rawMax)
		}
		for i, v := range raw.Pix {
			want := (math.Max(lo, math.Min(hi, float64(v))) - lo) / (hi - lo) * rawMax
			if math.Abs(float64(out.Pix[i])-want) > 1e-3*rawMax {
				t.Fatalf("clip %g%%: output %g at %d, formula %g", clip, out.Pix[i], i, want)
			}
		}
	}
}

// testChunks: windows of a few rows give the unchunked result within 1e-4.
func testChunks(t *testing.T, impl decon.Deconvolver) {
	for _, k := range []*psf.Kernel{lightSheet(t), asymKernel()} {
		sc := decon.NewScene(5, 3, 45, 40, k, 3)
		for _, alg := range []string{decon.RichardsonLucy, decon.BiggsAndrews, decon.RichardsonLucyTV} {
			p := params(alg, 12)
			p.NoScale = true
			one, st1, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
			if err != nil {
				t.Fatal(err)
			}
			for _, rows := range []int{7, 30} {
				p.ChunkRows = rows
				ch, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
				if err != nil {
					t.Fatal(err)
				}
				if st.Chunks < 2 || st1.Chunks != 1 {
					t.Fatalf("%s rows %d: %d chunks (unchunked %d)", alg, rows, st.Chunks, st1.Chunks)
				}
				if st.Iterations != st1.Iterations {
					t.Errorf("%s rows %d: %d iterations, unchunked %d", alg, rows, st.Iterations, st1.Iterations)
				}
				if e, at := maxRel(ch.Pix, one.Pix); e > chunkTol {
					t.Errorf("%s %s rows %d: chunked differs by %.3g of the maximum at %d (tolerance %g)", alg, k, rows, e, at, chunkTol)
				}
			}
			p.ChunkRows = 0
		}
		p := params(decon.RichardsonLucy, 12)
		p.NoScale, p.Boundary = true, decon.BoundaryFree
		chunksEqual(t, impl, sc, k, p, 7, "free boundary "+k.String())
	}
	// damping needs a halo of one row even for a one-row PSF (the 3x3x3 kernel)
	k := &psf.Kernel{NZ: 3, NY: 1, NX: 5, Data: make([]float32, 15)}
	for i := range k.Data {
		k.Data[i] = float32(1+i%4) / 36
	}
	sc := decon.NewScene(8, 3, 33, 30, k, 3)
	p := params(decon.RichardsonLucy, 6)
	p.NoScale, p.Damping = true, 0.25
	chunksEqual(t, impl, sc, k, p, 5, "damped")
	// the TV term needs a halo of one row too (it reads the rows beside)
	p = params(decon.RichardsonLucyTV, 6)
	p.NoScale, p.TV = true, 0.02
	chunksEqual(t, impl, sc, k, p, 5, "TV, one-row PSF")
}

// chunksEqual checks that p in windows of rows core rows gives the
// unchunked result within chunkTol, in at least 2 windows.
func chunksEqual(t *testing.T, impl decon.Deconvolver, sc decon.Scene, k *psf.Kernel, p decon.Params, rows int, name string) {
	t.Helper()
	one, _, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
	if err != nil {
		t.Fatal(err)
	}
	p.ChunkRows = rows
	ch, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if e, at := maxRel(ch.Pix, one.Pix); e > chunkTol || st.Chunks < 2 {
		t.Errorf("%s: %d chunks differ by %.3g of the maximum at %d (tolerance %g)", name, st.Chunks, e, at, chunkTol)
	}
}

// testDelta: with a 1x1x1 PSF, RL returns the observation (d_new = obs),
// stops at the second iteration (delta 0), and the output is the rescaled input.
func testDelta(t *testing.T, impl decon.Deconvolver) {
	k := &psf.Kernel{NZ: 1, NY: 1, NX: 1, Data: []float32{1}}
	sc := decon.NewScene(6, 2, 30, 20, k, 3)
	p := params(decon.RichardsonLucy, 25)
	p.NoScale = true
	got, st, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Iterations != 2 || !st.Stopped {
		t.Errorf("delta PSF: %d iterations (stopped %v), want 2", st.Iterations, st.Stopped)
	}
	if e, at := maxRel(got.Pix, sc.Noisy.Pix); e > 1e-6 {
		t.Errorf("delta PSF: result differs from the input by %g at %d", e, at)
	}
}

func testBad(t *testing.T, impl decon.Deconvolver) {
	k := lightSheet(t)
	sc := decon.NewScene(7, 2, 20, 20, k, 3)
	good := params(decon.RichardsonLucy, 3)
	for name, mut := range map[string]func(*decon.Params){
		"iterations": func(p *decon.Params) { p.Iterations = 0 },
		"damping":    func(p *decon.Params) { p.Damping = 1.5 },
		"hist_clip":  func(p *decon.Params) { p.HistClip = 50 },
		"algorithm":  func(p *decon.Params) { p.Algorithm = "wiener" },
		"stop":       func(p *decon.Params) { p.StopCriterion = math.NaN() },
		"tv_lambda":  func(p *decon.Params) { p.Algorithm, p.TV = decon.RichardsonLucyTV, 0.5 },
		"tv_neg":     func(p *decon.Params) { p.Algorithm, p.TV = decon.RichardsonLucyTV, -0.01 },
		"tv_rl":      func(p *decon.Params) { p.TV = 0.002 },
		"boundary":   func(p *decon.Params) { p.Boundary = "periodic" },
	} {
		p := good
		mut(&p)
		if _, _, err := impl.Deconvolve(context.Background(), sc.Noisy, k, p); err == nil {
			t.Errorf("bad %s accepted", name)
		}
	}
	zero := raster.NewStack(2, 20, 20)
	if _, _, err := impl.Deconvolve(context.Background(), zero, k, good); !errors.Is(err, decon.ErrInput) {
		t.Errorf("all-zero stack: %v, want decon.ErrInput", err)
	}
	even := &psf.Kernel{NZ: 1, NY: 2, NX: 2, Data: []float32{.25, .25, .25, .25}}
	if _, _, err := impl.Deconvolve(context.Background(), sc.Noisy, even, good); err == nil {
		t.Error("even kernel accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := impl.Deconvolve(ctx, sc.Noisy, k, good); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}
