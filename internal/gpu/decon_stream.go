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
// with the epilogue out (convOut; modes 3 and 4, the fused update and stop-rule
// sum, only on the direct kernels of a compile-time width).
func (c *deconConvs) conv(flipped bool, dst, src cu.DevicePtr, nz, ny, nx int, out convOut) {
	if c.fft != nil {
		if out.mode >= 3 {
			panic("gpu: decon: fused sums need the direct convolution")
		}
		c.e.deconFFTConv(c.fft, flipped, dst, src, nz, ny, nx, out.mode, out.aux)
		return
	}
	kd := c.kd
	if flipped {
		kd = c.kfd
	}
	c.e.deconConv(dst, src, kd, c.k, nz, ny, nx, out)
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
	pl := deconPlan{g: g, halo: p.HaloRows(k), fft: deconUseFFT(k)}
	// Planes computed: all padded planes, or only the real ones weighted by
	// their multiplicity when the PSF is one plane deep and undamped (the
	// TV term of RL-TV is per plane, so it keeps the planes independent).
	pl.pn, pl.bn = g.PN, g.BN
	pl.w = make([]float64, g.PN)
	if k.NZ == 1 && p.Damping == 0 {
		pl.pn, pl.bn = g.N, 0
		pl.w = make([]float64, g.N)
		for z := 0; z < g.PN; z++ {
			if p.Free() { // the stop rule sums over the observed planes, once each
				pl.w[raster.Mirror(z-g.BN, g.N)] = 1
				continue
			}
			pl.w[raster.Mirror(z-g.BN, g.N)]++
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
	st := decon.Stats{Padded: [3]int{g.PN, g.PH, g.PW}, Streamed: true, Phases: map[string]float64{}}
	t0 := time.Now()
	phase := func(name string) { st.Phases[name] = time.Since(t0).Seconds(); t0 = time.Now() }

	var err error
	if st.RawMax, err = deconHostMax(in); err != nil {
		return nil, nil, st, err
	}
	d := &deconStream{deconCommon: newDeconCommon(e, k, p, pl)}
	d.tvEps2 = decon.TVEps2(st.RawMax)
	defer d.freeHost()
	d.pinHost()
	phase("pin")
	d.pad(in)
	phase("pad")

	ar := devArena{e: e}
	defer ar.free()
	st.Chunks = len(d.wins)
	if err := d.allocate(&ar); err != nil {
		return nil, nil, st, err
	}
	if d.cvs.fft != nil {
		defer d.cvs.fft.destroy()
	}
	d.startStreams()
	defer d.stopStreams()

	hx, err := d.iterate(ctx, &st)
	if err != nil {
		return nil, nil, st, err
	}
	phase("iterate")
	out, pages := d.finish(hx, &st, gray16)
	phase("finish")
	return out, pages, st, nil
}

// deconHostMax checks the input on the host (parallel over planes) and
// returns its largest value (counts).
func deconHostMax(in *raster.Stack) (float64, error) {
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
	var rawMax float64
	var bad int64
	for z := range maxs {
		rawMax = math.Max(rawMax, float64(maxs[z]))
		bad += bads[z]
	}
	if bad != 0 {
		return rawMax, fmt.Errorf("%w: %d values negative, NaN or infinite (want counts >= 0)", decon.ErrInput, bad)
	}
	if rawMax == 0 {
		return rawMax, fmt.Errorf("%w: the stack is all zero", decon.ErrInput)
	}
	return rawMax, nil
}

// deconStream is the state of one streamed deconvolution (deconStreamed):
// the iterates in pinned host memory (host arrays are padded (pn, ph, pw)
// float32 like the device's), two buffer sets of the tallest window.
type deconStream struct {
	deconCommon
	host    []unsafe.Pointer // every pinned array (freeHost frees them)
	hobs    unsafe.Pointer   // the padded observation
	iters   []unsafe.Pointer // the iterate arrays: 2 (RL) or 3 (Biggs-Andrews)
	hg, hgp unsafe.Pointer   // G and G_prev (Biggs-Andrews)

	sets     [2]deconSet
	up, down cu.Stream // the copy streams (in, out)
}

// pinHost allocates the pinned host arrays: obs, three iterates (two for
// RL), G and G_prev.
func (d *deconStream) pinHost() {
	e := d.e
	m := int64(d.pn) * int64(d.ph) * int64(d.pw)
	nHost := 3
	if d.biggs {
		nHost = 6
	}
	d.host = make([]unsafe.Pointer, 0, nHost)
	for i := 0; i < nHost; i++ {
		prev := e.op
		e.op = fmt.Sprintf("pinned host memory %s (%d arrays of %dx%dx%d float32)", fmtBytes(m*4), nHost, d.pw, d.ph, d.pn)
		d.host = append(d.host, cu.MemAllocHost(m*4))
		e.op = prev
	}
	d.hobs = d.host[0]
	d.iters = d.host[1:3] // RL: two iterate buffers besides obs
	if d.biggs {
		d.iters = d.host[1:4]
		d.hg, d.hgp = d.host[4], d.host[5]
	}
}

func (d *deconStream) freeHost() {
	for _, h := range d.host {
		cu.MemFreeHost(h)
	}
}

// pad writes the mirror-padded input into the pinned observation: plane z
// of it is input plane Mirror(z-bn), rows and columns mirrored likewise.
// With the free boundary the mirrored stack goes into the last iterate
// buffer (the first iterate) and the observation keeps only the observed
// voxels (0 elsewhere).
func (d *deconStream) pad(in *raster.Stack) {
	g, pn, bn, ph, pw := d.g, d.pn, d.bn, d.ph, d.pw
	obs := unsafe.Slice((*float32)(d.hobs), int64(pn)*int64(ph)*int64(pw))
	xs := make([]int, pw)
	for x := range xs {
		xs[x] = raster.Mirror(x-g.BW, g.W)
	}
	var x0 []float32
	if d.free { // the iterate starts from the mirrored stack, the data are the observed voxels
		x0 = unsafe.Slice((*float32)(d.iters[len(d.iters)-1]), int64(pn)*int64(ph)*int64(pw))
	}
	b := d.box
	parallelFor(pn, func(z int) {
		sz := raster.Mirror(z-bn, g.N)
		for y := 0; y < ph; y++ {
			src := in.Pix[(sz*g.H+raster.Mirror(y-g.BH, g.H))*g.W:][:g.W]
			dst := obs[(int64(z)*int64(ph)+int64(y))*int64(pw):][:pw]
			for x, sx := range xs {
				dst[x] = src[sx]
			}
			if x0 == nil {
				continue
			}
			copy(x0[(int64(z)*int64(ph)+int64(y))*int64(pw):][:pw], dst)
			if z < b.Z0 || z >= b.Z1 || y < b.Y0 || y >= b.Y1 {
				clear(dst)
				continue
			}
			clear(dst[:b.X0])
			clear(dst[b.X1:])
		}
	})
}

// allocate uploads the constants and allocates the two slab buffer sets
// for the tallest window and the convolutions.
func (d *deconStream) allocate(ar *devArena) error {
	pn, pw := d.pn, d.pw
	maxWH := 0
	for _, wn := range d.wins {
		maxWH = max(maxWH, wn.Hi-wn.Lo)
	}
	d.uploadConsts(ar)
	lmB := int64(pn) * int64(maxWH) * int64(pw) * 4
	for i := range d.sets {
		s := &d.sets[i]
		s.o, s.c, s.a, s.b = ar.bytes(lmB), ar.bytes(lmB), ar.bytes(lmB), ar.bytes(lmB)
		if d.biggs {
			s.xp, s.y = ar.bytes(lmB), ar.bytes(lmB)
			s.gc, s.gp = ar.bytes(lmB), ar.bytes(lmB)
		}
	}
	return d.makeConvs(ar, maxWH)
}

// startStreams creates the copy streams and each set's events, recorded
// once on the compute stream so that the first waits on them pass.
func (d *deconStream) startStreams() {
	d.up, d.down = cu.StreamCreate(), cu.StreamCreate()
	for i := range d.sets {
		s := &d.sets[i]
		s.evUp, s.evComp, s.evDown = eventCreate(), eventCreate(), eventCreate()
		for _, ev := range []event{s.evUp, s.evComp, s.evDown} {
			ev.record(d.e.compute)
		}
	}
}

// stopStreams destroys the streams and events after everything queued has
// finished (before the arena's buffers go back to the pool); after a CUDA
// failure it goes on through every step.
func (d *deconStream) stopStreams() {
	func() {
		defer func() { _ = recover() }()
		d.up.Synchronize()
		d.down.Synchronize()
		d.e.compute.Synchronize()
	}()
	for i := range d.sets {
		for _, ev := range []event{d.sets[i].evUp, d.sets[i].evComp, d.sets[i].evDown} {
			func() { defer func() { _ = recover() }(); ev.destroy() }()
		}
	}
	func() { defer func() { _ = recover() }(); d.up.Destroy() }()
	func() { defer func() { _ = recover() }(); d.down.Destroy() }()
}

// rowsIn copies rows [r0, r1) of planes [z0, z0+nz) of a host (pn, ph, pw)
// array into dst (nz, r1-r0, pw) on stream s.
func (d *deconStream) rowsIn(dst cu.DevicePtr, hostArr unsafe.Pointer, z0, nz, r0, r1 int, s cu.Stream) {
	ph, pw := d.ph, d.pw
	rb := int64(r1-r0) * int64(pw) * 4
	for z := 0; z < nz; z++ {
		src := unsafe.Add(hostArr, ((int64(z0+z)*int64(ph))+int64(r0))*int64(pw)*4)
		cu.MemcpyHtoDAsync(dst+cu.DevicePtr(int64(z)*rb), src, rb, s)
	}
}

// rowsOut copies rows [o0, o0+(r1-r0)) of every plane of a (pn, srcRows, pw)
// device array into rows [r0, r1) of a host (pn, ph, pw) array on stream s.
func (d *deconStream) rowsOut(hostArr unsafe.Pointer, src cu.DevicePtr, srcRows, o0, r0, r1 int, s cu.Stream) {
	ph, pw := d.ph, d.pw
	rb := int64(r1-r0) * int64(pw) * 4
	for z := 0; z < d.pn; z++ {
		dst := unsafe.Add(hostArr, ((int64(z)*int64(ph))+int64(r0))*int64(pw)*4)
		cu.MemcpyDtoHAsync(dst, src+cu.DevicePtr((int64(z)*int64(srcRows)+int64(o0))*int64(pw)*4), rb, s)
	}
}

// iterate runs the iterations (p.Iterations, or fewer when the stop rule
// ends them), recording the stop rule's figures in st, and returns the host
// array that holds the final iterate.
func (d *deconStream) iterate(ctx context.Context, st *decon.Stats) (unsafe.Pointer, error) {
	p, biggs := d.p, d.biggs
	stop := decon.Stopper{Criterion: p.StopCriterion, IgnoreGrowth: biggs}
	var alpha float64
	hx, hxprev := d.hobs, unsafe.Pointer(nil)
	if d.free {
		hx = d.iters[len(d.iters)-1] // the mirrored stack (pad)
	}
	for it := 0; it < p.Iterations; it++ {
		if err := checkCtx(ctx); err != nil {
			return nil, err
		}
		var hxnew unsafe.Pointer
		for _, b := range d.iters {
			if b != hx && b != hxprev {
				hxnew = b
				break
			}
		}
		sv := d.iteration(it, hx, hxprev, hxnew, alpha)
		rel, done := stop.Step(math.Sqrt(sv[0]))
		st.DeltaRel = append(st.DeltaRel, rel)
		st.Iterations = it + 1
		if biggs {
			if it >= 1 {
				alpha = decon.BiggsAlpha(sv[1], sv[2])
			}
			hxprev, hx = hx, hxnew
			d.hg, d.hgp = d.hgp, d.hg
		} else {
			hx = hxnew
		}
		if done {
			st.Stopped = true
			break
		}
	}
	return hx, nil
}

// iteration runs iteration it over every slab, two in flight: slab i+1 is
// copied in on the up stream while slab i is updated on the compute stream,
// and each slab's core rows are copied out on the down stream into hxnew.
// It returns the stop rule's and α's sums over the cores, once the new
// iterate is in host memory (the next iteration reads it).
func (d *deconStream) iteration(it int, hx, hxprev, hxnew unsafe.Pointer, alpha float64) [3]float64 {
	cu.MemsetD8Async(d.sums, 0, 24, d.e.compute)
	d.uploadSlab(0, it, hx, hxprev)
	for i := range d.wins {
		if i+1 < len(d.wins) {
			d.uploadSlab(i+1, it, hx, hxprev)
		}
		d.updateSlab(i, it, alpha)
		d.downloadSlab(i, hxnew)
	}
	var sv [3]float64
	get(d.e, sv[:], d.sums)
	d.down.Synchronize()
	return sv
}

// uploadSlab copies window i's rows of the observation and the iterate
// (and, for Biggs-Andrews, of the previous iterate and G_prev's core) into
// its buffer set, once the set's previous update has finished.
func (d *deconStream) uploadSlab(i, it int, hx, hxprev unsafe.Pointer) {
	wn, s := d.wins[i], &d.sets[i%2]
	pn, up := d.pn, d.up
	streamWait(up, s.evComp)
	d.rowsIn(s.o, d.hobs, 0, pn, wn.Lo, wn.Hi, up)
	d.rowsIn(s.c, hx, 0, pn, wn.Lo, wn.Hi, up)
	if d.biggs && it >= 2 {
		d.rowsIn(s.xp, hxprev, 0, pn, wn.Lo, wn.Hi, up)
	}
	if d.biggs && it >= 1 {
		d.rowsIn(s.gp, d.hgp, 0, pn, wn.Core0, wn.Core1, up)
	}
	s.evUp.record(up)
}

// updateSlab updates window i on the compute stream: the Biggs-Andrews
// prediction, the RL (and damping) update into s.a and the sums over the
// core.
func (d *deconStream) updateSlab(i, it int, alpha float64) {
	e, p, pn, pw := d.e, d.p, d.pn, d.pw
	wn, s := d.wins[i], &d.sets[i%2]
	wh, core := wn.Hi-wn.Lo, wn.Core1-wn.Core0
	lm := int64(pn) * int64(wh) * int64(pw)
	streamWait(e.compute, s.evUp)
	streamWait(e.compute, s.evDown)
	y := s.c
	if d.biggs && it >= 2 {
		y = s.y
		e.launchDeconPredict(grid1(lm), y, s.c, s.xp, float32(alpha), lm)
	}
	d.cvs.conv(false, s.b, y, pn, wh, pw, convOut{mode: 1, aux: s.o})
	if d.tv > 0 || d.free {
		d.tvUpdate(s.a, s.b, y, pn, wh, pw, wn.Lo)
	} else if p.Damping > 0 {
		oml, lam := float32(1)-float32(p.Damping), float32(p.Damping)
		d.cvs.conv(true, s.a, s.b, pn, wh, pw, convOut{})
		e.deconConv(s.b, y, d.rd, d.R, pn, wh, pw, convOut{})
		e.launchDeconDamp(grid1(lm), s.a, y, s.b, oml, lam, lm)
	} else {
		d.cvs.conv(true, s.a, s.b, pn, wh, pw, convOut{mode: 2, aux: y})
	}
	var gc, gp cu.DevicePtr
	if d.biggs {
		gc = s.gc
		if it >= 1 {
			gp = s.gp
		}
	}
	// G and G_prev in the slab's core layout (pn, core, pw): ph = core, c0 = 0, lo = Lo - Core0
	d.launchSums(s.c, s.a, y, gc, gp, core, wn.Lo-wn.Core0, wh, 0, core, wn.Core0)
	s.evComp.record(e.compute)
}

// downloadSlab copies window i's updated core rows (and G's) into hxnew
// (and hg) on the down stream, after its update.
func (d *deconStream) downloadSlab(i int, hxnew unsafe.Pointer) {
	wn, s := d.wins[i], &d.sets[i%2]
	wh, core := wn.Hi-wn.Lo, wn.Core1-wn.Core0
	streamWait(d.down, s.evComp)
	d.rowsOut(hxnew, s.a, wh, wn.Core0-wn.Lo, wn.Core0, wn.Core1, d.down)
	if d.biggs {
		d.rowsOut(d.hg, s.gc, core, 0, wn.Core0, wn.Core1, d.down)
	}
	s.evDown.record(d.down)
}

// deconCrop is the rows [r0, r1) of a window's core inside the unpadded
// image (padded row numbers).
type deconCrop struct{ r0, r1 int }

// cropPass runs fn on the compute stream for each crop, with the crop's
// rows of planes [bn, bn+N) of hx copied into the set's o on the up stream,
// one crop ahead.
func (d *deconStream) cropPass(hx unsafe.Pointer, crops []deconCrop, fn func(s *deconSet, c deconCrop)) {
	upc := func(i int) {
		s := &d.sets[i%2]
		streamWait(d.up, s.evComp)
		d.rowsIn(s.o, hx, d.bn, d.g.N, crops[i].r0, crops[i].r1, d.up)
		s.evUp.record(d.up)
	}
	upc(0)
	for i, c := range crops {
		if i+1 < len(crops) {
			upc(i + 1)
		}
		s := &d.sets[i%2]
		streamWait(d.e.compute, s.evUp)
		fn(s, c)
		s.evComp.record(d.e.compute)
	}
}

// finish reads the cropped rows of the final iterate hx slab by slab
// (planes [bn, bn+N), rows [max(Core0, BH), min(Core1, BH+H)), full padded
// width): the percentiles into st (unless p.NoScale), then the rescale
// (and, with gray16, the quantisation to uint16 pages) into the result.
func (d *deconStream) finish(hx unsafe.Pointer, st *decon.Stats, gray16 bool) (*raster.Stack, []*raster.Gray16) {
	e, g, p, pw := d.e, d.g, d.p, d.pw
	var crops []deconCrop
	for _, wn := range d.wins {
		if r0, r1 := max(wn.Core0, g.BH), min(wn.Core1, g.BH+g.H); r0 < r1 {
			crops = append(crops, deconCrop{r0, r1})
		}
	}
	n := int64(g.N) * int64(g.H) * int64(g.W)
	if !p.NoScale {
		st.Lo, st.Hi = e.deconSelect(n, func(bins cu.DevicePtr, shift, mask, all, mshift int, match uint32) {
			d.cropPass(hx, crops, func(s *deconSet, c deconCrop) {
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
	d.cropPass(hx, crops, func(s *deconSet, c deconCrop) {
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
	return out, pages
}
