package basic

import (
	"fmt"
	"math"
	"math/cmplx"
	"sync"

	"gonum.org/v1/gonum/dsp/fourier"
)

// dct2 computes orthonormal 2-D DCT-II transforms (and their inverses,
// DCT-III) of n x n float64 planes, row-major, x fastest: the transform
// scipy.fft.dctn(x, type=2, norm="ortho") and MATLAB dct2 compute,
//
//	X[u,v] = s(u) s(v) Σ_y Σ_x x[y,x] cos(π(2y+1)u/2n) cos(π(2x+1)v/2n),
//	s(0) = √(1/n), s(k>0) = √(2/n).
//
// The 1-D transforms use FFTPACK's quarter-wave cosine transforms (gonum):
// CosSequence is 4·(unnormalised DCT-II), CosCoefficients is the
// unnormalised DCT-III with the first term counted once. The rows of each
// pass are split over up to workers goroutines (each row's transform is
// independent, so results do not depend on workers). A dct2 holds scratch
// memory and is not safe for concurrent use.
type dct2 struct {
	n     int
	fft   *fftPlan     // non-nil when n is a power of two (≥ 2)
	post  []complex128 // e^{-iπk/2n}
	sOrth []float64    // s(k)
	sFwd  []float64    // forward scale per coefficient: s(k)/4
	sInv  []float64    // inverse pre-scale: s(0), s(k)/2
	tmp   []float64    // n x n transpose buffer
	lanes []dctLane    // per-goroutine state
}

type dctLane struct {
	q         *fourier.QuarterWaveFFT // general n
	line, out []float64
	z         []complex128 // power-of-two n: two rows per complex FFT
}

func newDCT2(n int) *dct2 { return newDCT2Workers(n, 1) }

func newDCT2Workers(n, workers int) *dct2 {
	if n < 1 {
		panic(fmt.Sprintf("basic: invalid DCT size %d", n))
	}
	d := &dct2{
		n:    n,
		sFwd: make([]float64, n),
		sInv: make([]float64, n),
		tmp:  make([]float64, n*n),
	}
	if n >= 2 && n&(n-1) == 0 {
		d.fft = newFFTPlan(n)
		d.post = make([]complex128, n)
		for k := range n {
			d.post[k] = cmplx.Exp(complex(0, -math.Pi*float64(k)/float64(2*n)))
		}
	}
	for range max(1, min(workers, n/2)) {
		ln := dctLane{line: make([]float64, n), out: make([]float64, n)}
		if d.fft != nil {
			ln.z = make([]complex128, n)
		} else {
			ln.q = fourier.NewQuarterWaveFFT(n)
		}
		d.lanes = append(d.lanes, ln)
	}
	d.sOrth = make([]float64, n)
	s0 := math.Sqrt(1 / float64(n))
	sk := math.Sqrt(2 / float64(n))
	for k := range n {
		d.sOrth[k] = sk
		if k == 0 {
			d.sOrth[k] = s0
			d.sFwd[k] = s0 / 4
			d.sInv[k] = s0
		} else {
			d.sFwd[k] = sk / 4
			d.sInv[k] = sk / 2
		}
	}
	return d
}

// forward sets dst to the orthonormal DCT-II of src (both n x n). dst may
// alias src.
func (d *dct2) forward(dst, src []float64) { d.apply(dst, src, false) }

// inverse sets dst to the inverse of forward (orthonormal DCT-III). dst may
// alias src.
func (d *dct2) inverse(dst, src []float64) { d.apply(dst, src, true) }

func (d *dct2) apply(dst, src []float64, inv bool) {
	n := d.n
	if len(src) != n*n || len(dst) != n*n {
		panic(fmt.Sprintf("basic: DCT size mismatch: %d, %d for n=%d", len(src), len(dst), n))
	}
	// Rows of src into the transposed buffer, then rows of that (the
	// columns of src) back into dst, transposing again.
	d.pass(d.tmp, src, inv)
	d.pass(dst, d.tmp, inv)
}

// pass transforms every row of src and writes the result transposed into dst.
func (d *dct2) pass(dst, src []float64, inv bool) {
	nl := len(d.lanes)
	if nl == 1 {
		d.rows(&d.lanes[0], dst, src, inv, 0, d.n)
		return
	}
	var wg sync.WaitGroup
	for l := range nl {
		// Even chunk boundaries keep row pairs together.
		y0, y1 := 2*(l*d.n/(2*nl)), 2*((l+1)*d.n/(2*nl))
		if l == nl-1 {
			y1 = d.n
		}
		wg.Go(func() { d.rows(&d.lanes[l], dst, src, inv, y0, y1) })
	}
	wg.Wait()
}

// rows transforms rows y0..y1-1 of src into columns y0..y1-1 of dst.
func (d *dct2) rows(ln *dctLane, dst, src []float64, inv bool, y0, y1 int) {
	n := d.n
	if d.fft != nil {
		for y := y0; y < y1; y += 2 {
			a := src[y*n : (y+1)*n]
			b := a // a lone last row is paired with itself
			if y+1 < y1 {
				b = src[(y+1)*n : (y+2)*n]
			}
			if inv {
				d.inversePair(ln, a, b)
			} else {
				d.forwardPair(ln, a, b)
			}
			z := ln.z
			for x := range n {
				dst[x*n+y] = real(z[x])
			}
			if y+1 < y1 {
				for x := range n {
					dst[x*n+y+1] = imag(z[x])
				}
			}
		}
		return
	}
	line, out := ln.line, ln.out
	for y := y0; y < y1; y++ {
		row := src[y*n : (y+1)*n]
		if inv {
			for k, v := range row {
				line[k] = v * d.sInv[k]
			}
			ln.q.CosCoefficients(out, line)
		} else {
			ln.q.CosSequence(out, row)
			for k := range out {
				out[k] *= d.sFwd[k]
			}
		}
		for x, v := range out {
			dst[x*n+y] = v
		}
	}
}

// forwardPair computes the orthonormal DCT-II of two real rows a and b with
// one complex FFT (Makhoul's reordering): with v[k] = x[2k],
// v[n-1-k] = x[2k+1] and V = DFT(v), the unnormalised DCT-II is
// X[k] = Re(e^{-iπk/2n} V[k]). Packing z = v_a + i·v_b, the two spectra are
// V_a = (Z[k] + conj Z[-k])/2 and V_b = (Z[k] - conj Z[-k])/2i. The results
// are left in ln.z: real parts for a, imaginary parts for b.
func (d *dct2) forwardPair(ln *dctLane, a, b []float64) {
	n := d.n
	z := ln.z
	h := n / 2
	for k := range h {
		z[k] = complex(a[2*k], b[2*k])
		z[n-1-k] = complex(a[2*k+1], b[2*k+1])
	}
	d.fft.transform(z, false)
	out := ln.line // reuse as scratch for b's coefficients
	res := ln.out
	for k := range n {
		zk := z[k]
		zm := cmplx.Conj(z[(n-k)&(n-1)])
		va := (zk + zm) * 0.5
		vb := (zk - zm) * complex(0, -0.5)
		res[k] = real(d.post[k]*va) * d.sOrth[k]
		out[k] = real(d.post[k]*vb) * d.sOrth[k]
	}
	for k := range n {
		z[k] = complex(res[k], out[k])
	}
}

// inversePair computes the orthonormal DCT-III (inverse of forwardPair) of
// two coefficient rows a and b: with X = coefficients/s(k), the spectrum of
// the reordered sequence is V[k] = e^{iπk/2n}(X[k] - i·X[n-k]) (X[n] = 0),
// and v = IDFT(V) is real, so two rows share one complex inverse FFT
// (z = V_a + i·V_b). The results are left in ln.z (real: a, imaginary: b).
func (d *dct2) inversePair(ln *dctLane, a, b []float64) {
	n := d.n
	z := ln.z
	for k := range n {
		var am, bm float64
		if k > 0 {
			am, bm = a[n-k]/d.sOrth[n-k], b[n-k]/d.sOrth[n-k]
		}
		w := cmplx.Conj(d.post[k])
		va := w * complex(a[k]/d.sOrth[k], -am)
		vb := w * complex(b[k]/d.sOrth[k], -bm)
		z[k] = va + complex(0, 1)*vb
	}
	d.fft.transform(z, true) // includes 1/n
	res, out := ln.out, ln.line
	h := n / 2
	for k := range h {
		res[2*k], out[2*k] = real(z[k]), imag(z[k])
		res[2*k+1], out[2*k+1] = real(z[n-1-k]), imag(z[n-1-k])
	}
	for k := range n {
		z[k] = complex(res[k], out[k])
	}
}

// fftPlan is an in-place iterative radix-2 complex FFT of a power-of-two
// length n.
type fftPlan struct {
	n   int
	rev []int        // bit-reversal permutation
	tw  []complex128 // e^{-2πij/n}, j < n/2
	itw []complex128 // e^{+2πij/n}
}

func newFFTPlan(n int) *fftPlan {
	p := &fftPlan{n: n, rev: make([]int, n), tw: make([]complex128, n/2), itw: make([]complex128, n/2)}
	bits := 0
	for 1<<bits < n {
		bits++
	}
	for i := range n {
		r := 0
		for b := range bits {
			if i&(1<<b) != 0 {
				r |= 1 << (bits - 1 - b)
			}
		}
		p.rev[i] = r
	}
	for j := range n / 2 {
		p.tw[j] = cmplx.Exp(complex(0, -2*math.Pi*float64(j)/float64(n)))
		p.itw[j] = cmplx.Conj(p.tw[j])
	}
	return p
}

// transform computes z ← DFT(z) (e^{-2πikm/n}), or with inv the inverse
// DFT including the 1/n factor.
func (p *fftPlan) transform(z []complex128, inv bool) {
	n := p.n
	z = z[:n]
	for i, r := range p.rev {
		if i < r {
			z[i], z[r] = z[r], z[i]
		}
	}
	tw := p.tw
	if inv {
		tw = p.itw
	}
	// First stage: twiddle 1.
	for i := 0; i+1 < n; i += 2 {
		u, t := z[i], z[i+1]
		z[i], z[i+1] = u+t, u-t
	}
	for size := 4; size <= n; size <<= 1 {
		half := size / 2
		step := n / size
		for start := 0; start < n; start += size {
			blk := z[start : start+size]
			lo, hi := blk[:half], blk[half:size]
			for j := range lo {
				t := tw[j*step] * hi[j]
				u := lo[j]
				lo[j] = u + t
				hi[j] = u - t
			}
		}
	}
	if inv {
		s := complex(1/float64(n), 0)
		for i := range z {
			z[i] *= s
		}
	}
}
