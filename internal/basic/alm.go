package basic

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/mat"
)

// numBlocks is the fixed number of pixel blocks the data matrix is split
// into for the fused passes. Partial sums are kept per block and combined in
// block order, so results do not depend on how many goroutines ran.
const numBlocks = 16

// ALM constants of the original (inexact_alm_rspca_l1).
const (
	muCoef    = 12.5 // μ0 = muCoef/‖D‖₂
	muBarCoef = 1e7  // μ̄ = muBarCoef·μ0
	rho       = 1.5  // μ ← min(ρμ, μ̄)
	ent2      = 10.0 // darkfield step scale (ent1 = 1 is folded into the code)
)

// solver holds one stack's working data and the state of the inexact ALM
// robust PCA. The data matrix D is m x n (m = p² pixels, n images), stored
// image-major (column-major as in MATLAB): D[j*m+i] is pixel i of image j.
type solver struct {
	p, m, n  int
	workers  int
	darkfld  bool
	method   DarkfieldMethod
	masks    bool // accumulate the bright/dim-half sums (DarkfieldOriginal)
	lamFlat  float64
	lamDark  float64
	maxIter  int
	tol      float64
	dct      *dct2
	d        []float64 // m*n data, sorted per pixel along the image axis
	dRowSum  []float64 // m: Σ_j D[i,j]
	dNorm    float64   // ‖D‖_F
	normTwo  float64   // ‖D‖₂
	dMin     float64   // min(D)
	d0Mean   float64   // mean of the darkest (first sorted) column
	weight   []float64 // m*n, mean 1
	e, y     []float64 // m*n
	wHat     []float64 // m, DCT coefficients of the flatfield part
	wIdct    []float64 // m
	coeff    []float64 // n
	aOff     []float64 // m
	s        []float64 // m: Σ_j (D - E + Y/μ)[i,j]
	vSum     []float64 // m: Σ_{j valid} (D - E)[i,j]
	valid    []bool    // n: coeff[j] < 1 at the last vSum accumulation
	hi, lo   []float64 // m: 0/1 masks of the darkfield regression
	tmp      []float64 // m scratch
	tmp2     []float64 // m scratch
	blk      []blockSums
	b1Offset float64

	// Outputs of the last solve: A = wIdct ⊗ coeffA + aOffA, E, offset.
	coeffA []float64 // n
	aOffA  []float64 // m
	offset []float64 // m: final A_offset (darkfield)
}

type blockSums struct {
	col, hi, lo []float64 // n each
	zsq         float64
}

func newSolver(p, n int, p0 Params, workers int) *solver {
	m := p * p
	s := &solver{
		p: p, m: m, n: n, workers: max(1, workers),
		darkfld: p0.Darkfield, maxIter: p0.MaxIterations, tol: p0.OptimizationTol,
		method: p0.DarkfieldMethod, masks: p0.Darkfield && p0.DarkfieldMethod == DarkfieldOriginal,
		dct:     newDCT2Workers(p, workers),
		d:       make([]float64, m*n),
		dRowSum: make([]float64, m),
		weight:  make([]float64, m*n),
		e:       make([]float64, m*n),
		y:       make([]float64, m*n),
		wHat:    make([]float64, m),
		wIdct:   make([]float64, m),
		coeff:   make([]float64, n),
		aOff:    make([]float64, m),
		s:       make([]float64, m),
		vSum:    make([]float64, m),
		valid:   make([]bool, n),
		hi:      make([]float64, m),
		lo:      make([]float64, m),
		tmp:     make([]float64, m),
		tmp2:    make([]float64, m),
		blk:     make([]blockSums, numBlocks),
		coeffA:  make([]float64, n),
		aOffA:   make([]float64, m),
		offset:  make([]float64, m),
	}
	for b := range s.blk {
		s.blk[b] = blockSums{col: make([]float64, n), hi: make([]float64, n), lo: make([]float64, n)}
	}
	for i := range s.weight {
		s.weight[i] = 1
	}
	return s
}

// blockRange returns the pixel range of block b.
func (s *solver) blockRange(b int) (int, int) {
	return b * s.m / numBlocks, (b + 1) * s.m / numBlocks
}

// parallel runs f(b) for every block on up to s.workers goroutines.
func (s *solver) parallel(f func(b int)) {
	if s.workers <= 1 {
		for b := range numBlocks {
			f(b)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.workers, numBlocks) {
		wg.Go(func() {
			for {
				b := int(next.Add(1)) - 1
				if b >= numBlocks {
					return
				}
				f(b)
			}
		})
	}
	wg.Wait()
}

// prepare sorts D per pixel along the image axis and computes the fixed
// quantities of the data: row sums, norms and the minimum.
func (s *solver) prepare() {
	m, n := s.m, s.n
	s.parallel(func(b int) {
		i0, i1 := s.blockRange(b)
		col := make([]float64, n)
		for i := i0; i < i1; i++ {
			for j := range n {
				col[j] = s.d[j*m+i]
			}
			slices.Sort(col)
			var rs float64
			for j, v := range col {
				s.d[j*m+i] = v
				rs += v
			}
			s.dRowSum[i] = rs
		}
	})
	var ss float64
	s.dMin = math.Inf(1)
	for _, v := range s.d {
		ss += v * v
		s.dMin = min(s.dMin, v)
	}
	s.dNorm = math.Sqrt(ss)
	var d0 float64
	for _, v := range s.d[:m] {
		d0 += v
	}
	s.d0Mean = d0 / float64(m)
	s.normTwo = s.spectralNorm()
}

// spectralNorm returns the largest singular value of D, exactly, as the
// square root of the largest eigenvalue of the n x n Gram matrix DᵀD
// (deterministic; the original used an SVD or a randomised power iteration).
func (s *solver) spectralNorm() float64 {
	m, n := s.m, s.n
	g := mat.NewSymDense(n, nil)
	// Upper triangle, one row of pairs per task.
	rows := make([]float64, n*n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for {
				a := int(next.Add(1)) - 1
				if a >= n {
					return
				}
				ca := s.d[a*m : (a+1)*m]
				for c := a; c < n; c++ {
					cb := s.d[c*m : (c+1)*m]
					var acc float64
					for i, v := range ca {
						acc += v * cb[i]
					}
					rows[a*n+c] = acc
				}
			}
		})
	}
	wg.Wait()
	for a := range n {
		for c := a; c < n; c++ {
			g.SetSym(a, c, rows[a*n+c])
		}
	}
	var es mat.EigenSym
	if !es.Factorize(g, false) {
		panic("basic: eigen decomposition of the Gram matrix failed")
	}
	vals := es.Values(nil)
	return math.Sqrt(math.Max(0, vals[len(vals)-1]))
}

func softThreshold(v, t float64) float64 {
	switch {
	case v > t:
		return v - t
	case v < -t:
		return v + t
	}
	return 0
}

// solve runs one inexact ALM robust PCA (inexact_alm_rspca_l1) with the
// current weights and returns the number of iterations.
func (s *solver) solve(ctx context.Context) (int, error) {
	m, n, nf := s.m, s.n, float64(s.n)
	clear(s.e)
	clear(s.y)
	clear(s.wHat)
	clear(s.wIdct)
	clear(s.aOff)
	for j := range s.coeff {
		s.coeff[j] = 1
		s.valid[j] = false
	}
	clear(s.vSum)
	copy(s.s, s.dRowSum) // Σ_j (D - E + Y/μ) with E = Y = 0
	mu := muCoef / s.normTwo
	muBar := muBarCoef * mu
	s.b1Offset = 0
	b1Uplimit := s.dMin

	iter := 0
	for {
		if err := ctx.Err(); err != nil {
			return iter, err
		}
		iter++
		// Flatfield step: W_hat += DCT(mean_j(D - A - E + Y/μ)), shrink.
		var sumCoeff float64
		for _, c := range s.coeff {
			sumCoeff += c
		}
		for i := range m {
			s.tmp[i] = (s.s[i] - s.wIdct[i]*sumCoeff - nf*s.aOff[i]) / nf
		}
		s.dct.forward(s.tmp, s.tmp)
		th := s.lamFlat / mu
		for i := range m {
			s.wHat[i] = softThreshold(s.wHat[i]+s.tmp[i], th)
		}
		s.dct.inverse(s.wIdct, s.wHat)

		// Darkfield regression masks from the new W_idct.
		var nHi, nLo int
		var meanW float64
		if s.masks {
			for _, v := range s.wIdct {
				meanW += v
			}
			meanW /= float64(m)
			for i, v := range s.wIdct {
				s.hi[i], s.lo[i] = 0, 0
				if v > meanW-1e-6 {
					s.hi[i] = 1
					nHi++
				}
				if v < meanW+1e-6 {
					s.lo[i] = 1
					nLo++
				}
			}
		}
		// Remember the A used in this iteration (output of the last one).
		copy(s.coeffA, s.coeff)
		copy(s.aOffA, s.aOff)

		muNew := math.Min(mu*rho, muBar)
		s.pass(mu, muNew)

		// Combine the block sums in order.
		var zsq, total float64
		for b := range s.blk {
			zsq += s.blk[b].zsq
			for j := range n {
				total += s.blk[b].col[j]
			}
		}
		for j := range n {
			var c float64
			for b := range s.blk {
				c += s.blk[b].col[j]
			}
			// mean(R1 column) / mean(R1), clipped at 0.
			s.coeff[j] = math.Max(0, c*nf/total)
		}
		if s.darkfld {
			s.darkStep(mu, total, nHi, nLo, b1Uplimit)
		}
		mu = muNew
		if math.Sqrt(zsq)/s.dNorm < s.tol || iter >= s.maxIter {
			break
		}
	}
	// Final darkfield: A_offset + B1_offset·W_idct.
	for i := range m {
		s.offset[i] = s.aOff[i] + s.b1Offset*s.wIdct[i]
	}
	return iter, nil
}

// pass is the fused per-element sweep of one iteration: with
// A = W_idct ⊗ coeff + A_offset it updates E (weighted shrinkage), Y, and
// accumulates ‖D-A-E‖², the column sums of R = D - E (overall and inside
// the darkfield masks), Σ_j(D - E + Y_new/μ_new) for the next iteration, and
// Σ_{j valid} R for the darkfield offset.
func (s *solver) pass(mu, muNew float64) {
	m, n := s.m, s.n
	inv := 1 / mu
	invNew := 1 / muNew
	s.parallel(func(b int) {
		i0, i1 := s.blockRange(b)
		bs := &s.blk[b]
		clear(bs.col)
		clear(bs.hi)
		clear(bs.lo)
		var zsq float64
		w := s.wIdct[i0:i1]
		ao := s.aOff[i0:i1]
		sacc := s.s[i0:i1]
		vacc := s.vSum[i0:i1]
		clear(sacc)
		if s.darkfld {
			clear(vacc)
		}
		hi := s.hi[i0:i1]
		lo := s.lo[i0:i1]
		for j := range n {
			off := j*m + i0
			d := s.d[off : off+len(w)]
			e := s.e[off : off+len(d)]
			y := s.y[off : off+len(d)]
			wt := s.weight[off : off+len(d)]
			w := w[:len(d)]
			ao := ao[:len(d)]
			sacc := sacc[:len(d)]
			var vj []float64 // Σ_{valid} R is accumulated in the same sweep
			if s.darkfld && s.valid[j] {
				vj = vacc[:len(d)]
			}
			col, zs := sweep(d, e, y, wt, w, ao, sacc, vj, s.coeff[j], mu, inv, invNew)
			zsq += zs
			bs.col[j] = col
			if s.masks {
				var sh, sl float64
				hi, lo := hi[:len(d)], lo[:len(d)]
				e := e[:len(d)]
				for i, dv := range d {
					r := dv - e[i]
					sh += hi[i] * r
					sl += lo[i] * r
				}
				bs.hi[j], bs.lo[j] = sh, sl
			}
		}
		bs.zsq = zsq
	})
}

// sweep is the inner loop of pass over one image's segment: with
// a = w·c + ao it sets E = shrink(D - a + Y/μ, wt/μ), Y += μ(D - a - E), and
// accumulates r = D - E into sacc (with Y_new/μ_new) and, when vacc is not
// nil, into vacc. It returns Σr and Σ(D - a - E)². All slices have the
// length of d.
func sweep(d, e, y, wt, w, ao, sacc, vacc []float64, c, mu, inv, invNew float64) (col, zsq float64) {
	e, y, wt, w, ao, sacc = e[:len(d)], y[:len(d)], wt[:len(d)], w[:len(d)], ao[:len(d)], sacc[:len(d)]
	if vacc == nil {
		for i, dv := range d {
			a := w[i]*c + ao[i]
			t := dv - a + y[i]*inv
			th := wt[i] * inv
			// Soft threshold, branch-free: t - clamp(t, -th, th).
			ev := t - min(max(t, -th), th)
			e[i] = ev
			z := dv - a - ev
			yn := y[i] + mu*z
			y[i] = yn
			zsq += z * z
			r := dv - ev
			col += r
			sacc[i] += r + yn*invNew
		}
		return col, zsq
	}
	vacc = vacc[:len(d)]
	for i, dv := range d {
		a := w[i]*c + ao[i]
		t := dv - a + y[i]*inv
		th := wt[i] * inv
		ev := t - min(max(t, -th), th)
		e[i] = ev
		z := dv - a - ev
		yn := y[i] + mu*z
		y[i] = yn
		zsq += z * z
		r := dv - ev
		col += r
		sacc[i] += r + yn*invNew
		vacc[i] += r
	}
	return col, zsq
}

// darkStep is the darkfield block of inexact_alm_rspca_l1. The offset
// level B1 (in units of W) comes from the regression the Params select
// (see DarkfieldMethod), clamped to [0, min(D)/mean(W)]; then the residual
// offset A1 = mean_{valid j}(R_j) - mean(coeff_valid)·W is DCT-smoothed and
// shrunk, and B_offset = B1·(mean(W) - W) is added back.
func (s *solver) darkStep(mu, total float64, nHi, nLo int, b1Uplimit float64) {
	m, n := s.m, s.n
	meanR := total / float64(m*n)
	s.updateValid()
	var k int
	var sumCv float64
	for j := range n {
		if s.valid[j] {
			k++
			sumCv += s.coeff[j]
		}
	}
	if k == 0 {
		// Degenerate (all columns equal): nothing to regress; keep the offset.
		return
	}
	var meanW float64
	for _, v := range s.wIdct {
		meanW += v
	}
	meanW /= float64(m)

	b1 := s.darkLevel(meanW, meanR, k, nHi, nLo)
	b1 = math.Max(b1, 0)
	b1 = math.Min(b1, b1Uplimit/meanW)
	s.b1Offset = b1
	s.darkOffset(mu, b1, meanW, sumCv/float64(k), k)
}

// updateValid marks the columns with coeff < 1 valid and updates Σ_{valid} R
// (vSum) for the columns whose validity changed.
func (s *solver) updateValid() {
	m := s.m
	for j := range s.n {
		v := s.coeff[j] < 1
		if v == s.valid[j] {
			continue
		}
		sign := 1.0
		if !v {
			sign = -1
		}
		d := s.d[j*m : (j+1)*m]
		e := s.e[j*m : (j+1)*m]
		for i, dv := range d {
			s.vSum[i] += sign * (dv - e[i])
		}
		s.valid[j] = v
	}
}

// darkLevel is the offset level B1 (in units of W, before the clamp) by the
// solver's DarkfieldMethod, over the k valid columns; meanR is the mean of
// R, nHi and nLo the pixel counts of W's bright and dim halves.
func (s *solver) darkLevel(meanW, meanR float64, k, nHi, nLo int) float64 {
	var b1 float64
	switch s.method {
	case DarkfieldDarkest:
		// Intercept of the darkest image (per-pixel minimum over images,
		// the first sorted column) regressed on W across pixels:
		// D_0(p) ≈ β·W(p) + d, B1 = d/mean(W).
		var cov, vw float64
		for i, v := range s.d[:s.m] {
			dw := s.wIdct[i] - meanW
			cov += (v - s.d0Mean) * dw
			vw += dw * dw
		}
		beta := 0.0
		if vw > 0 {
			beta = cov / vw
		}
		// When W has no positive mean (every DCT coefficient shrunk to 0,
		// measured on dense nuclear stacks) the level is undefined: the
		// division gives ±Inf and the fit NaN. That is kept on purpose: a
		// guard (level 0) lets these fits converge, but to flatfields
		// measured worse than the original rule's on the same stacks (example
		// preset DAPI 6.1 % vs 4.9 %); the NaN round stops the fit at once
		// (RoundStop) and the stitch stage refits it with the original rule.
		b1 = (s.d0Mean - beta*meanW) / meanW
	default:
		// The original: over the columns with coeff < 1, regress the
		// contrast between the bright and dim halves of W,
		// B1c_j = (mean_hi R_j - mean_lo R_j)/mean(R), on coeff_j; B1 is
		// where the fitted line crosses zero contrast.
		var t1, t2, t3, t4 float64
		for j := range s.n {
			if !s.valid[j] {
				continue
			}
			var h, l float64
			for b := range s.blk {
				h += s.blk[b].hi[j]
				l += s.blk[b].lo[j]
			}
			b1c := (h/float64(nHi) - l/float64(nLo)) / meanR
			c := s.coeff[j]
			t1 += c * c
			t2 += c
			t3 += b1c
			t4 += c * b1c
		}
		if t5 := t2*t3 - float64(k)*t4; t5 != 0 {
			b1 = (t1*t3 - t2*t4) / t5
		}
	}
	return b1
}

// darkOffset sets aOff from the clamped level b1 and meanCv, the mean
// coeff of the k valid columns: A1_offset = mean_valid(R) - meanCv·W, minus
// its mean (twice, as the original does) and B_offset, DCT-smoothed and
// shrunk by lamDark/(ent2·mu), then shrunk again with B_offset added back.
func (s *solver) darkOffset(mu, b1, meanW, meanCv float64, k int) {
	m := s.m
	a1 := s.tmp
	var ma float64
	for i := range m {
		a1[i] = s.vSum[i]/float64(k) - meanCv*s.wIdct[i]
		ma += a1[i]
	}
	ma /= float64(m)
	var ma2 float64
	for i := range m {
		a1[i] -= ma
		ma2 += a1[i]
	}
	ma2 /= float64(m)
	th := s.lamDark / (ent2 * mu)
	for i := range m {
		bOff := b1*meanW - b1*s.wIdct[i]
		a1[i] = a1[i] - ma2 - bOff
	}
	s.dct.forward(s.tmp2, a1)
	for i := range m {
		s.tmp2[i] = softThreshold(s.tmp2[i], th)
	}
	s.dct.inverse(s.aOff, s.tmp2)
	for i := range m {
		bOff := b1*meanW - b1*s.wIdct[i]
		s.aOff[i] = softThreshold(s.aOff[i], th) + bOff
	}
}
