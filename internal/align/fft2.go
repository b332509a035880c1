package align

import (
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
)

// colBlock is the number of columns gathered at once for the column pass, so
// that each row segment read is a couple of cache lines instead of one
// complex128 per line.
const colBlock = 8

// fft2 is an unnormalised 2-D complex FFT plan for h x w row-major buffers:
// gonum's 1-D FFTPACK transform over every row, then over every column. Any
// lengths work; products of 2, 3, 4 and 5 are fastest. Not safe for
// concurrent use (the 1-D plans hold work space).
type fft2 struct {
	h, w     int
	row, col *fourier.CmplxFFT
	cols     [colBlock][]complex128
}

func newFFT2(h, w int) *fft2 {
	f := &fft2{h: h, w: w, row: fourier.NewCmplxFFT(w), col: fourier.NewCmplxFFT(h)}
	for j := range f.cols {
		f.cols[j] = make([]complex128, h)
	}
	return f
}

// transform replaces buf (len h*w) by its forward 2-D DFT
// X(u,v) = sum x(y,x) exp(-2 pi i (u y/h + v x/w)), or, when inverse, by the
// unnormalised inverse (sign +, no 1/(h w) factor).
func (f *fft2) transform(buf []complex128, inverse bool) {
	h, w := f.h, f.w
	if len(buf) != h*w {
		panic("align: fft2 buffer size mismatch")
	}
	for y := 0; y < h; y++ {
		r := buf[y*w : (y+1)*w]
		if inverse {
			f.row.Sequence(r, r)
		} else {
			f.row.Coefficients(r, r)
		}
	}
	for x0 := 0; x0 < w; x0 += colBlock {
		n := min(colBlock, w-x0)
		for y := 0; y < h; y++ {
			seg := buf[y*w+x0 : y*w+x0+n]
			for j, v := range seg {
				f.cols[j][y] = v
			}
		}
		for j := 0; j < n; j++ {
			c := f.cols[j]
			if inverse {
				f.col.Sequence(c, c)
			} else {
				f.col.Coefficients(c, c)
			}
		}
		for y := 0; y < h; y++ {
			seg := buf[y*w+x0 : y*w+x0+n]
			for j := range seg {
				seg[j] = f.cols[j][y]
			}
		}
	}
}

// crossPower turns z = DFT(a + i b) of two real images a, b into the
// normalised cross-power spectrum R = A conj(B) / |A conj(B)| in place, where
// A = DFT(a) = (Z(k) + conj(Z(-k)))/2 and B = DFT(b) = (Z(k) - conj(Z(-k)))/(2i).
// Packing both real images into one complex transform halves the forward
// FFT work. Frequencies where A conj(B) is exactly zero are set to zero.
// The inverse transform of R peaks at the shift s with b(y,x) = a(y+sy, x+sx).
//
// R is then multiplied by lpY[u]·lpX[v] (nil: 1), a separable low-pass that
// smooths the PCM (see PCMSigma).
func crossPower(z []complex128, h, w int, lpY, lpX []float64) {
	for u := 0; u < h; u++ {
		nu := 0
		if u > 0 {
			nu = h - u
		}
		gy := 1.0
		if lpY != nil {
			gy = lpY[u]
		}
		for v := 0; v < w; v++ {
			nv := 0
			if v > 0 {
				nv = w - v
			}
			i, j := u*w+v, nu*w+nv
			if j < i {
				continue // done together with its mirror
			}
			zk, zm := z[i], z[j]
			czm := complex(real(zm), -imag(zm))
			fa := zk + czm // 2A(k)
			d := zk - czm  // 2i B(k)
			// A conj(B) up to a positive factor: fa * conj(d/i) = fa * conj(d) * i.
			cd := complex(real(d), -imag(d))
			c := fa * cd
			c = complex(-imag(c), real(c)) // times i
			m := real(c)*real(c) + imag(c)*imag(c)
			if m > 0 {
				s := gy / math.Sqrt(m)
				if lpX != nil {
					s *= lpX[v]
				}
				c = complex(real(c)*s, imag(c)*s)
			} else {
				c = 0
			}
			z[i] = c
			// R(-k) = conj(R(k)) for real a, b; the low-pass is even.
			z[j] = complex(real(c), -imag(c))
		}
	}
}

// GaussLowPass fills dst (length n, DFT order) with the transfer function
// exp(-2 pi^2 sigma^2 f^2) of a Gaussian blur of sigma px, f the signed
// frequency in cycles per px.
func GaussLowPass(dst []float64, sigma float64) {
	n := len(dst)
	for k := range dst {
		f := float64(min(k, n-k)) / float64(n)
		dst[k] = math.Exp(-2 * math.Pi * math.Pi * sigma * sigma * f * f)
	}
}

// smooth5 reports whether n has no prime factor above 5.
func smooth5(n int) bool {
	if n <= 0 {
		return false
	}
	for _, p := range []int{2, 3, 5} {
		for n%p == 0 {
			n /= p
		}
	}
	return n == 1
}

// nextSmooth5 returns the smallest n' >= n with no prime factor above 5.
func nextSmooth5(n int) int {
	if n < 1 {
		n = 1
	}
	for !smooth5(n) {
		n++
	}
	return n
}
