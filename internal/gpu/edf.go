//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// EDF implements edf.Fuser on the GPU. Variance method: the planes are
// uploaded once as a uint16 stack, the quality gate counts run on the
// device, then the selected slices are filtered one at a time (Gaussian y
// and x passes, window variance, running argmax into a float64 best and a
// uint16 index plane), so device memory is the uint16 stack plus five
// plane-sized buffers (about 2 x 4 + 8 + 2 x 2 + 2 bytes per pixel), never a
// float copy of the stack. Index maps equal edf.CPU's exactly (same
// arithmetic, kernels/edf.cu). Wavelet method: edfWaveletDev, equal to
// the CPU's likewise (index map exact, output within 1 count).
//
// Measured on one H200 (gpubench -stage edf, 20 x 7493 x 12676 uint16 per
// channel, variance, the original's parameters): quality gate 0.001 s,
// processing 0.269 s per channel (the original: 4.4 + 7.8 s), upload
// 0.14 s (27 GB/s), download 0.014 s, peak device memory 6.0 GiB; the
// wavelet method (5 levels) 0.31 s processing, 10.6 GiB peak. On a
// 384 x 384 crop both methods' index maps equal the CPU's at every pixel.
func (e *Engine) EDF(ctx context.Context, planes []*raster.Gray16, g edf.Gate, p edf.Params) (*edf.Result, error) {
	res, _, err := e.EDFTimed(ctx, planes, g, p, false)
	return res, err
}

// EDFTimings are the phases of one EDFTimed call, seconds (with sync after
// each phase when measured).
type EDFTimings struct {
	Upload   float64 // host planes -> device stack
	Gate     float64 // quality-gate counts on the device
	Fuse     float64 // filters, argmax, smoothing, gather
	Download float64 // output plane and index map -> host
}

// EDFTimed is EDF with per-phase timings; measure synchronises the device
// between phases (for benchmarks).
func (e *Engine) EDFTimed(ctx context.Context, planes []*raster.Gray16, g edf.Gate, p edf.Params, measure bool) (*edf.Result, EDFTimings, error) {
	var tm EDFTimings
	if err := p.Validate(); err != nil {
		return nil, tm, err
	}
	if err := edf.CheckPlanes(planes); err != nil {
		return nil, tm, err
	}
	w, h, n := planes[0].W, planes[0].H, len(planes)
	plane := int64(w) * int64(h)
	res := &edf.Result{Out: raster.NewGray16(w, h), Index: make([]uint16, w*h)}
	err := e.do(ctx, "edf", func() error {
		mark := time.Now()
		lap := func(dst *float64) {
			if measure {
				e.sync()
			}
			now := time.Now()
			*dst = now.Sub(mark).Seconds()
			mark = now
		}
		stack := e.alloc(int64(n) * plane * 2)
		defer e.release(stack)
		segs := make([]hostSeg, n)
		for i, pl := range planes {
			segs[i] = hostSeg{host: unsafe.Pointer(&pl.Pix[0]), dev: stack + cu.DevicePtr(int64(i)*plane*2), n: plane * 2}
		}
		e.upload(segs)
		lap(&tm.Upload)
		return e.edfStackToHost(ctx, stack, n, h, w, g, p, res, &tm, lap)
	})
	if err != nil {
		return nil, tm, err
	}
	return res, tm, nil
}

// edfStackToHost gates the n planes of a uint16 device stack (n, h, w),
// selects the slices with g, fuses them with p and downloads the output
// plane and the index map into res (allocated by the caller), calling lap
// with tm's slot after the gate, the fusion and the download. Engine
// goroutine only.
func (e *Engine) edfStackToHost(ctx context.Context, stack cu.DevicePtr, n, h, w int, g edf.Gate, p edf.Params, res *edf.Result, tm *EDFTimings, lap func(*float64)) error {
	plane := int64(w) * int64(h)
	res.Stats = e.edfGateDev(stack, false, n, h, w)
	lap(&tm.Gate)
	used, err := edf.Select(res.Stats, g)
	if err != nil {
		return err
	}
	res.Used = used
	out := e.alloc(plane * 2)
	idx := e.alloc(plane * 2)
	defer e.release(out, idx)
	fuse := e.edfFuseDev
	if p.Method == edf.MethodWavelet {
		fuse = e.edfWaveletDev
	}
	if err := fuse(ctx, stack, false, h, w, used, p, out, idx); err != nil {
		return err
	}
	lap(&tm.Fuse)
	e.download([]hostSeg{
		{host: unsafe.Pointer(&res.Out.Pix[0]), dev: out, n: plane * 2},
		{host: unsafe.Pointer(&res.Index[0]), dev: idx, n: plane * 2}})
	lap(&tm.Download)
	return nil
}

// edfGateDev returns the gate counts of the n planes of a device stack
// ((n, h, w), uint16 or float32 counts). Engine goroutine only: the
// device-buffer form for fused jobs.
func (e *Engine) edfGateDev(stack cu.DevicePtr, f32 bool, n, h, w int) []edf.SliceStats {
	plane := int64(w) * int64(h)
	cnt := e.alloc(int64(n) * 16)
	defer e.release(cnt)
	cu.MemsetD8Async(cnt, 0, int64(n)*16, e.compute)
	gx := int(min(1024, (plane+255)/256))
	d := dim{gx: gx, gy: n, gz: 1, bx: 256, by: 1, bz: 1}
	gate := e.launchEdfGateU16
	if f32 {
		gate = e.launchEdfGateF32
	}
	gate(d, cnt, stack, plane, float32(edf.SatLevel))
	host := make([]uint64, 2*n)
	get(e, host, cnt)
	st := make([]edf.SliceStats, n)
	for i := range st {
		st[i] = edf.SliceStats{Pixels: plane, Zeros: int64(host[2*i]), Saturated: int64(host[2*i+1])}
	}
	return st
}

// edfFuseDev fuses the slices used (indices into the device stack (z, h,
// w), uint16 or float32) with the variance method into the device planes
// out (the stack's element type) and outIdx (uint16 stack index per pixel;
// may be 0). Engine goroutine only: the device-buffer form for fused jobs.
func (e *Engine) edfFuseDev(ctx context.Context, stack cu.DevicePtr, f32 bool, h, w int, used []int, p edf.Params, out, outIdx cu.DevicePtr) error {
	plane := int64(w) * int64(h)
	elem := int64(2)
	gather := e.launchEdfGatherU16
	if f32 {
		elem, gather = 4, e.launchEdfGatherF32
	}
	wg := edf.GaussWeights(p.Sigma)
	dw := e.alloc(int64(len(wg)) * 8)
	tmp := e.alloc(plane * 4)
	s := e.alloc(plane * 4)
	best := e.alloc(plane * 8)
	idx := e.alloc(plane * 2)
	dused := e.alloc(int64(len(used)) * 4)
	defer e.release(dw, tmp, s, best, idx, dused)
	put(e, dw, wg)
	u32 := make([]int32, len(used))
	for i, v := range used {
		u32[i] = int32(v)
	}
	put(e, dused, u32)
	for k, z := range used {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		src := stack + cu.DevicePtr(int64(z)*plane*elem)
		e.edfGaussY(f32, tmp, src, h, w, dw, len(wg)-1)
		e.edfGaussX(s, tmp, h, w, dw, len(wg)-1)
		e.edfVarArgmax(best, idx, s, h, w, p.RadiusY, p.RadiusX, k)
	}
	f := cu.DevicePtr(0)
	if p.ZSmoothSigma > 0 {
		zw := edf.GaussWeights(p.ZSmoothSigma)
		dz := e.alloc(int64(len(zw)) * 8)
		defer e.release(dz)
		put(e, dz, zw)
		e.edfGaussY(false, tmp, idx, h, w, dz, len(zw)-1)
		e.edfGaussX(s, tmp, h, w, dz, len(zw)-1)
		f = s
	}
	gather(grid1(plane), out, outIdx, f, idx, stack, dused, len(used), plane)
	return nil
}

// edfTiles chooses the tiled forms of the variance method's passes
// (kernels/edf.cu: each value converted to float64 once per block, in
// shared memory) wherever their tile fits edfTileShmem; false: the
// untiled forms everywhere (the tests compare the two).
var edfTiles = true

// edfTileShmem is the most dynamic shared memory a tiled pass takes
// (bytes): the default limit of a block, which needs no opt-in.
const edfTileShmem = 48 << 10

// The tiled passes' tile sizes (kernels/edf.cu EDF_TY, EDF_TX, EDF_VT).
const (
	edfTileRowsY = 64
	edfTileColsX = 256
	edfTileVar   = 32
)

// edfGaussY is the Gaussian y pass of the h x w plane src (uint16, or
// float32 when f32) into the float32 plane dst, weights dw (R + 1 float64).
func (e *Engine) edfGaussY(f32 bool, dst, src cu.DevicePtr, h, w int, dw cu.DevicePtr, R int) {
	if sh := 8 * (R + 1 + (edfTileRowsY+2*R)*32); edfTiles && sh <= edfTileShmem {
		d := grid32x8(w, h, 32, edfTileRowsY, sh)
		if f32 {
			e.launchEdfGaussYTileF32(d, dst, src, h, w, dw, R)
		} else {
			e.launchEdfGaussYTileU16(d, dst, src, h, w, dw, R)
		}
		return
	}
	if f32 {
		e.launchEdfGaussYF32(grid32x8(w, h, 32, 8, 0), dst, src, h, w, dw, R)
	} else {
		e.launchEdfGaussYU16(grid32x8(w, h, 32, 8, 0), dst, src, h, w, dw, R)
	}
}

// edfGaussX is the Gaussian x pass of the float32 h x w plane src into dst.
func (e *Engine) edfGaussX(dst, src cu.DevicePtr, h, w int, dw cu.DevicePtr, R int) {
	if sh := 8 * (R + 1 + 8*(edfTileColsX+2*R)); edfTiles && sh <= edfTileShmem {
		d := grid32x8(w, h, edfTileColsX, 8, sh)
		e.launchEdfGaussXTile(d, dst, src, h, w, dw, R)
		return
	}
	e.launchEdfGaussX(grid32x8(w, h, 32, 8, 0), dst, src, h, w, dw, R)
}

// edfVarArgmax is the window variance of the float32 h x w plane s (slice
// k of the used) and the running argmax into best and idx.
func (e *Engine) edfVarArgmax(best, idx, s cu.DevicePtr, h, w, ry, rx, k int) {
	if sh := 8 * (edfTileVar + 2*ry) * (edfTileVar + 2*rx); edfTiles && sh <= edfTileShmem {
		d := grid32x8(w, h, edfTileVar, edfTileVar, sh)
		e.launchEdfVarArgmaxTile(d, best, idx, s, h, w, ry, rx, k)
		return
	}
	e.launchEdfVarArgmax(grid32x8(w, h, 32, 8, 0), best, idx, s, h, w, ry, rx, k)
}

// edfWaveletDev is the wavelet method (edf/wavelet.go) on a device stack:
// two passes over the used slices (selection, then synthesis), each slice's
// stationary transform computed in three float32 planes; per level a
// float32 best magnitude and a uint16 selection plane. out is float32 (the
// composite, unrounded) when f32 is set, else uint16 counts (rounded half
// away from zero, clipped); outIdx (may be 0) gets the majority-
// filtered height map as stack indices. Engine goroutine only.
func (e *Engine) edfWaveletDev(ctx context.Context, stack cu.DevicePtr, f32 bool, h, w int, used []int, p edf.Params, out, outIdx cu.DevicePtr) error {
	plane := int64(w) * int64(h)
	L := p.WaveletLevels
	if L == 0 {
		L = edf.AutoLevels(w, h)
	}
	elem, load := int64(2), e.launchEdfWlLoadU16
	if f32 {
		elem, load = 4, e.launchEdfWlLoadF32
	}
	var bufs []cu.DevicePtr
	alloc := func(b int64) cu.DevicePtr { d := e.alloc(b); bufs = append(bufs, d); return d }
	defer func() { e.release(bufs...) }()
	A, B, T := alloc(plane*4), alloc(plane*4), alloc(plane*4)
	bestAbs := alloc(int64(L) * plane * 4)
	sel := alloc(int64(L) * plane * 2)
	energy, bestE, low := alloc(plane*8), alloc(plane*8), alloc(plane*8)
	height, hmaj := alloc(plane*2), alloc(plane*2)
	g1 := grid1(plane)
	g2 := grid32x8(w, h, 32, 8, 0)
	// transform runs slice z's levels, calling fn(l, prev, next) after each.
	transform := func(z int, fn func(l int, prev, next cu.DevicePtr)) cu.DevicePtr {
		prev, next := A, B
		load(g1, prev, stack+cu.DevicePtr(int64(z)*plane*elem), plane)
		for l := 1; l <= L; l++ {
			e.launchEdfWlAtrousY(g2, T, prev, h, w, 1<<(l-1))
			e.launchEdfWlAtrousX(g2, next, T, h, w, 1<<(l-1))
			fn(l, prev, next)
			prev, next = next, prev
		}
		return prev
	}
	for k, z := range used {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		cl := transform(z, func(l int, prev, next cu.DevicePtr) {
			o := int64(l - 1)
			e.launchEdfWlSelect(g1, bestAbs+cu.DevicePtr(o*plane*4), sel+cu.DevicePtr(o*plane*2), energy, prev, next, plane, k, l)
		})
		e.launchEdfWlLow(g1, low, bestE, height, cl, energy, plane, k)
	}
	// Consistency: majority filter, each selection map in place through hmaj.
	for l := 0; l < L; l++ {
		sl := sel + cu.DevicePtr(int64(l)*plane*2)
		e.launchEdfWlMajority(g2, hmaj, sl, h, w)
		cu.MemcpyDtoDAsync(sl, hmaj, plane*2, e.compute)
	}
	e.launchEdfWlMajority(g2, hmaj, height, h, w)
	comp := low // the residual sum becomes the composite
	e.launchEdfWlCompInit(g1, comp, low, plane, 1/float64(len(used)))
	for k, z := range used {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		transform(z, func(l int, prev, next cu.DevicePtr) {
			e.launchEdfWlSynth(g1, comp, sel+cu.DevicePtr(int64(l-1)*plane*2), prev, next, plane, k)
		})
	}
	if f32 {
		e.launchEdfWlOutF32(g1, out, comp, plane)
	} else {
		e.launchEdfWlOutU16(g1, out, comp, plane)
	}
	if outIdx != 0 {
		u32 := make([]int32, len(used))
		for i, v := range used {
			u32[i] = int32(v)
		}
		dused := e.alloc(int64(len(used)) * 4)
		defer e.release(dused)
		put(e, dused, u32)
		// Map the height map to stack indices with the gather kernel's index path (f null).
		e.launchEdfWlMapIndex(g1, outIdx, hmaj, dused, plane)
	}
	return nil
}

// EDFStack is one channel's uint16 z-stack (z, y, x) in device memory,
// filled plane by plane (Put) as the planes are read, so that the host
// holds only the planes in flight, never the whole stack; Fuse then runs
// the quality gate and the fusion on it with the kernels and arithmetic of
// EDF (results bit-identical to EDF on the same planes). It is the stage's
// streamed form (edfstage's memory plan); Free gives the device memory back.
type EDFStack struct {
	e       *Engine
	N, H, W int
	ptr     cu.DevicePtr
}

// NewEDFStack allocates an n x h x w uint16 device stack (contents
// undefined until every plane is Put).
func (e *Engine) NewEDFStack(ctx context.Context, n, h, w int) (*EDFStack, error) {
	if n < 1 || h < 1 || w < 1 || n > math.MaxUint16 {
		return nil, fmt.Errorf("edf: device stack of %dx%dx%d (x,y,z)", w, h, n)
	}
	s := &EDFStack{e: e, N: n, H: h, W: w}
	err := e.do(ctx, "edf alloc stack", func() error {
		s.ptr = e.alloc(int64(n) * int64(h) * int64(w) * 2)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Put copies plane pg (H x W counts) into plane z of the stack. It returns
// when pg may be reused or dropped (the bytes are in the engine's pinned
// staging buffers or on the device). Safe from several goroutines: the
// engine serialises the copies.
func (s *EDFStack) Put(ctx context.Context, z int, pg *raster.Gray16) error {
	if s == nil || s.ptr == 0 || z < 0 || z >= s.N || pg == nil || pg.W != s.W || pg.H != s.H || len(pg.Pix) != s.W*s.H {
		return fmt.Errorf("edf: plane %d does not fit the device stack", z)
	}
	plane := int64(s.W) * int64(s.H)
	return s.e.do(ctx, "edf upload plane", func() error {
		s.e.upload([]hostSeg{{host: unsafe.Pointer(&pg.Pix[0]), dev: s.ptr + cu.DevicePtr(int64(z)*plane*2), n: plane * 2}})
		return nil
	})
}

// Fuse applies the gate to the stack's planes, selects the slices and fuses
// them with p, as EDF does with host planes; the result (output plane,
// index map, gate counts) comes back to the host.
func (s *EDFStack) Fuse(ctx context.Context, g edf.Gate, p edf.Params) (*edf.Result, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if s == nil || s.ptr == 0 {
		return nil, fmt.Errorf("edf: fuse of a freed device stack")
	}
	e := s.e
	w, h, n := s.W, s.H, s.N
	res := &edf.Result{Out: raster.NewGray16(w, h), Index: make([]uint16, w*h)}
	err := e.do(ctx, "edf", func() error {
		var tm EDFTimings
		return e.edfStackToHost(ctx, s.ptr, n, h, w, g, p, res, &tm, func(*float64) {})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Free gives the stack's device memory back to the engine's pool.
func (s *EDFStack) Free() {
	if s != nil {
		s.e.freeDevice("edf free stack", &s.ptr)
	}
}
