//go:build cuda

package gpu

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestDeconVsCPU compares the GPU with the CPU reference on the same data:
// the light-sheet PSF (z-plane dedup on the GPU), the widefield 3D PSF,
// damping, the three algorithms (RL-TV: the TV term in the same float32
// expressions, IEEE sqrt and division on both) and the free boundary (the
// same summed-area table and formula for α, the delta over the observed box). Convolutions are bit-identical; the float64
// sums differ in order, so the iterations must match and the results agree
// to float32 rounding of the sums' effect on α (Biggs): 1e-5 of the maximum
// for RL, 1e-4 for Biggs-Andrews.
func TestDeconVsCPU(t *testing.T) {
	ls, wf := deconPSFs(t)
	// a 17-wide kernel runs the generic convolution (no specialisation)
	wide := &psf.Kernel{NZ: 1, NY: 3, NX: 17, Data: make([]float32, 51)}
	for i := range wide.Data {
		wide.Data[i] = float32(1+i%7) / 204
	}
	for _, c := range []struct {
		name string
		k    *psf.Kernel
		alg  string
		damp float64
		tol  float64
	}{
		{"lightsheet RL", ls, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet Biggs", ls, decon.BiggsAndrews, 0, 1e-4},
		{"widefield RL", wf, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet RL damped", ls, decon.RichardsonLucy, 0.2, 1e-5},
		{"17-wide generic RL", wide, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet RL-TV", ls, decon.RichardsonLucyTV, 0, 1e-5},
		{"widefield RL-TV damped", wf, decon.RichardsonLucyTV, 0.1, 1e-5},
		{"lightsheet RL free", ls, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet Biggs free", ls, decon.BiggsAndrews, 0, 1e-4},
		{"widefield RL free", wf, decon.RichardsonLucy, 0, 1e-5},
		{"lightsheet RL-TV free damped", ls, decon.RichardsonLucyTV, 0.2, 1e-5},
	} {
		sc := decon.NewScene(11, 6, 300, 420, c.k, 3)
		p := decon.Params{Algorithm: c.alg, Iterations: 25, StopCriterion: 5, Damping: c.damp, HistClip: 0.01}
		if strings.HasSuffix(c.name, "free") || strings.Contains(c.name, "free ") {
			p.Boundary = decon.BoundaryFree
		}
		want, ws, err := decon.CPU{}.Deconvolve(context.Background(), sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		got, gs, err := testEngine.Deconvolver().Deconvolve(context.Background(), sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		if gs.Iterations != ws.Iterations {
			t.Errorf("%s: %d iterations, CPU %d", c.name, gs.Iterations, ws.Iterations)
			continue
		}
		var m, d float64
		for i := range want.Pix {
			m = math.Max(m, float64(want.Pix[i]))
			d = math.Max(d, math.Abs(float64(got.Pix[i]-want.Pix[i])))
		}
		t.Logf("%s: %d iterations, max difference %.3g of %g; lo/hi %g/%g vs CPU %g/%g", c.name, gs.Iterations, d, m, gs.Lo, gs.Hi, ws.Lo, ws.Hi)
		if d > c.tol*m {
			t.Errorf("%s: GPU differs from the CPU by %g (max %g, tolerance %g relative)", c.name, d, m, c.tol)
		}
		// the stage's form: rounded on the device, as decon.Quantize
		checkGray16(t, c.name, "DeconvolveGray16", sc.Noisy, c.k, p, got)
	}
}

// TestDeconConvExact checks each convolution kernel bit for bit against
// decon.Conv (every tap one float32 FMA, in the same order) on random data:
// the compile-time widths 1..15 with one-plane and 3D kernels (one and
// four output planes per block), the generic kernel (17 wide), volumes
// whose sizes are not multiples of the blocks, and the epilogue modes 1
// (aux / max(s, eps)) and 2 (s * aux); for the compile-time widths also
// modes 3 (s * aux and the stop rule's weighted sum) and 4 (the free
// boundary's decon.FreeCorrect first, the sum over its box only: decon.CPU's
// order of operations), the sums within 1e-12 (atomics: another order).
func TestDeconConvExact(t *testing.T) {
	const nz, ny, nx = 6, 37, 301
	rng := rand.New(rand.NewPCG(7, 11))
	src := raster.NewStack(nz, ny, nx)
	aux := make([]float32, nz*ny*nx)
	for i := range src.Pix {
		src.Pix[i] = float32(rng.Float64() * 4000)
		aux[i] = float32(rng.Float64() * 1000)
	}
	wz := []float64{2, 1, 1, 1, 1, 2}
	box := decon.Box{Z0: 1, Z1: nz - 1, Y0: 3, Y1: ny - 4, X0: 5, X1: nx - 6}
	var kernels []*psf.Kernel
	for w := 1; w <= 17; w += 2 {
		for _, kz := range []int{1, 3} {
			if w == 17 && kz == 3 {
				continue
			}
			k := &psf.Kernel{NZ: kz, NY: max(1, w-2), NX: w, Data: make([]float32, kz*max(1, w-2)*w)}
			var sum float64
			for i := range k.Data {
				k.Data[i] = float32(rng.Float64())
				sum += float64(k.Data[i])
			}
			for i := range k.Data {
				k.Data[i] = float32(float64(k.Data[i]) / sum)
			}
			kernels = append(kernels, k)
		}
	}
	want := raster.NewStack(nz, ny, nx)
	got := make([]float32, nz*ny*nx)
	n := int64(len(got))
	for _, k := range kernels {
		decon.Conv(want, src, k, 2)
		fa := decon.NewFreeAlpha(k, box)
		modes := 5
		if !deconFixed(k) {
			modes = 3
		}
		for mode := range modes {
			var sum [1]float64
			err := testEngine.do(context.Background(), "conv test", func() error {
				e := testEngine
				s, d, a, kd := e.alloc(n*4), e.alloc(n*4), e.alloc(n*4), e.alloc(int64(len(k.Data))*4)
				wd, sd, sat, bd := e.alloc(int64(len(wz))*8), e.alloc(8), e.alloc(int64(len(fa.SAT))*8), e.alloc(6*4)
				defer e.release(s, d, a, kd, wd, sd, sat, bd)
				put(e, s, src.Pix)
				put(e, a, aux)
				put(e, kd, k.Data)
				put(e, wd, wz)
				put(e, sd, sum[:])
				put(e, sat, fa.SAT)
				put(e, bd, []int32{int32(box.Z0), int32(box.Z1), int32(box.Y0), int32(box.Y1), int32(box.X0), int32(box.X1)})
				e.deconConv(d, s, kd, k, nz, ny, nx, convOut{mode: mode, aux: a, wz: wd, sums: sd, sat: sat, box: bd})
				get(e, got, d)
				get(e, sum[:], sd)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			var wantSum float64
			for i, v := range want.Pix {
				z, y, x := i/(ny*nx), i/nx%ny, i%nx
				switch mode {
				case 1:
					v = aux[i] / max(v, decon.Eps)
				case 2, 3:
					v = v * aux[i]
				case 4:
					v = decon.FreeCorrect(v, fa.At(z, y, x)) * aux[i]
				}
				if mode == 3 || (mode == 4 && box.In(z, y, x)) {
					d := float64(aux[i]) - float64(v)
					wantSum += wz[z] * (d * d)
				}
				if math.Float32bits(got[i]) != math.Float32bits(v) {
					if bad == 0 {
						t.Errorf("kernel %dx%dx%d mode %d: voxel %d = %g, CPU %g", k.NZ, k.NY, k.NX, mode, i, got[i], v)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("kernel %dx%dx%d mode %d: %d of %d voxels differ from decon.Conv", k.NZ, k.NY, k.NX, mode, bad, n)
			}
			if mode >= 3 && math.Abs(sum[0]-wantSum) > 1e-12*wantSum {
				t.Errorf("kernel %dx%dx%d mode %d: the stop rule's sum %.17g, CPU %.17g", k.NZ, k.NY, k.NX, mode, sum[0], wantSum)
			}
		}
	}
}

// checkGray16 runs the stage's form, DeconvolveGray16 (rounded on the
// device), on in with k and p, and fails t unless every page is
// decon.Quantize of got, the float32 result of the same deconvolution; the
// message names the case and the form.
func checkGray16(t *testing.T, name, form string, in *raster.Stack, k *psf.Kernel, p decon.Params, got *raster.Stack) {
	t.Helper()
	pages, _, err := testEngine.DeconvolveGray16(context.Background(), in, k, p)
	if err != nil {
		t.Fatal(err)
	}
	for z, pg := range pages {
		q := decon.Quantize(nil, got.Plane(z))
		for i := range q {
			if pg.Pix[i] != q[i] {
				t.Fatalf("%s: %s plane %d pixel %d = %d, Quantize %d", name, form, z, i, pg.Pix[i], q[i])
			}
		}
	}
}

// deconMaxRel returns max |a-b| / max |b|.
func deconMaxRel(a, b []float32) float64 {
	var m, d float64
	for i := range b {
		m = math.Max(m, math.Abs(float64(b[i])))
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// deconCapFor returns a device-memory budget under which the streamed form
// runs in slabs of PH/div core rows: two slab sets of 4 (RL) or 8 (Biggs)
// arrays of the core rows plus the halo, plus the FFT buffers.
func deconCapFor(n, h, w int, k *psf.Kernel, p decon.Params, div int) int64 {
	g := decon.NewGeometry(n, h, w, k)
	pn := g.PN
	if k.NZ == 1 && p.Damping == 0 {
		pn = g.N
	}
	arrays := int64(4)
	if p.Biggs() {
		arrays = 8
	}
	wh := g.PH/div + 2*p.HaloRows(k)
	c := 2*arrays*int64(pn)*int64(wh)*int64(g.PW)*4 + deconSlack
	if deconUseFFT(k) {
		c += deconFFTBytes(deconFFTDims(pn, wh, g.PW, k))
	}
	return c
}

// TestDeconStreamed: under a device-memory cap that the resident iterates
// exceed, the stack is streamed through the device in >= 3 y-slabs (state in
// pinned host memory) and the result equals the resident one (tolerance
// 1e-4 of the maximum; the convolutions are exact per slab, so 0 is
// expected), for RL, Biggs-Andrews and RL-TV, with and without damping, in the
// three forms (host float32, host uint16, device buffers).
func TestDeconStreamed(t *testing.T) {
	ls, wf := deconPSFs(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		k    *psf.Kernel
		alg  string
		damp float64
	}{
		{"lightsheet RL", ls, decon.RichardsonLucy, 0},
		{"lightsheet Biggs", ls, decon.BiggsAndrews, 0},
		{"lightsheet RL damped", ls, decon.RichardsonLucy, 0.2},
		{"widefield Biggs damped", wf, decon.BiggsAndrews, 0.1},
		{"widefield RL", wf, decon.RichardsonLucy, 0},
		{"lightsheet RL-TV", ls, decon.RichardsonLucyTV, 0},
		{"widefield RL-TV damped", wf, decon.RichardsonLucyTV, 0.1},
		{"lightsheet RL free", ls, decon.RichardsonLucy, 0},
		{"widefield Biggs free", wf, decon.BiggsAndrews, 0},
	} {
		sc := decon.NewScene(21, 6, 150, 200, c.k, 3)
		p := decon.Params{Algorithm: c.alg, Iterations: 12, StopCriterion: 5, Damping: c.damp, HistClip: 0.01}
		if strings.HasSuffix(c.name, "free") {
			p.Boundary = decon.BoundaryFree
		}
		one, s1, err := testEngine.Deconvolver().Deconvolve(ctx, sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		if s1.Streamed || s1.Chunks != 1 {
			t.Fatalf("%s: default budget streamed %v in %d chunks", c.name, s1.Streamed, s1.Chunks)
		}
		p.MemoryBudget = deconCapFor(6, 150, 200, c.k, p, 4)
		got, s2, err := testEngine.Deconvolver().Deconvolve(ctx, sc.Noisy, c.k, p)
		if err != nil {
			t.Fatalf("%s: cap %d: %v", c.name, p.MemoryBudget, err)
		}
		e := deconMaxRel(got.Pix, one.Pix)
		t.Logf("%s: cap %s: streamed %v, %d slabs, %d iterations (resident %d), lo/hi %g/%g (resident %g/%g), max difference %.3g of the maximum",
			c.name, fmtBytes(p.MemoryBudget), s2.Streamed, s2.Chunks, s2.Iterations, s1.Iterations, s2.Lo, s2.Hi, s1.Lo, s1.Hi, e)
		if !s2.Streamed || s2.Chunks < 3 {
			t.Errorf("%s: cap %d: streamed %v in %d slabs, want streamed in >= 3", c.name, p.MemoryBudget, s2.Streamed, s2.Chunks)
		}
		if s2.Iterations != s1.Iterations {
			t.Errorf("%s: %d iterations streamed, %d resident", c.name, s2.Iterations, s1.Iterations)
		}
		if e > 1e-4 {
			t.Errorf("%s: streamed differs from resident by %.3g of the maximum (tolerance 1e-4)", c.name, e)
		}
		checkGray16(t, c.name, "streamed DeconvolveGray16", sc.Noisy, c.k, p, got)
		// device form: the input is on the device, the iterates are streamed
		din, err := testEngine.UploadStack(ctx, sc.Noisy)
		if err != nil {
			t.Fatal(err)
		}
		p.MemoryBudget += int64(len(sc.Noisy.Pix)) * 4
		dout, s3, err := testEngine.DeconvolveDevice(ctx, din, c.k, p)
		testEngine.FreeStack(din)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := testEngine.DownloadStack(ctx, dout)
		testEngine.FreeStack(dout)
		if err != nil {
			t.Fatal(err)
		}
		if e := deconMaxRel(dev.Pix, one.Pix); !s3.Streamed || e > 1e-4 {
			t.Errorf("%s: device form under a cap: streamed %v, differs by %.3g", c.name, s3.Streamed, e)
		}
	}
}

// TestDeconCapTooSmall: a cap below one slab's needs is an ErrOutOfMemory
// naming the sizes, not a crash or a partial result.
func TestDeconCapTooSmall(t *testing.T) {
	ls, _ := deconPSFs(t)
	sc := decon.NewScene(3, 4, 100, 120, ls, 3)
	p := decon.Params{Iterations: 5, StopCriterion: 5, HistClip: 0.01, MemoryBudget: 4096}
	_, _, err := testEngine.Deconvolver().Deconvolve(context.Background(), sc.Noisy, ls, p)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "slab of") || !strings.Contains(err.Error(), "120x100x4") {
		t.Fatalf("cap 4096 B: error %v, want ErrOutOfMemory naming the stack and slab sizes", err)
	}
	t.Log(err)
}

// deconPSFs returns the light-sheet and the widefield PSF of the tests'
// optics (377 nm pixels, 1.5 µm planes, NA 0.75, DAPI's excitation and
// emission); an error is fatal.
func deconPSFs(t *testing.T) (ls, wf *psf.Kernel) {
	t.Helper()
	o := psf.Optics{DXY: 377, DZ: 1500, NA: 0.75, RI: 1.44, ExNM: 358, EmNM: 461, SlitMM: 6.5, FCylMM: 1}
	ls, _, err := psf.LightSheet(o)
	if err != nil {
		t.Fatal(err)
	}
	wf, _, err = psf.Widefield(o)
	if err != nil {
		t.Fatal(err)
	}
	return ls, wf
}

// deconGauss is a normalised 3-D Gaussian kernel (nz, ny, nx), sigmas in samples.
func deconGauss(nz, ny, nx int, sz, sy, sx float64) *psf.Kernel {
	k := &psf.Kernel{NZ: nz, NY: ny, NX: nx, Data: make([]float32, nz*ny*nx)}
	v := make([]float64, len(k.Data))
	var s float64
	for z := 0; z < nz; z++ {
		for y := 0; y < ny; y++ {
			for x := 0; x < nx; x++ {
				dz, dy, dx := float64(z-nz/2)/sz, float64(y-ny/2)/sy, float64(x-nx/2)/sx
				i := (z*ny+y)*nx + x
				v[i] = math.Exp(-(dz*dz + dy*dy + dx*dx) / 2)
				s += v[i]
			}
		}
	}
	for i := range v {
		k.Data[i] = float32(v[i] / s)
	}
	return k
}

// TestDeconFFT: PSFs beyond the direct kernels (65x65 lateral: the shared
// tile does not fit; 33x33x3 and 15x15x9: more taps than deconFFTTaps) run
// the cuFFT path and match the CPU's direct reference within 1e-4 of the
// maximum (float32 FFT rounding; a fixed number of iterations, so that a
// stop decision within rounding of the criterion cannot differ); the FFT
// path streamed under a cap (>= 3 slabs, other FFT sizes) matches it
// resident within 1e-4.
func TestDeconFFT(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		k       *psf.Kernel
		n, h, w int
		alg     string
		stream  bool // also streamed under a cap (a 64-row halo needs a taller stack)
	}{
		{"65x65x1 RL", deconGauss(1, 65, 65, 1, 9, 9), 3, 40, 48, decon.RichardsonLucy, false},
		{"33x33x3 RL", deconGauss(3, 33, 33, 0.8, 5, 5), 4, 96, 64, decon.RichardsonLucy, true},
		{"33x33x3 RL-TV", deconGauss(3, 33, 33, 0.8, 5, 5), 4, 96, 64, decon.RichardsonLucyTV, true},
		{"33x33x3 RL free", deconGauss(3, 33, 33, 0.8, 5, 5), 4, 96, 64, decon.RichardsonLucy, true},
		{"15x15x9 Biggs", deconGauss(9, 15, 15, 2, 2.5, 2.5), 12, 48, 64, decon.BiggsAndrews, true},
	} {
		if !deconUseFFT(c.k) {
			t.Fatalf("%s: not on the FFT path", c.name)
		}
		sc := decon.NewScene(31, c.n, c.h, c.w, c.k, 3)
		p := decon.Params{Algorithm: c.alg, Iterations: 8, StopCriterion: -1e9, HistClip: 0.01}
		if strings.HasSuffix(c.name, "free") {
			p.Boundary = decon.BoundaryFree
		}
		want, ws, err := decon.CPU{}.Deconvolve(ctx, sc.Noisy, c.k, p)
		if err != nil {
			t.Fatal(err)
		}
		got, gs, err := testEngine.Deconvolver().Deconvolve(ctx, sc.Noisy, c.k, p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		e := deconMaxRel(got.Pix, want.Pix)
		t.Logf("%s: %d iterations (CPU %d), lo/hi %g/%g (CPU %g/%g), max |GPU FFT - CPU| %.3g of the maximum", c.name, gs.Iterations, ws.Iterations, gs.Lo, gs.Hi, ws.Lo, ws.Hi, e)
		if gs.Iterations != ws.Iterations || e > 1e-4 {
			t.Errorf("%s: FFT path differs from the CPU by %.3g of the maximum (tolerance 1e-4), %d iterations vs %d", c.name, e, gs.Iterations, ws.Iterations)
		}
		if !c.stream {
			continue
		}
		p.MemoryBudget = deconCapFor(c.n, c.h, c.w, c.k, p, 8)
		ch, cs, err := testEngine.Deconvolver().Deconvolve(ctx, sc.Noisy, c.k, p)
		if err != nil {
			t.Fatalf("%s: cap %d: %v", c.name, p.MemoryBudget, err)
		}
		e2 := deconMaxRel(ch.Pix, got.Pix)
		t.Logf("%s: streamed under %s in %d slabs: differs from resident by %.3g of the maximum", c.name, fmtBytes(p.MemoryBudget), cs.Chunks, e2)
		if !cs.Streamed || cs.Chunks < 3 || e2 > 1e-4 {
			t.Errorf("%s: FFT streamed %v in %d slabs differs by %.3g (want >= 3 slabs, <= 1e-4)", c.name, cs.Streamed, cs.Chunks, e2)
		}
	}
}

// BenchmarkDeconConv is one direct convolution of a production channel's
// padded stack (20 x 7600 x 12800 float32, about the 12676 x 7493 mosaic
// padded) with a 9 x 9 x 1 kernel (the light-sheet PSF of channels 2-4),
// epilogue mode 0: milliseconds per launch and taps per second (one tap:
// one float32 FMA).
func BenchmarkDeconConv(b *testing.B) {
	const nz, ny, nx = 20, 7600, 12800
	k := &psf.Kernel{NZ: 1, NY: 9, NX: 9, Data: make([]float32, 81)}
	for i := range k.Data {
		k.Data[i] = float32(1+i%5) / 243
	}
	n := int64(nz) * ny * nx
	var perLaunch float64
	err := testEngine.do(context.Background(), "conv benchmark", func() error {
		e := testEngine
		src, dst, kd := e.alloc(n*4), e.alloc(n*4), e.alloc(81*4)
		defer e.release(src, dst, kd)
		cu.MemsetD32(src, math.Float32bits(1.5), n)
		put(e, kd, k.Data)
		e.deconConv(dst, src, kd, k, nz, ny, nx, convOut{}) // warm-up
		e.compute.Synchronize()
		start := time.Now()
		for range b.N {
			e.deconConv(dst, src, kd, k, nz, ny, nx, convOut{})
		}
		e.compute.Synchronize()
		perLaunch = time.Since(start).Seconds() / float64(b.N)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(perLaunch*1000, "ms/launch")
	b.ReportMetric(float64(n)*81/perLaunch/1e12, "Ttaps/s")
}
