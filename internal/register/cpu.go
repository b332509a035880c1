package register

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/dsp/fourier"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// CPU is the reference Backend. Workers goroutines share the work (<= 0:
// GOMAXPROCS); results do not depend on Workers.
type CPU struct {
	Workers int
}

// Name implements Backend.
func (c CPU) Name() string { return fmt.Sprintf("cpu (%d workers)", c.workers()) }

func (c CPU) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Downsample implements Backend.
func (c CPU) Downsample(ctx context.Context, img *raster.Gray16, ks []int) ([]*raster.Float32, error) {
	if err := CheckDownsample(img, ks); err != nil {
		return nil, err
	}
	out := make([]*raster.Float32, len(ks))
	for n, k := range ks {
		h, w := img.H/k, img.W/k
		o := raster.NewFloat32(w, h)
		inv := 1 / float64(k*k)
		err := par.ForEach(ctx, h, c.workers(), func(i int) error {
			sums := make([]uint64, w)
			for y := i * k; y < i*k+k; y++ {
				row := img.Pix[y*img.W : y*img.W+w*k]
				for j := range sums {
					var s uint64
					for _, v := range row[j*k : j*k+k] {
						s += uint64(v)
					}
					sums[j] += s
				}
			}
			for j, s := range sums {
				o.Pix[i*w+j] = float32(float64(s) * inv)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out[n] = o
	}
	return out, nil
}

// Warp implements Backend.
func (c CPU) Warp(ctx context.Context, imgs []*raster.Gray16, m *Mapping, h, w int) ([]*raster.Gray16, error) {
	if err := CheckWarp(imgs, m, h, w); err != nil {
		return nil, err
	}
	a, b := m.Rigid.Matrix()
	out := make([]*raster.Gray16, len(imgs))
	for n, img := range imgs {
		o := raster.NewGray16(w, h)
		err := par.ForEach(ctx, h, c.workers(), func(y int) error {
			row := o.Pix[y*w : (y+1)*w]
			for x := range row {
				row[x] = RoundCount(WarpPixel(img, a, b, m.Field, y, x))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out[n] = o
	}
	return out, nil
}

// BlockShifts implements Backend: per block, the moving patch is sampled
// (SampleLevel at MovingLevelCoord), both patches have their mean
// subtracted and are multiplied by PCWindow in y and x, packed as
// z = moving + i·fixed into one complex FFT, turned into the normalised
// cross-power spectrum M·conj(F)/|M·conj(F)| times PCLowPass in y and x,
// and transformed back; the PCM maximum (first in raster order on ties)
// and its circular 3x3 neighbourhood give the shift (PeakShift) and Peak.
func (c CPU) BlockShifts(ctx context.Context, fixed, moving *raster.Float32, k int, maps []*Mapping, blocks []Block, bh, bw int) ([]Shift, error) {
	if err := CheckBlocks(fixed, moving, k, maps, blocks, bh, bw); err != nil {
		return nil, err
	}
	type ab struct {
		a [4]float64
		b [2]float64
		f *Field
	}
	mats := make([]ab, len(maps))
	for i, m := range maps {
		mats[i].a, mats[i].b = m.Rigid.Matrix()
		mats[i].f = m.Field
	}
	wy, wx := PCWindow(bh), PCWindow(bw)
	ly, lx := PCLowPass(bh), PCLowPass(bw)
	out := make([]Shift, len(blocks))
	pool := sync.Pool{New: func() any { return newBlockWork(bh, bw) }}
	err := par.ForEach(ctx, len(blocks), c.workers(), func(i int) error {
		ws := pool.Get().(*blockWork)
		defer pool.Put(ws)
		bl := blocks[i]
		m := mats[bl.Map]
		for y := 0; y < bh; y++ {
			for x := 0; x < bw; x++ {
				qy, qx := MovingLevelCoord(m.a, m.b, m.f, k, bl.Y0+y, bl.X0+x)
				ws.mv[y*bw+x] = SampleLevel(moving, qy, qx)
				ws.fx[y*bw+x] = float64(fixed.Pix[(bl.Y0+y)*fixed.W+bl.X0+x])
			}
		}
		out[i] = ws.correlate(wy, wx, ly, lx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// blockWork is one worker's FFT plans and buffers for bh x bw blocks.
type blockWork struct {
	bh, bw   int
	row, col *fourier.CmplxFFT
	colBuf   []complex128
	z        []complex128
	mv, fx   []float64
}

func newBlockWork(bh, bw int) *blockWork {
	return &blockWork{bh: bh, bw: bw, row: fourier.NewCmplxFFT(bw), col: fourier.NewCmplxFFT(bh),
		colBuf: make([]complex128, bh), z: make([]complex128, bh*bw), mv: make([]float64, bh*bw), fx: make([]float64, bh*bw)}
}

func (ws *blockWork) fft2(inverse bool) {
	h, w, z := ws.bh, ws.bw, ws.z
	for y := 0; y < h; y++ {
		r := z[y*w : (y+1)*w]
		if inverse {
			ws.row.Sequence(r, r)
		} else {
			ws.row.Coefficients(r, r)
		}
	}
	c := ws.colBuf
	for x := 0; x < w; x++ {
		for y := 0; y < h; y++ {
			c[y] = z[y*w+x]
		}
		if inverse {
			ws.col.Sequence(c, c)
		} else {
			ws.col.Coefficients(c, c)
		}
		for y := 0; y < h; y++ {
			z[y*w+x] = c[y]
		}
	}
}

// correlate runs the phase correlation of ws.mv (moving) and ws.fx (fixed).
func (ws *blockWork) correlate(wy, wx, ly, lx []float64) Shift {
	h, w := ws.bh, ws.bw
	n := float64(h * w)
	var sm, sf float64
	for i := range ws.mv {
		sm += ws.mv[i]
		sf += ws.fx[i]
	}
	sm /= n
	sf /= n
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			i := y*w + x
			wt := wy[y] * wx[x]
			ws.z[i] = complex((ws.mv[i]-sm)*wt, (ws.fx[i]-sf)*wt)
		}
	}
	ws.fft2(false)
	CrossPower(ws.z, h, w, ly, lx)
	ws.fft2(true)
	best, bi := math.Inf(-1), 0
	for i, v := range ws.z {
		if r := real(v); r > best {
			best, bi = r, i
		}
	}
	py, px := bi/w, bi%w
	var f [3][3]float64
	for i := -1; i <= 1; i++ {
		for j := -1; j <= 1; j++ {
			f[i+1][j+1] = real(ws.z[((py+i+h)%h)*w+(px+j+w)%w])
		}
	}
	dy, dx := PeakShift(&f, py, px, h, w)
	return Shift{DY: dy, DX: dx, Peak: best / n}
}

// CrossPower turns z = DFT(m + i·f) of two real patches m (moving) and f
// (fixed) into M·conj(F)/|M·conj(F)| · ly[u]·lx[v] in place, with
// M(k) = (Z(k) + conj Z(−k))/2 and F(k) = (Z(k) − conj Z(−k))/(2i); zero
// where the product is zero. Its inverse transform peaks at s with
// f(p) = m(p + s).
func CrossPower(z []complex128, h, w int, ly, lx []float64) {
	for u := 0; u < h; u++ {
		nu := 0
		if u > 0 {
			nu = h - u
		}
		for v := 0; v < w; v++ {
			nv := 0
			if v > 0 {
				nv = w - v
			}
			i, j := u*w+v, nu*w+nv
			if j < i {
				continue
			}
			c := crossPowerAt(z[i], z[j], ly[u]*lx[v])
			z[i] = c
			z[j] = complex(real(c), -imag(c))
		}
	}
}

// crossPowerAt is one frequency of CrossPower (zk = Z(k), zm = Z(−k), g
// the low-pass factor); the CUDA kernel does the same arithmetic.
func crossPowerAt(zk, zm complex128, g float64) complex128 {
	czm := complex(real(zm), -imag(zm))
	fa := zk + czm // 2 M(k)
	d := zk - czm  // 2i F(k)
	// M conj(F) ∝ fa · conj(d/i) = fa · conj(d) · i
	p := fa * complex(real(d), -imag(d))
	p = complex(-imag(p), real(p))
	m := real(p)*real(p) + imag(p)*imag(p)
	if !(m > 0) {
		return 0
	}
	s := g / math.Sqrt(m)
	return complex(real(p)*s, imag(p)*s)
}
