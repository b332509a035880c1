package decon

import (
	"context"
	"math"
	"runtime"
	"sync"

	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// CPU is the reference Deconvolver: direct convolution (the original's
// PSFs are a few samples wide: 7x7x1 to 9x9x1 light-sheet, about 5x5x7
// widefield), goroutines over rows, float32 arithmetic like the original,
// float64 sums for the stop rule and α.
type CPU struct{}

// Deconvolve implements Deconvolver.
func (CPU) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p Params) (*raster.Stack, Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, Stats{}, err
	}
	if err := CheckInput(in, k); err != nil {
		return nil, Stats{}, err
	}
	workers := p.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	g := NewGeometry(in.N, in.H, in.W, k)
	st := Stats{RawMax: RawMax(in.Pix), Padded: [3]int{g.PN, g.PH, g.PW}}
	obs := Pad(in, g)
	d, err := Iterate(ctx, obs, g.ObservedBox(), k, p, &st, workers)
	if err != nil {
		return nil, st, err
	}
	// the padded observation is no longer needed: its memory takes the result
	return Finish(obs.Pix, d, g, p, &st), st, nil
}

// Iterate runs RL, Biggs-Andrews or RL-TV on the padded observation obs
// (zero boundary), windowed by p's budget, and returns the last iterate
// (not yet |.|). It fills st's iteration fields. box is the observed
// region inside obs: with BoundaryFree, obs is set to 0 outside it (the
// iterate starts from obs as it came), the correction is divided by
// FreeAlpha and the stop rule's delta is summed over the box only.
func Iterate(ctx context.Context, obs *raster.Stack, box Box, k *psf.Kernel, p Params, st *Stats, workers int) (*raster.Stack, error) {
	halo := p.HaloRows(k)
	arrays := 6
	if p.Biggs() {
		arrays = 9
	}
	rows := p.ChunkRows
	if rows == 0 {
		rows = RowsForBudget(p.MemoryBudget, arrays, obs.N, obs.H, obs.W, halo)
	}
	wins := PlanWindows(obs.H, rows, halo)
	st.Chunks = len(wins)
	kf := k.Flipped()
	n := len(obs.Pix)
	x := &raster.Stack{N: obs.N, H: obs.H, W: obs.W, Pix: append([]float32(nil), obs.Pix...)}
	var fa *FreeAlpha
	if p.Free() {
		// start from the mirrored stack, fit the observed voxels only
		fa = NewFreeAlpha(k, box)
		ZeroOutside(obs, box)
	}
	xnew := raster.NewStack(obs.N, obs.H, obs.W)
	var xprev, g, gprev *raster.Stack
	if p.Biggs() {
		xprev = raster.NewStack(obs.N, obs.H, obs.W)
		g = raster.NewStack(obs.N, obs.H, obs.W)
		gprev = raster.NewStack(obs.N, obs.H, obs.W)
	}
	_ = n
	stop := Stopper{Criterion: p.StopCriterion, IgnoreGrowth: p.Biggs()}
	var alpha float64
	ws := winScratch{tvEps2: TVEps2(st.RawMax)}
	for it := 0; it < p.Iterations; it++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var sums [3]float64 // delta², G·Gprev, Gprev²
		for _, w := range wins {
			s := ws.step(obs, x, xprev, xnew, g, gprev, w, k, kf, fa, p, alpha, it, workers)
			for i := range sums {
				sums[i] += s[i]
			}
		}
		rel, done := stop.Step(math.Sqrt(sums[0]))
		st.DeltaRel = append(st.DeltaRel, rel)
		st.Iterations = it + 1
		if p.Biggs() {
			if it >= 1 {
				alpha = BiggsAlpha(sums[1], sums[2])
			}
			xprev, x, xnew = x, xnew, xprev
			g, gprev = gprev, g
		} else {
			x, xnew = xnew, x
		}
		if done {
			st.Stopped = true
			break
		}
	}
	return x, nil
}

// winScratch holds a window's local arrays between iterations.
type winScratch struct {
	obs, y, a, b, cur, tv []float32
	tvEps2                float32 // ε² of the TV term (TVEps2)
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// step updates window w: reads x (and xprev for Biggs) over Lo..Hi, writes
// the core rows of the new iterate into xnew (and G into g), and returns the
// core sums Σ(x-xnew)², Σ G·Gprev, Σ Gprev² (over fa's box when fa !=
// nil: BoundaryFree).
func (ws *winScratch) step(obs, x, xprev, xnew, g, gprev *raster.Stack, w Window, k, kf *psf.Kernel, fa *FreeAlpha, p Params, alpha float64, it, workers int) [3]float64 {
	nz, nx := obs.N, obs.W
	wh := w.Hi - w.Lo
	m := nz * wh * nx
	ws.obs, ws.y, ws.a, ws.b, ws.cur = grow(ws.obs, m), grow(ws.y, m), grow(ws.a, m), grow(ws.b, m), grow(ws.cur, m)
	rowsOf := func(dst []float32, src *raster.Stack) {
		for z := 0; z < nz; z++ {
			copy(dst[z*wh*nx:(z+1)*wh*nx], src.Pix[(z*obs.H+w.Lo)*nx:(z*obs.H+w.Hi)*nx])
		}
	}
	rowsOf(ws.obs, obs)
	rowsOf(ws.cur, x)
	if p.Biggs() && it >= 2 {
		rowsOf(ws.a, xprev)
		a32 := float32(alpha)
		for i, v := range ws.cur {
			yv := v + a32*(v-ws.a[i])
			ws.y[i] = max(yv, 0)
		}
	} else {
		copy(ws.y, ws.cur)
	}
	vol := func(s []float32) *raster.Stack { return &raster.Stack{N: nz, H: wh, W: nx, Pix: s} }
	// a = max(conv(y, k), eps); b = obs / a; a = conv(b, flip k)
	Conv(vol(ws.a), vol(ws.y), k, workers)
	for i, v := range ws.a {
		if v < Eps {
			v = Eps
		}
		ws.b[i] = ws.obs[i] / v
	}
	Conv(vol(ws.a), vol(ws.b), kf, workers)
	if fa != nil {
		for z := 0; z < nz; z++ {
			for r := 0; r < wh; r++ {
				row := ws.a[(z*wh+r)*nx:][:nx]
				for i := range row {
					row[i] = FreeCorrect(row[i], fa.At(z, w.Lo+r, i))
				}
			}
		}
	}
	if lam := p.TVWeight(); lam > 0 {
		// a = a·y / (1 - λ·div(∇y/|∇y|)), then damped as RL
		ws.tv = grow(ws.tv, m)
		TVFactor(vol(ws.tv), vol(ws.y), float32(lam), ws.tvEps2, workers)
		if p.Damping > 0 {
			Conv(vol(ws.b), vol(ws.y), DampingKernel(), workers)
		}
		l := float32(p.Damping)
		for i := range ws.a {
			u := ws.a[i] * ws.y[i]
			u = u / ws.tv[i]
			if p.Damping > 0 {
				u = (1-l)*u + l*ws.b[i]
			}
			ws.a[i] = u
		}
	} else if p.Damping > 0 {
		Conv(vol(ws.b), vol(ws.y), DampingKernel(), workers)
		l := float32(p.Damping)
		for i := range ws.a {
			ws.a[i] = (1-l)*(ws.a[i]*ws.y[i]) + l*ws.b[i]
		}
	} else {
		for i := range ws.a {
			ws.a[i] *= ws.y[i]
		}
	}
	var sums [3]float64
	for z := 0; z < nz; z++ {
		for r := w.Core0; r < w.Core1; r++ {
			lo := (z*wh + r - w.Lo) * nx
			gl := (z*obs.H + r) * nx
			copy(xnew.Pix[gl:gl+nx], ws.a[lo:lo+nx])
			in := fa == nil || (z >= fa.Box.Z0 && z < fa.Box.Z1 && r >= fa.Box.Y0 && r < fa.Box.Y1)
			for i := 0; in && i < nx; i++ {
				if fa != nil && (i < fa.Box.X0 || i >= fa.Box.X1) {
					continue
				}
				dd := float64(ws.cur[lo+i]) - float64(ws.a[lo+i])
				sums[0] += dd * dd
			}
			if g != nil {
				for i := 0; i < nx; i++ {
					gv := ws.a[lo+i] - ws.y[lo+i]
					g.Pix[gl+i] = gv
					if it >= 1 && in && (fa == nil || (i >= fa.Box.X0 && i < fa.Box.X1)) {
						gp := float64(gprev.Pix[gl+i])
						sums[1] += float64(gv) * gp
						sums[2] += gp * gp
					}
				}
			}
		}
	}
	return sums
}

// DampingKernel is the original's R: 3x3x3 ones/26 with centre 0.
func DampingKernel() *psf.Kernel {
	k := &psf.Kernel{NZ: 3, NY: 3, NX: 3, Data: make([]float32, 27)}
	for i := range k.Data {
		k.Data[i] = float32(1.0 / 26)
	}
	k.Data[13] = 0
	return k
}

// Conv is MATLAB's convn(src, k, 'same') for odd kernels: dst(z,y,x) =
// Σ k(a,b,c)·src(z+cz-a, y+cy-b, x+cx-c) with zeros outside src, summed in
// float32 in the order a, b, c, each tap one fused multiply-add (a single
// rounding, axpyFMA): the GPU kernels sum in the same order with the same
// FMA, so their results are the same bits.
func Conv(dst, src *raster.Stack, k *psf.Kernel, workers int) {
	nz, ny, nx := src.N, src.H, src.W
	cz, cy, cx := k.NZ/2, k.NY/2, k.NX/2
	rows := nz * ny
	var wg sync.WaitGroup
	workers = max(1, min(workers, rows))
	next := make(chan int, 64)
	for wkr := 0; wkr < workers; wkr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for row0 := range next {
				for row := row0; row < min(rows, row0+16); row++ {
					z, y := row/ny, row%ny
					out := dst.Pix[row*nx : (row+1)*nx]
					clear(out)
					for a := 0; a < k.NZ; a++ {
						sz := z + cz - a
						if sz < 0 || sz >= nz {
							continue
						}
						for b := 0; b < k.NY; b++ {
							sy := y + cy - b
							if sy < 0 || sy >= ny {
								continue
							}
							in := src.Pix[(sz*ny+sy)*nx : (sz*ny+sy+1)*nx]
							kr := k.Data[(a*k.NY+b)*k.NX : (a*k.NY+b+1)*k.NX]
							for c, kv := range kr {
								off := cx - c // out[x] = fma(kv, in[x+off], out[x])
								x0, x1 := max(0, -off), min(nx, nx-off)
								if x0 >= x1 {
									continue
								}
								axpyFMA(out[x0:x1], in[x0+off:x1+off], kv)
							}
						}
					}
				}
			}
		}()
	}
	for r := 0; r < rows; r += 16 {
		next <- r
	}
	close(next)
	wg.Wait()
}

// TVEps2 returns ε² of the TV term for an input whose maximum is rawMax
// counts: (TVEps·rawMax)², float32.
func TVEps2(rawMax float64) float32 {
	e := float32(TVEps * rawMax)
	return e * e
}

// TVFactor writes dst = 1 - λ·div(∇u/|∇u|_ε) of each plane of u (the
// denominator of Dey et al.'s RL-TV update, in two dimensions: planes are
// regularised independently, as a one-plane PSF deconvolves them).
// ∇u is the forward difference along x and y, 0 at the plane's last
// column/row (Neumann); |∇u|_ε = sqrt(dx² + dy² + eps2); div is the
// backward difference of the normalised gradient n = ∇u/|∇u|_ε, with n = 0
// before the first column/row. float32, in the order written in the loop
// (the GPU kernel decon_tv computes the same expressions).
func TVFactor(dst, u *raster.Stack, lambda, eps2 float32, workers int) {
	nz, ny, nx := u.N, u.H, u.W
	// n(y, x) of plane pl
	norm := func(pl []float32, y, x int) (float32, float32) {
		c := pl[y*nx+x]
		var dx, dy float32
		if x+1 < nx {
			dx = pl[y*nx+x+1] - c
		}
		if y+1 < ny {
			dy = pl[(y+1)*nx+x] - c
		}
		s := dx * dx
		s = s + dy*dy
		s = s + eps2
		m := float32(math.Sqrt(float64(s)))
		return dx / m, dy / m
	}
	rows := nz * ny
	var wg sync.WaitGroup
	workers = max(1, min(workers, rows))
	for wkr := 0; wkr < workers; wkr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for row := wkr; row < rows; row += workers {
				z, y := row/ny, row%ny
				pl := u.Pix[z*ny*nx : (z+1)*ny*nx]
				out := dst.Pix[row*nx : (row+1)*nx]
				for x := 0; x < nx; x++ {
					gx, gy := norm(pl, y, x)
					var lx, uy float32
					if x > 0 {
						lx, _ = norm(pl, y, x-1)
					}
					if y > 0 {
						_, uy = norm(pl, y-1, x)
					}
					d := gx - lx
					d = d + gy
					d = d - uy
					out[x] = 1 - lambda*d
				}
			}
		}()
	}
	wg.Wait()
}
