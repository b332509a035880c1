//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// deconConvs dispatches the PSF convolutions to the direct kernels or the
// FFT path (fft != nil).
type deconConvs struct {
	e       *Engine
	k       *psf.Kernel
	kd, kfd cu.DevicePtr
	fft     *deconFFT
}

// conv runs dst = conv(src, k) (flipped: flip(k)) on an (nz, ny, nx) window
// with decon_conv's epilogue modes (3, the fused stop-rule sum, only direct).
func (c *deconConvs) conv(flipped bool, dst, src cu.DevicePtr, nz, ny, nx, mode int, aux, wz, sums cu.DevicePtr) {
	if c.fft != nil {
		if mode == 3 {
			panic("gpu: decon: fused sums need the direct convolution")
		}
		c.e.deconFFTConv(c.fft, flipped, dst, src, nz, ny, nx, mode, aux)
		return
	}
	kd := c.kd
	if flipped {
		kd = c.kfd
	}
	c.e.deconConv(dst, src, kd, c.k, nz, ny, nx, mode, aux, wz, sums)
}

// deconPlan is how one deconvolution uses the device.
type deconPlan struct {
	g        decon.Geometry
	pn, bn   int       // planes computed and padding before them (z dedup for one-plane PSFs)
	w        []float64 // plane weights in the sums
	halo     int
	fft      bool
	streamed bool  // iterates in pinned host memory, streamed by y-slabs
	rows     int   // core rows per window (0: one window)
	budget   int64 // bytes of device memory the run may use
	resident int64 // bytes the resident form needs
	slab     int64 // bytes the streamed form needs (when streamed)
}

// deconSlack covers the small device buffers (kernels, weights, sums, histogram bins).
const deconSlack = 64 << 10

// deconMakePlan decides, on the engine goroutine, between the resident form
// (every iterate on the device) and the streamed one, and the windows.
// The budget is p.MemoryBudget, or the free device memory (plus the pool's
// cache, plus the input when it is already on the device) less a margin of
// 10 % or 1 GiB, whichever is larger. The resident form needs the input,
// the output and 4 (RL) or 8 (Biggs-Andrews) padded float32 arrays, plus
// the FFT buffers; the streamed form two sets of 4 or 8 slab arrays plus
// the FFT buffers. Neither fitting is an ErrOutOfMemory naming the sizes.
func (e *Engine) deconMakePlan(n, h, w int, k *psf.Kernel, p decon.Params, inOnDevice bool) (deconPlan, error) {
	g := decon.NewGeometry(n, h, w, k)
	pl := deconPlan{g: g, halo: decon.Halo(k, p.Damping), fft: deconUseFFT(k)}
	// Planes computed: all padded planes, or only the real ones weighted by
	// their multiplicity when the PSF is one plane deep and undamped.
	pl.pn, pl.bn = g.PN, g.BN
	pl.w = make([]float64, g.PN)
	if k.NZ == 1 && p.Damping == 0 {
		pl.pn, pl.bn = g.N, 0
		pl.w = make([]float64, g.N)
		for z := 0; z < g.PN; z++ {
			pl.w[decon.Mirror(z-g.BN, g.N)]++
		}
	} else {
		for i := range pl.w {
			pl.w[i] = 1
		}
	}
	pn, ph, pw := pl.pn, g.PH, g.PW
	nIn := int64(n) * int64(h) * int64(w) * 4
	arrays := int64(4) // obs, x, xnew, b
	if p.Biggs() {
		arrays = 8 // + y, xprev, g, gprev
	}
	m := int64(pn) * int64(ph) * int64(pw) * 4

	if p.MemoryBudget > 0 {
		pl.budget = p.MemoryBudget
	} else {
		free, _ := cu.MemGetInfo()
		avail := free + e.pool.cached
		if inOnDevice {
			avail += nIn
		}
		pl.budget = avail - max(avail/10, 1<<30)
	}

	// FFT windows: at most deconFFTMax padded elements.
	fftRows := ph + 2*pl.halo
	if pl.fft {
		fftRows = deconFFTRowsFor(pn, pw, k, deconFFTMax, 0)
		if fftRows < 2*pl.halo+1 {
			return pl, fmt.Errorf("decon: PSF %s (x,y,z): an FFT window of one row (%d planes x %d) exceeds %d elements", k, pn, pw, deconFFTMax)
		}
	}
	fftBytes := func(wh int) int64 {
		if !pl.fft {
			return 0
		}
		return deconFFTBytes(deconFFTDims(pn, wh, pw, k))
	}

	// Resident.
	rows := p.ChunkRows
	if pl.fft && fftRows < ph {
		rows = fftRows - 2*pl.halo
		if p.ChunkRows > 0 {
			rows = min(p.ChunkRows, rows)
		}
	}
	wh := ph
	pl.resident = 2*nIn + arrays*m + deconSlack
	if rows > 0 && rows < ph {
		wh = min(ph, rows+2*pl.halo)
		pl.resident += 6 * int64(pn) * int64(wh) * int64(pw) * 4 // window copies
	}
	pl.resident += fftBytes(wh)
	if pl.resident <= pl.budget {
		pl.rows = rows
		return pl, nil
	}

	// Streamed: the largest slab (window rows, halo included) that fits.
	perRow := 2 * arrays * int64(pn) * int64(pw) * 4
	slabBytes := func(wh int) int64 { return int64(wh)*perRow + fftBytes(wh) + deconSlack }
	lo, hi := 0, min(ph+2*pl.halo, fftRows)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if slabBytes(mid) <= pl.budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	core := lo - 2*pl.halo
	if core < 1 {
		one := 1 + 2*pl.halo
		return pl, fmt.Errorf("%w: decon of %dx%dx%d (x,y,z), padded %dx%dx%d (%d planes computed): the resident form needs %s of device memory; "+
			"streamed by y-slabs, one slab of %d rows (1 + 2x%d halo) needs %s; the budget is %s (decon.memory_budget_mb / --gpu-mem-cap, or the free memory less a margin)",
			ErrOutOfMemory, w, h, n, pw, ph, g.PN, pn, fmtBytes(pl.resident), one, pl.halo, fmtBytes(slabBytes(one)), fmtBytes(pl.budget))
	}
	if p.ChunkRows > 0 {
		core = min(core, p.ChunkRows)
	}
	pl.streamed = true
	pl.rows = min(core, ph)
	pl.slab = slabBytes(min(ph, pl.rows) + 2*pl.halo)
	return pl, nil
}

// deconHostStreamed plans a host-form call; when the plan is streamed it
// runs it (done = true) and returns the float32 result or, with gray16, the
// uint16 planes.
func (e *Engine) deconHostStreamed(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params, gray16 bool) (*raster.Stack, []*raster.Gray16, decon.Stats, bool, error) {
	if in == nil || in.N < 1 || in.H < 1 || in.W < 1 || len(in.Pix) != in.N*in.H*in.W {
		return nil, nil, decon.Stats{}, true, fmt.Errorf("%w: stack missing or of inconsistent size", decon.ErrInput)
	}
	var pl deconPlan
	err := e.do(ctx, "decon plan", func() error {
		var err error
		pl, err = e.deconMakePlan(in.N, in.H, in.W, k, p, false)
		return err
	})
	if err != nil {
		return nil, nil, decon.Stats{}, true, err
	}
	if !pl.streamed {
		return nil, nil, decon.Stats{}, false, nil
	}
	var out *raster.Stack
	var pages []*raster.Gray16
	var st decon.Stats
	err = e.do(ctx, "decon streamed", func() error {
		var err error
		out, pages, st, err = e.deconStreamed(ctx, in, k, p, pl, gray16)
		return err
	})
	return out, pages, st, true, err
}

// deconSet is one slab's device buffers (two sets alternate so that the
// copies of one slab overlap the computation of the other).
type deconSet struct {
	o, c, xp, y, a, b, gc, gp cu.DevicePtr
	evUp, evComp, evDown      event
}

// deconStreamed runs the streamed form on the engine goroutine: the padded
// observation and the iterates (3 arrays for RL, 6 for Biggs-Andrews) live
// in pinned host memory; every iteration each y-slab (core rows plus halo)
// is copied in on one stream, updated on the compute stream and its core
// rows copied out on a third, two slabs in flight; the stop rule's and α's
// sums accumulate over the slabs' cores on the device. The percentiles and
// the rescale stream the final iterate's cropped rows the same way.
func (e *Engine) deconStreamed(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params, pl deconPlan, gray16 bool) (*raster.Stack, []*raster.Gray16, decon.Stats, error) {
	g := pl.g
	pn, bn, ph, pw := pl.pn, pl.bn, g.PH, g.PW
	biggs := p.Biggs()
	st := decon.Stats{Padded: [3]int{g.PN, g.PH, g.PW}, Streamed: true, Phases: map[string]float64{}}
	t0 := time.Now()
	phase := func(name string) { st.Phases[name] = time.Since(t0).Seconds(); t0 = time.Now() }

	// Input checks and raw max on the host (parallel over planes).
	maxs := make([]float32, in.N)
	bads := make([]int64, in.N)
	parallelFor(in.N, func(z int) {
		var mx float32
		var bad int64
		for _, v := range in.Plane(z) {
			if !(v >= 0) || math.IsInf(float64(v), 0) {
				bad++
			} else {
				mx = max(mx, v)
			}
		}
		maxs[z], bads[z] = mx, bad
	})
	var bad int64
	for z := range maxs {
		st.RawMax = math.Max(st.RawMax, float64(maxs[z]))
		bad += bads[z]
	}
	if bad != 0 {
		return nil, nil, st, fmt.Errorf("%w: %d values negative, NaN or infinite (want counts >= 0)", decon.ErrInput, bad)
	}
	if st.RawMax == 0 {
		return nil, nil, st, fmt.Errorf("%w: the stack is all zero", decon.ErrInput)
	}

	// Pinned host arrays: obs, three iterates (two for RL), G and G_prev.
	m := int64(pn) * int64(ph) * int64(pw)
	nHost := 3
	if biggs {
		nHost = 6
	}
	host := make([]unsafe.Pointer, 0, nHost)
	defer func() {
		for _, h := range host {
			cu.MemFreeHost(h)
		}
	}()
	for i := 0; i < nHost; i++ {
		prev := e.op
		e.op = fmt.Sprintf("pinned host memory %s (%d arrays of %dx%dx%d float32)", fmtBytes(m*4), nHost, pw, ph, pn)
		host = append(host, cu.MemAllocHost(m*4))
		e.op = prev
	}
	phase("pin")
	f32 := func(ptr unsafe.Pointer) []float32 { return unsafe.Slice((*float32)(ptr), m) }
	hobs := host[0]
	obs := f32(hobs)
	xs := make([]int, pw)
	for x := range xs {
		xs[x] = decon.Mirror(x-g.BW, g.W)
	}
	parallelFor(pn, func(z int) {
		sz := decon.Mirror(z-bn, g.N)
		for y := 0; y < ph; y++ {
			src := in.Pix[(sz*g.H+decon.Mirror(y-g.BH, g.H))*g.W:][:g.W]
			dst := obs[(int64(z)*int64(ph)+int64(y))*int64(pw):][:pw]
			for x, sx := range xs {
				dst[x] = src[sx]
			}
		}
	})
	phase("pad")
	iters := host[1:3] // RL: two iterate buffers besides obs
	var hg, hgp unsafe.Pointer
	if biggs {
		iters = host[1:4]
		hg, hgp = host[4], host[5]
	}

	var ar devArena
	ar.e = e
	defer ar.free()
	wins := decon.PlanWindows(ph, pl.rows, pl.halo)
	st.Chunks = len(wins)
	maxWH, maxCore := 0, 0
	for _, wn := range wins {
		maxWH = max(maxWH, wn.Hi-wn.Lo)
		maxCore = max(maxCore, wn.Core1-wn.Core0)
	}
	kd := ar.bytes(int64(len(k.Data)) * 4)
	put(e, kd, k.Data)
	kfd := ar.bytes(int64(len(k.Data)) * 4)
	put(e, kfd, k.Flipped().Data)
	R := decon.DampingKernel()
	rd := ar.bytes(27 * 4)
	put(e, rd, R.Data)
	wd := ar.bytes(int64(len(pl.w)) * 8)
	put(e, wd, pl.w)
	sums := ar.bytes(3 * 8)
	lmB := int64(pn) * int64(maxWH) * int64(pw) * 4
	var sets [2]deconSet
	for i := range sets {
		s := &sets[i]
		s.o, s.c, s.a, s.b = ar.bytes(lmB), ar.bytes(lmB), ar.bytes(lmB), ar.bytes(lmB)
		if biggs {
			s.xp, s.y = ar.bytes(lmB), ar.bytes(lmB)
			s.gc, s.gp = ar.bytes(lmB), ar.bytes(lmB)
		}
	}
	cvs := &deconConvs{e: e, k: k, kd: kd, kfd: kfd}
	if pl.fft {
		f, err := e.newDeconFFT(&ar, pn, maxWH, pw, k, kd, kfd)
		if err != nil {
			return nil, nil, st, err
		}
		defer f.destroy()
		cvs.fft = f
	}

	// Streams and events (destroyed after everything queued has finished,
	// before the arena's buffers go back to the pool).
	up, down := cu.StreamCreate(), cu.StreamCreate()
	for i := range sets {
		s := &sets[i]
		s.evUp, s.evComp, s.evDown = eventCreate(), eventCreate(), eventCreate()
		for _, ev := range []event{s.evUp, s.evComp, s.evDown} {
			ev.record(e.compute)
		}
	}
	defer func() {
		func() {
			defer func() { _ = recover() }()
			up.Synchronize()
			down.Synchronize()
			e.compute.Synchronize()
		}()
		for i := range sets {
			for _, ev := range []event{sets[i].evUp, sets[i].evComp, sets[i].evDown} {
				func() { defer func() { _ = recover() }(); ev.destroy() }()
			}
		}
		func() { defer func() { _ = recover() }(); up.Destroy() }()
		func() { defer func() { _ = recover() }(); down.Destroy() }()
	}()

	// rowsIn copies rows [r0, r1) of planes [z0, z0+nz) of a host (pn, ph, pw)
	// array into dst (nz, r1-r0, pw) on stream s; rowsOut the reverse, from
	// rows [o0, o0+(r1-r0)) of a (nz, srcRows, pw) device array.
	rowsIn := func(dst cu.DevicePtr, hostArr unsafe.Pointer, z0, nz, r0, r1 int, s cu.Stream) {
		rb := int64(r1-r0) * int64(pw) * 4
		for z := 0; z < nz; z++ {
			src := unsafe.Add(hostArr, ((int64(z0+z)*int64(ph))+int64(r0))*int64(pw)*4)
			cu.MemcpyHtoDAsync(dst+cu.DevicePtr(int64(z)*rb), src, rb, s)
		}
	}
	rowsOut := func(hostArr unsafe.Pointer, src cu.DevicePtr, srcRows, o0, r0, r1 int, s cu.Stream) {
		rb := int64(r1-r0) * int64(pw) * 4
		for z := 0; z < pn; z++ {
			dst := unsafe.Add(hostArr, ((int64(z)*int64(ph))+int64(r0))*int64(pw)*4)
			cu.MemcpyDtoHAsync(dst, src+cu.DevicePtr((int64(z)*int64(srcRows)+int64(o0))*int64(pw)*4), rb, s)
		}
	}

	oml, lam := float32(1)-float32(p.Damping), float32(p.Damping)
	stop := decon.Stopper{Criterion: p.StopCriterion, IgnoreGrowth: biggs}
	var alpha float64
	hx, hxprev := hobs, unsafe.Pointer(nil)
	for it := 0; it < p.Iterations; it++ {
		if err := checkCtx(ctx); err != nil {
			return nil, nil, st, err
		}
		var hxnew unsafe.Pointer
		for _, b := range iters {
			if b != hx && b != hxprev {
				hxnew = b
				break
			}
		}
		cu.MemsetD8Async(sums, 0, 24, e.compute)
		upload := func(i int) {
			wn, s := wins[i], &sets[i%2]
			streamWait(up, s.evComp)
			rowsIn(s.o, hobs, 0, pn, wn.Lo, wn.Hi, up)
			rowsIn(s.c, hx, 0, pn, wn.Lo, wn.Hi, up)
			if biggs && it >= 2 {
				rowsIn(s.xp, hxprev, 0, pn, wn.Lo, wn.Hi, up)
			}
			if biggs && it >= 1 {
				rowsIn(s.gp, hgp, 0, pn, wn.Core0, wn.Core1, up)
			}
			s.evUp.record(up)
		}
		upload(0)
		for i, wn := range wins {
			if i+1 < len(wins) {
				upload(i + 1)
			}
			s := &sets[i%2]
			wh, core := wn.Hi-wn.Lo, wn.Core1-wn.Core0
			lm := int64(pn) * int64(wh) * int64(pw)
			streamWait(e.compute, s.evUp)
			streamWait(e.compute, s.evDown)
			y := s.c
			if biggs && it >= 2 {
				y = s.y
				e.launchDeconPredict(grid1(lm), y, s.c, s.xp, float32(alpha), lm)
			}
			cvs.conv(false, s.b, y, pn, wh, pw, 1, s.o, 0, 0)
			if p.Damping > 0 {
				cvs.conv(true, s.a, s.b, pn, wh, pw, 0, 0, 0, 0)
				e.deconConv(s.b, y, rd, R, pn, wh, pw, 0, 0, 0, 0)
				e.launchDeconDamp(grid1(lm), s.a, y, s.b, oml, lam, lm)
			} else {
				cvs.conv(true, s.a, s.b, pn, wh, pw, 2, y, 0, 0)
			}
			var gc, gp cu.DevicePtr
			if biggs {
				gc = s.gc
				if it >= 1 {
					gp = s.gp
				}
			}
			// G and G_prev in the slab's core layout (pn, core, pw): ph = core, c0 = 0, lo = Lo - Core0
			e.launchDeconSums(grid1(int64(pn)*int64(core)*int64(pw)), s.c, s.a, y, gc, gp, wd,
				pn, core, pw, wn.Lo-wn.Core0, wh, 0, core, sums)
			s.evComp.record(e.compute)
			streamWait(down, s.evComp)
			rowsOut(hxnew, s.a, wh, wn.Core0-wn.Lo, wn.Core0, wn.Core1, down)
			if biggs {
				rowsOut(hg, s.gc, core, 0, wn.Core0, wn.Core1, down)
			}
			s.evDown.record(down)
		}
		var sv [3]float64
		get(e, sv[:], sums)
		down.Synchronize() // the new iterate is in host memory before the next iteration reads it
		rel, done := stop.Step(math.Sqrt(sv[0]))
		st.DeltaRel = append(st.DeltaRel, rel)
		st.Iterations = it + 1
		if biggs {
			if it >= 1 {
				alpha = decon.BiggsAlpha(sv[1], sv[2])
			}
			hxprev, hx = hx, hxnew
			hg, hgp = hgp, hg
		} else {
			hx = hxnew
		}
		if done {
			st.Stopped = true
			break
		}
	}

	phase("iterate")
	// Finish: the cropped rows of the final iterate, slab by slab (planes
	// [bn, bn+N), rows [max(Core0, BH), min(Core1, BH+H)), full padded width).
	type crop struct{ r0, r1 int }
	var crops []crop
	for _, wn := range wins {
		if r0, r1 := max(wn.Core0, g.BH), min(wn.Core1, g.BH+g.H); r0 < r1 {
			crops = append(crops, crop{r0, r1})
		}
	}
	cropPass := func(fn func(s *deconSet, c crop)) {
		upc := func(i int) {
			s := &sets[i%2]
			streamWait(up, s.evComp)
			rowsIn(s.o, hx, bn, g.N, crops[i].r0, crops[i].r1, up)
			s.evUp.record(up)
		}
		upc(0)
		for i, c := range crops {
			if i+1 < len(crops) {
				upc(i + 1)
			}
			s := &sets[i%2]
			streamWait(e.compute, s.evUp)
			fn(s, c)
			s.evComp.record(e.compute)
		}
	}
	n := int64(g.N) * int64(g.H) * int64(g.W)
	if !p.NoScale {
		st.Lo, st.Hi = e.deconSelect(n, func(bins cu.DevicePtr, shift, mask, all, mshift int, match uint32) {
			cropPass(func(s *deconSet, c crop) {
				hs := c.r1 - c.r0
				ns := int64(g.N) * int64(hs) * int64(g.W)
				e.launchDeconHist(grid1(ns), bins, s.o, ns, hs, g.W, hs, pw, 0, 0, g.BW, shift, mask, all, mshift, match)
			})
		}, p.HistClip, 100-p.HistClip)
	}
	scale := 1
	if p.NoScale {
		scale = 0
	}
	var out *raster.Stack
	var pages []*raster.Gray16
	if gray16 {
		pages = make([]*raster.Gray16, g.N)
		for z := range pages {
			pages[z] = raster.NewGray16(g.W, g.H)
		}
	} else {
		out = raster.NewStack(g.N, g.H, g.W)
	}
	cropPass(func(s *deconSet, c crop) {
		hs := c.r1 - c.r0
		ns := int64(g.N) * int64(hs) * int64(g.W)
		e.launchDeconScale(grid1(ns), s.a, s.o, ns, hs, g.W, hs, pw, 0, 0, g.BW, scale, st.Lo, st.Hi, st.RawMax)
		y0 := c.r0 - g.BH
		segs := make([]hostSeg, g.N)
		if gray16 {
			e.launchDeconQuantize(grid1(ns), s.b, s.a, ns)
			for z, pg := range pages {
				segs[z] = hostSeg{host: unsafe.Pointer(&pg.Pix[y0*g.W]), dev: s.b + cu.DevicePtr(int64(z)*int64(hs)*int64(g.W)*2), n: int64(hs) * int64(g.W) * 2}
			}
		} else {
			for z := 0; z < g.N; z++ {
				segs[z] = hostSeg{host: unsafe.Pointer(&out.Pix[(z*g.H+y0)*g.W]), dev: s.a + cu.DevicePtr(int64(z)*int64(hs)*int64(g.W)*4), n: int64(hs) * int64(g.W) * 4}
			}
		}
		e.download(segs)
	})
	e.sync()
	phase("finish")
	return out, pages, st, nil
}
