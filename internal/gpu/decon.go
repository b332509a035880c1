//go:build cuda

package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Decon is the GPU decon.Deconvolver: the algorithm of decon.CPU (the same
// padding, windows, stop rule, Biggs-Andrews prediction, RL-TV factor,
// free boundary, percentile clip and rescale) with every array on the
// device. Convolutions are direct (kernels/decon.cu: shared-memory tiles,
// 8 outputs along x per thread in one or two rows), summed in the CPU's
// order, one float32 FMA per tap as the CPU's, so each convolution is
// bit-identical to decon.Conv; the float64 sums of the stop rule and α use
// atomics, so their order differs from the CPU's and the stop decision can
// differ only when delta_rel is within rounding of the criterion. Percentiles are exact (a
// radix selection on the float bits). With a one-plane PSF and no damping,
// the mirrored z-padding planes are copies of real planes that evolve
// identically, so only the real planes are computed and weighted by their
// multiplicity in the sums (the same result in 5/6 of the work for 20
// planes). An iteration of Richardson-Lucy without TV or damping, the
// stack in one window, is two passes: conv(y) into the ratio (convOut mode
// 1), then conv(ratio, flip) into the new iterate with the free
// boundary's division by α and the stop rule's sum in the same pass (modes
// 3 and 4), instead of three more passes over the stack (decon_free,
// decon_tv, decon_sums). PSFs too large for the direct kernels'
// shared-memory tile, or with more than deconFFTTaps taps, are convolved
// by cuFFT (decon_fft.go: zero-padded windows, float32 FFT rounding
// instead of bit-identity).
//
// Memory: the iterates stay on the device when they fit the budget
// (decon.Params.MemoryBudget, the whole run's device memory; 0 = the free
// memory less a margin, see deconMakePlan). Otherwise they are held in
// pinned host memory and streamed through the device by y-slabs with halo
// rows every iteration (decon_stream.go), with the same windows semantics as
// decon.CPU's chunking, so the result equals the resident one.
type Decon struct{ e *Engine }

// Deconvolver returns the GPU decon.Deconvolver.
func (e *Engine) Deconvolver() decon.Deconvolver { return &Decon{e: e} }

// DevStack is a float32 (z, y, x) stack in device memory, for chaining
// stages on the card without host round trips (stitch -> decon -> edf).
type DevStack struct {
	N, H, W int
	ptr     cu.DevicePtr
}

// Dims returns the stack's size (z, y, x).
func (d *DevStack) Dims() (n, h, w int) { return d.N, d.H, d.W }

func (d *DevStack) len() int64 { return int64(d.N) * int64(d.H) * int64(d.W) }

// UploadStack copies a host stack to the device.
func (e *Engine) UploadStack(ctx context.Context, st *raster.Stack) (*DevStack, error) {
	if st == nil || st.N < 1 || st.H < 1 || st.W < 1 || len(st.Pix) != st.N*st.H*st.W {
		return nil, fmt.Errorf("%w: stack missing or of inconsistent size", decon.ErrInput)
	}
	d := &DevStack{N: st.N, H: st.H, W: st.W}
	err := e.do(ctx, "decon upload", func() error {
		d.ptr = e.alloc(d.len() * 4)
		put(e, d.ptr, st.Pix)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// DownloadStack copies a device stack to the host.
func (e *Engine) DownloadStack(ctx context.Context, d *DevStack) (*raster.Stack, error) {
	st := raster.NewStack(d.N, d.H, d.W)
	err := e.do(ctx, "decon download", func() error {
		get(e, st.Pix, d.ptr)
		return nil
	})
	return st, err
}

// FreeStack returns a device stack's memory to the engine's pool.
func (e *Engine) FreeStack(d *DevStack) {
	if d != nil {
		e.freeDevice("decon free", &d.ptr)
	}
}

// Deconvolve implements decon.Deconvolver (host form: upload, device form,
// download).
func (dc *Decon) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, decon.Stats{}, err
	}
	if err := k.Check(); err != nil {
		return nil, decon.Stats{}, err
	}
	e := dc.e
	if out, _, st, done, err := e.deconHostStreamed(ctx, in, k, p, false); done {
		return out, st, err
	}
	din, err := e.UploadStack(ctx, in)
	if err != nil {
		return nil, decon.Stats{}, err
	}
	defer e.FreeStack(din)
	dout, st, err := e.DeconvolveDevice(ctx, din, k, p)
	if err != nil {
		return nil, st, err
	}
	defer e.FreeStack(dout)
	out, err := e.DownloadStack(ctx, dout)
	return out, st, err
}

// DeconvolveGray16 is Deconvolve followed by decon.Quantize, rounded on the
// device so that half the bytes come back (the stage's output form).
func (e *Engine) DeconvolveGray16(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) ([]*raster.Gray16, decon.Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, decon.Stats{}, err
	}
	if err := k.Check(); err != nil {
		return nil, decon.Stats{}, err
	}
	if _, pages, st, done, err := e.deconHostStreamed(ctx, in, k, p, true); done {
		return pages, st, err
	}
	din, err := e.UploadStack(ctx, in)
	if err != nil {
		return nil, decon.Stats{}, err
	}
	defer e.FreeStack(din)
	dout, st, err := e.DeconvolveDevice(ctx, din, k, p)
	if err != nil {
		return nil, st, err
	}
	defer e.FreeStack(dout)
	pages := make([]*raster.Gray16, dout.N)
	for z := range pages {
		pages[z] = raster.NewGray16(dout.W, dout.H)
	}
	err = e.do(ctx, "decon download uint16", func() error {
		n := dout.len()
		q := e.alloc(n * 2)
		defer e.release(q)
		e.launchDeconQuantize(grid1(n), q, dout.ptr, n)
		segs := make([]hostSeg, len(pages))
		plane := int64(dout.H) * int64(dout.W) * 2
		for z, pg := range pages {
			segs[z] = hostSeg{host: unsafe.Pointer(&pg.Pix[0]), dev: q + cu.DevicePtr(int64(z)*plane), n: plane}
		}
		e.download(segs)
		return nil
	})
	return pages, st, err
}

// DeconvolveDevice is the device-buffer form: in stays on the device; the
// result (counts, before rounding; |RL| with p.NoScale) is a new DevStack.
func (e *Engine) DeconvolveDevice(ctx context.Context, in *DevStack, k *psf.Kernel, p decon.Params) (*DevStack, decon.Stats, error) {
	if err := p.Validate(); err != nil {
		return nil, decon.Stats{}, err
	}
	if err := k.Check(); err != nil {
		return nil, decon.Stats{}, err
	}
	if in == nil || in.ptr == 0 {
		return nil, decon.Stats{}, fmt.Errorf("%w: no device stack", decon.ErrInput)
	}
	var pl deconPlan
	err := e.do(ctx, "decon plan", func() error {
		var err error
		pl, err = e.deconMakePlan(in.N, in.H, in.W, k, p, true)
		return err
	})
	if err != nil {
		return nil, decon.Stats{}, err
	}
	if pl.streamed {
		// the iterates do not fit: stream them from host memory
		host, err := e.DownloadStack(ctx, in)
		if err != nil {
			return nil, decon.Stats{}, err
		}
		var res *raster.Stack
		var st decon.Stats
		err = e.do(ctx, "decon streamed", func() error {
			var err error
			res, _, st, err = e.deconStreamed(ctx, host, k, p, pl, false)
			return err
		})
		if err != nil {
			return nil, st, err
		}
		out, err := e.UploadStack(ctx, res)
		return out, st, err
	}
	var out *DevStack
	var st decon.Stats
	err = e.do(ctx, "decon", func() error {
		var err error
		out, st, err = e.deconRun(ctx, in, k, p, pl)
		return err
	})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, st, ctx.Err()
		}
		return nil, st, err
	}
	return out, st, nil
}

// Launch geometry of decon_conv and decon_conv_kN_zB (kernels/decon.cu):
// blocks of deconCBX x deconCBY threads, each computing deconCPT (CPT)
// outputs along x in decon_conv, deconCPT2 (CPT2) in the specialisations.
const (
	deconCBX  = 32
	deconCBY  = 8
	deconCPT  = 4
	deconCPT2 = 8
)

func deconTileFloats(k *psf.Kernel) int {
	return (deconCBY + k.NY - 1) * (deconCBX*deconCPT + k.NX - 1)
}

// convOut is a direct convolution's epilogue (kernels/decon.cu: conv_out,
// conv_fixed), s the convolution: mode 0 s; 1 aux/max(s, eps) (the RL
// ratio); 2 s*aux (the RL update); 3 s*aux and the stop rule's sum into
// sums with plane weights wz; 4 as 3 after the free boundary's division by
// α (sat: decon.FreeAlpha's summed-area table; box: the observed box,
// int32 z0, z1, y0, y1, x0, x1 on the device; the sum over the box only).
// Modes 3 and 4 need a compile-time specialisation (deconFixed).
type convOut struct {
	mode          int
	aux, wz, sums cu.DevicePtr
	sat, box      cu.DevicePtr
}

// deconConv launches dst = conv(src, k) on a (nz, ny, nx) volume with the
// epilogue out. Kernels 1..15 wide run the compile-time specialisations
// (decon_conv_kN_zB: 8 outputs per thread from registers, B = 4 output
// planes per block for 3D kernels); others the generic decon_conv.
func (e *Engine) deconConv(dst, src, kd cu.DevicePtr, k *psf.Kernel, nz, ny, nx int, out convOut) {
	if deconFixed(k) {
		zb, rows, tw := deconFixedTile(k)
		d := dim{gx: (nx + deconCBX*deconCPT2 - 1) / (deconCBX * deconCPT2), gy: (ny + rows - 1) / rows, gz: (nz + zb - 1) / zb,
			bx: deconCBX, by: deconCBY, bz: 1, shmem: tw * (rows + k.NY - 1) * 4}
		e.launchDeconConvKZ(k.NX, zb, d, dst, src, kd, k.NZ, k.NY, nz, ny, nx, out.mode, out.aux, decon.Eps, out.wz, out.sums,
			out.sat, out.box, float32(decon.FreeAlphaMin))
		return
	}
	if out.mode >= 3 {
		panic("gpu: decon: fused sums need a fixed-width kernel")
	}
	d := dim{gx: (nx + deconCBX*deconCPT - 1) / (deconCBX * deconCPT), gy: (ny + deconCBY - 1) / deconCBY, gz: nz,
		bx: deconCBX, by: deconCBY, bz: 1, shmem: deconTileFloats(k) * 4}
	e.launchDeconConv(d, dst, src, kd, k.NZ, k.NY, k.NX, nz, ny, nx, out.mode, out.aux, decon.Eps)
}

// deconFixedTile returns the block of k's compile-time specialisation
// decon_conv_kN_zB: zb output planes (4 for a 3D kernel, whose source tiles
// then serve 4 planes, else 1), rows output rows (CONV_RY of kernels/decon.cu
// per thread: 2 with one plane, else 1) and the shared tile's width tw in
// floats (8 outputs per thread along x plus the kernel's halo, rounded up
// for float4 loads).
func deconFixedTile(k *psf.Kernel) (zb, rows, tw int) {
	nv := (deconCPT2 + k.NX - 1 + 3) / 4
	tw = deconCBX*deconCPT2 + 4*nv - deconCPT2
	zb, rows = 1, 2*deconCBY
	if k.NZ > 1 {
		zb, rows = 4, deconCBY
	}
	return zb, rows, tw
}

// deconFixed reports whether k has a compile-time specialisation whose tile
// ((rows + ky - 1) x tw floats) fits 46 KiB of shared memory.
func deconFixed(k *psf.Kernel) bool {
	if k.NX > 15 || k.NX%2 == 0 {
		return false
	}
	_, rows, tw := deconFixedTile(k)
	return tw*(rows+k.NY-1)*4 <= 46<<10
}

// deconCommon is what both forms of a run (resident, deconRun; streamed,
// deconStreamed) hold: the call, its geometry, the windows and the device
// constants. Padded arrays are (pn, ph, pw) float32, row-major (x fastest).
type deconCommon struct {
	e              *Engine
	k              *psf.Kernel
	p              decon.Params
	pl             deconPlan
	g              decon.Geometry
	pn, bn, ph, pw int // planes computed, padding planes before them, padded rows and width
	biggs          bool
	wins           []decon.Window
	tv, tvEps2     float32   // RL-TV: λ_TV (0: no TV term) and ε² (decon.TVEps2 of the input's maximum)
	free           bool      // the free boundary (decon.BoundaryFree)
	box            decon.Box // the observed voxels in the computed planes (the whole array when !free)
	fa             *decon.FreeAlpha
	satd, boxd     cu.DevicePtr // fa's summed-area table (float64) and box (6 int32: convOut)

	cvs                   *deconConvs
	R                     *psf.Kernel  // the damping kernel
	kd, kfd, rd, wd, sums cu.DevicePtr // k, flip(k), R, the plane weights (float64), the 3 float64 sums
}

func newDeconCommon(e *Engine, k *psf.Kernel, p decon.Params, pl deconPlan) deconCommon {
	c := deconCommon{e: e, k: k, p: p, pl: pl, g: pl.g, pn: pl.pn, bn: pl.bn, ph: pl.g.PH, pw: pl.g.PW,
		biggs: p.Biggs(), wins: decon.PlanWindows(pl.g.PH, pl.rows, pl.halo), tv: float32(p.TVWeight()), free: p.Free()}
	g := pl.g
	c.box = decon.Box{Z0: 0, Z1: c.pn, Y0: 0, Y1: c.ph, X0: 0, X1: c.pw}
	if c.free {
		// the real planes are bn..bn+N of the computed ones (bn = 0 when only they are computed)
		c.box = decon.Box{Z0: c.bn, Z1: c.bn + g.N, Y0: g.BH, Y1: g.BH + g.H, X0: g.BW, X1: g.BW + g.W}
		c.fa = decon.NewFreeAlpha(k, c.box)
	}
	return c
}

// sums launches decon_sums over the core rows [c0, c1) of a window (the
// arguments of decon_sums; row0: the padded row of core row 0) with the
// observed box of the free boundary.
func (c *deconCommon) launchSums(cur, nw, y, g, gp cu.DevicePtr, ph, lo, wh, c0, c1, row0 int) {
	b := c.box
	c.e.launchDeconSums(grid1(int64(c.pn)*int64(c1-c0)*int64(c.pw)), cur, nw, y, g, gp, c.wd,
		c.pn, ph, c.pw, lo, wh, c0, c1, c.sums, row0, b.Z0, b.Z1, b.Y0, b.Y1, b.X0, b.X1)
}

// uploadConsts allocates in ar and uploads the PSF, its flip, the damping
// kernel and the plane weights, and allocates the sums.
func (c *deconCommon) uploadConsts(ar *devArena) {
	e, k := c.e, c.k
	c.kd = ar.bytes(int64(len(k.Data)) * 4)
	put(e, c.kd, k.Data)
	c.kfd = ar.bytes(int64(len(k.Data)) * 4)
	put(e, c.kfd, k.Flipped().Data)
	c.R = decon.DampingKernel()
	c.rd = ar.bytes(27 * 4)
	put(e, c.rd, c.R.Data)
	c.wd = ar.bytes(int64(len(c.pl.w)) * 8)
	put(e, c.wd, c.pl.w)
	c.sums = ar.bytes(3 * 8)
	if c.fa != nil {
		c.satd = ar.bytes(int64(len(c.fa.SAT)) * 8)
		put(e, c.satd, c.fa.SAT)
		b := c.box
		c.boxd = ar.bytes(6 * 4)
		put(e, c.boxd, []int32{int32(b.Z0), int32(b.Z1), int32(b.Y0), int32(b.Y1), int32(b.X0), int32(b.X1)})
	}
}

// makeConvs sets up the PSF convolutions of windows up to maxWH rows: on the
// FFT path it allocates the FFT buffers and plans (the caller destroys
// c.cvs.fft when not nil).
func (c *deconCommon) makeConvs(ar *devArena, maxWH int) error {
	c.cvs = &deconConvs{e: c.e, k: c.k, kd: c.kd, kfd: c.kfd}
	if c.pl.fft {
		f, err := c.e.newDeconFFT(ar, c.pn, maxWH, c.pw, c.k, c.kd, c.kfd)
		if err != nil {
			return err
		}
		c.cvs.fft = f
	}
	return nil
}

// deconRun runs on the engine goroutine: the iterates resident on the device.
func (e *Engine) deconRun(ctx context.Context, in *DevStack, k *psf.Kernel, p decon.Params, pl deconPlan) (*DevStack, decon.Stats, error) {
	ar := devArena{e: e}
	defer ar.free()
	g := pl.g
	st := decon.Stats{Padded: [3]int{g.PN, g.PH, g.PW}}
	n := in.len()
	var err error
	if st.RawMax, err = e.deconDeviceMax(&ar, in); err != nil {
		return nil, st, err
	}

	r := &deconResident{deconCommon: newDeconCommon(e, k, p, pl)}
	r.tvEps2 = decon.TVEps2(st.RawMax)
	st.Chunks = len(r.wins)
	if err := r.allocate(&ar, in); err != nil {
		return nil, st, err
	}
	if r.cvs.fft != nil {
		defer r.cvs.fft.destroy()
	}
	x, err := r.iterate(ctx, &st)
	if err != nil {
		return nil, st, err
	}

	out := &DevStack{N: g.N, H: g.H, W: g.W, ptr: e.alloc(n * 4)}
	scale := 1
	if p.NoScale {
		scale = 0
	} else {
		lo, hi := e.deconPercentiles(x, g, pl.pn, pl.bn, n, p.HistClip, 100-p.HistClip)
		st.Lo, st.Hi = lo, hi
	}
	e.launchDeconScale(grid1(n), out.ptr, x, n, g.H, g.W, g.PH, g.PW, pl.bn, g.BH, g.BW, scale, st.Lo, st.Hi, st.RawMax)
	e.sync()
	return out, st, nil
}

// deconDeviceMax checks the input on the device and returns its largest
// value (counts).
func (e *Engine) deconDeviceMax(ar *devArena, in *DevStack) (float64, error) {
	n := in.len()
	chk := ar.bytes(16)
	cu.MemsetD8Async(chk, 0, 16, e.compute)
	e.launchDeconCheck(grid1(n), in.ptr, n, chk, chk+8)
	var cv [2]uint64
	get(e, cv[:], chk)
	if cv[1] != 0 {
		return 0, fmt.Errorf("%w: %d values negative, NaN or infinite (want counts >= 0)", decon.ErrInput, cv[1])
	}
	rawMax := float64(math.Float32frombits(uint32(cv[0])))
	if rawMax == 0 {
		return rawMax, fmt.Errorf("%w: the stack is all zero", decon.ErrInput)
	}
	return rawMax, nil
}

// deconResident is the state of one resident deconvolution (deconRun).
type deconResident struct {
	deconCommon
	single                           bool         // one window: the windows' copies are the whole arrays
	obs, x, xnew, xprev, gcur, gprev cu.DevicePtr // padded arrays (the last three Biggs-Andrews only)
	bL, yS                           cu.DevicePtr // b (every form) and, one window, Biggs-Andrews' prediction
	obsL, curL, yL, aL, xpL          cu.DevicePtr // several windows: the window's copies (tallest window)
}

// allocate uploads the constants, pads the input into obs, starts x as obs
// and allocates the other iterates, the window buffers and the convolutions.
func (r *deconResident) allocate(ar *devArena, in *DevStack) error {
	e, g, pn, ph, pw := r.e, r.g, r.pn, r.ph, r.pw
	m := int64(pn) * int64(ph) * int64(pw)
	r.uploadConsts(ar)
	r.obs = ar.bytes(m * 4)
	e.launchDeconPad(grid1(m), r.obs, in.ptr, g.N, g.H, g.W, pn, ph, pw, r.bn, g.BH, g.BW)
	r.x = ar.bytes(m * 4)
	cu.MemcpyDtoDAsync(r.x, r.obs, m*4, e.compute)
	if r.free { // the iterate starts from the mirrored stack, the data are the observed voxels
		b := r.box
		e.launchDeconBoxZero(grid1(m), r.obs, pn, ph, pw, b.Z0, b.Z1, b.Y0, b.Y1, b.X0, b.X1)
	}
	r.xnew = ar.bytes(m * 4)
	if r.biggs {
		r.xprev, r.gcur, r.gprev = ar.bytes(m*4), ar.bytes(m*4), ar.bytes(m*4)
	}
	r.single = len(r.wins) == 1
	maxWH := ph
	if r.single {
		r.bL = ar.bytes(m * 4)
		if r.biggs {
			r.yS = ar.bytes(m * 4)
		}
	} else {
		maxWH = 0
		for _, wn := range r.wins {
			maxWH = max(maxWH, wn.Hi-wn.Lo)
		}
		lm := int64(pn) * int64(maxWH) * int64(pw) * 4
		r.obsL, r.curL, r.aL, r.bL = ar.bytes(lm), ar.bytes(lm), ar.bytes(lm), ar.bytes(lm)
		if r.biggs {
			r.yL, r.xpL = ar.bytes(lm), ar.bytes(lm)
		}
	}
	return r.makeConvs(ar, maxWH)
}

// iterate runs the iterations (p.Iterations, or fewer when the stop rule
// ends them), recording the stop rule's figures in st, and returns the
// final iterate.
func (r *deconResident) iterate(ctx context.Context, st *decon.Stats) (cu.DevicePtr, error) {
	e, p, biggs := r.e, r.p, r.biggs
	stop := decon.Stopper{Criterion: p.StopCriterion, IgnoreGrowth: p.Biggs()}
	var alpha float64
	for it := 0; it < p.Iterations; it++ {
		if err := checkCtx(ctx); err != nil {
			return 0, err
		}
		cu.MemsetD8Async(r.sums, 0, 24, e.compute)
		for _, wn := range r.wins {
			r.window(it, wn, alpha)
		}
		var s [3]float64
		get(e, s[:], r.sums)
		rel, done := stop.Step(math.Sqrt(s[0]))
		st.DeltaRel = append(st.DeltaRel, rel)
		st.Iterations = it + 1
		if biggs {
			if it >= 1 {
				alpha = decon.BiggsAlpha(s[1], s[2])
			}
			r.xprev, r.x, r.xnew = r.x, r.xnew, r.xprev
			r.gcur, r.gprev = r.gprev, r.gcur
		} else {
			r.x, r.xnew = r.xnew, r.x
		}
		if done {
			st.Stopped = true
			break
		}
	}
	return r.x, nil
}

// window updates window wn in iteration it: its rows copied out (several
// windows), the Biggs-Andrews prediction, the RL (and damping) update, the
// sums over its core and, several windows, its core rows copied into xnew.
func (r *deconResident) window(it int, wn decon.Window, alpha float64) {
	e, p, k, pn, ph, pw, biggs, single := r.e, r.p, r.k, r.pn, r.ph, r.pw, r.biggs, r.single
	cvs := r.cvs
	wh := wn.Hi - wn.Lo
	lm := int64(pn) * int64(wh) * int64(pw)
	o, c, y, a, b := r.obs, r.x, r.x, r.xnew, r.bL
	if !single {
		o, c, a = r.obsL, r.curL, r.aL
		e.launchDeconRows(grid1(lm), o, r.obs, pn, ph, pw, wn.Lo, wh, 0, 0, 0)
		e.launchDeconRows(grid1(lm), c, r.x, pn, ph, pw, wn.Lo, wh, 0, 0, 0)
		y = c
	}
	if biggs && it >= 2 {
		xp := r.xprev
		y = r.yS
		if !single {
			xp, y = r.xpL, r.yL
			e.launchDeconRows(grid1(lm), xp, r.xprev, pn, ph, pw, wn.Lo, wh, 0, 0, 0)
		}
		e.launchDeconPredict(grid1(lm), y, c, xp, float32(alpha), lm)
	}
	cvs.conv(false, b, y, pn, wh, pw, convOut{mode: 1, aux: o})
	// fused: the new iterate and the stop rule's sum in the second
	// convolution's pass (with the free boundary's division by α first)
	fused := single && !biggs && p.Damping == 0 && r.tv == 0 && deconFixed(k) && cvs.fft == nil
	switch {
	case fused && r.free:
		cvs.conv(true, a, b, pn, wh, pw, convOut{mode: 4, aux: y, wz: r.wd, sums: r.sums, sat: r.satd, box: r.boxd})
	case r.tv > 0 || r.free:
		r.tvUpdate(a, b, y, pn, wh, pw, wn.Lo)
	case p.Damping > 0:
		oml, lam := float32(1)-float32(p.Damping), float32(p.Damping)
		cvs.conv(true, a, b, pn, wh, pw, convOut{})
		e.deconConv(b, y, r.rd, r.R, pn, wh, pw, convOut{})
		e.launchDeconDamp(grid1(lm), a, y, b, oml, lam, lm)
	case fused:
		cvs.conv(true, a, b, pn, wh, pw, convOut{mode: 3, aux: y, wz: r.wd, sums: r.sums})
	default:
		cvs.conv(true, a, b, pn, wh, pw, convOut{mode: 2, aux: y})
	}
	var gp cu.DevicePtr
	if biggs && it >= 1 {
		gp = r.gprev
	}
	if !fused {
		r.launchSums(c, a, y, r.gcur, gp, ph, wn.Lo, wh, wn.Core0, wn.Core1, 0)
	}
	if !single {
		core := int64(pn) * int64(wn.Core1-wn.Core0) * int64(pw)
		e.launchDeconRows(grid1(core), r.xnew, a, pn, ph, pw, wn.Lo, wh, wn.Core0, wn.Core1, 1)
	}
}

// tvUpdate is the update of a window (pn, wh, pw) starting at padded row
// lo for RL-TV or the free boundary: a = conv(b, flip k), divided by the
// free boundary's α (decon_free), then a·y / (1 - λ·div(∇y/|∇y|)) (λ = 0
// without TV: a division by 1), damped as RL when p.Damping > 0 (decon.CPU's
// order of operations; b is overwritten by conv(y, R)).
func (c *deconCommon) tvUpdate(a, b, y cu.DevicePtr, pn, wh, pw, lo int) {
	e, p := c.e, c.p
	lm := int64(pn) * int64(wh) * int64(pw)
	c.cvs.conv(true, a, b, pn, wh, pw, convOut{})
	if c.free {
		bx, k := c.box, c.k
		e.launchDeconFree(grid1(lm), a, c.satd, k.NZ, k.NY, k.NX, pn, wh, pw, lo, bx.Z0, bx.Z1, bx.Y0, bx.Y1, bx.X0, bx.X1, float32(decon.FreeAlphaMin))
	}
	damp, oml, lam := 0, float32(1)-float32(p.Damping), float32(p.Damping)
	if p.Damping > 0 {
		damp = 1
		e.deconConv(b, y, c.rd, c.R, pn, wh, pw, convOut{})
	}
	e.launchDeconTv(grid1(lm), a, y, b, pn, wh, pw, c.tv, c.tvEps2, damp, oml, lam)
}

// deconPercentiles returns numpy's percentiles qs of |x| over the cropped
// region, exactly (deconSelect).
func (e *Engine) deconPercentiles(x cu.DevicePtr, g decon.Geometry, pn, bn int, n int64, qs ...float64) (float64, float64) {
	return e.deconSelect(n, func(bins cu.DevicePtr, shift, mask, all, mshift int, match uint32) {
		e.launchDeconHist(grid1(n), bins, x, n, g.H, g.W, g.PH, g.PW, bn, g.BH, g.BW, shift, mask, all, mshift, match)
	}, qs...)
}

// deconSelect returns the percentiles qs[0], qs[1] of n values, exactly:
// order statistics by three histogram passes over the float bits (bits
// 31-20, 19-8, 7-0). pass launches decon_hist over all the values into bins
// (zeroed before) with the given bit selection.
func (e *Engine) deconSelect(n int64, pass func(bins cu.DevicePtr, shift, mask, all, mshift int, match uint32), qs ...float64) (float64, float64) {
	bins := e.alloc(4096 * 8)
	defer e.release(bins)
	hist := func(shift, mask, all, mshift int, match uint32) []uint64 {
		cu.MemsetD8Async(bins, 0, 4096*8, e.compute)
		pass(bins, shift, mask, all, mshift, match)
		h := make([]uint64, mask+1)
		get(e, h, bins)
		return h
	}
	find := func(h []uint64, rank uint64) (int, uint64) {
		var c uint64
		for b, v := range h {
			if c+v > rank {
				return b, rank - c
			}
			c += v
		}
		return len(h) - 1, 0
	}
	var ranks []int
	for _, q := range qs {
		ranks = append(ranks, decon.PercentileRanks(int(n), q)...)
	}
	h1 := hist(20, 4095, 1, 0, 0)
	vals := map[int]float64{}
	h2s := map[int][]uint64{}
	h3s := map[int][]uint64{}
	for _, r := range ranks {
		b1, r1 := find(h1, uint64(r))
		h2, ok := h2s[b1]
		if !ok {
			h2 = hist(8, 4095, 0, 20, uint32(b1))
			h2s[b1] = h2
		}
		b2, r2 := find(h2, r1)
		pre := b1<<12 | b2
		h3, ok := h3s[pre]
		if !ok {
			h3 = hist(0, 255, 0, 8, uint32(pre))
			h3s[pre] = h3
		}
		b3, _ := find(h3, r2)
		vals[r] = float64(math.Float32frombits(uint32(pre<<8 | b3)))
	}
	at := func(i int) float64 { return vals[i] }
	lo := decon.Percentile(int(n), qs[0], at)
	hi := decon.Percentile(int(n), qs[1], at)
	return lo, hi
}

// AllocStack allocates an n x h x w float32 device stack (contents
// undefined), to be filled plane by plane with UploadPlaneGray16 so that a
// channel goes to the device as it is read: the host then holds only the
// planes in flight, not the whole stack.
func (e *Engine) AllocStack(ctx context.Context, n, h, w int) (*DevStack, error) {
	if n < 1 || h < 1 || w < 1 {
		return nil, fmt.Errorf("%w: device stack of %dx%dx%d (x,y,z)", decon.ErrInput, w, h, n)
	}
	d := &DevStack{N: n, H: h, W: w}
	err := e.do(ctx, "decon alloc", func() error {
		d.ptr = e.alloc(d.len() * 4)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// UploadPlaneGray16 copies a uint16 plane (counts) into plane z of d as
// float32 (exact: the same values UploadStack sends for the stack of those
// planes). It returns when pg may be reused.
func (e *Engine) UploadPlaneGray16(ctx context.Context, d *DevStack, z int, pg *raster.Gray16) error {
	_, err := e.UploadPlaneGray16Measured(ctx, d, z, pg, nil)
	return err
}

// UploadPlaneGray16Measured is UploadPlaneGray16 that also measures the
// plane on the device with m (nil: no measure).
func (e *Engine) UploadPlaneGray16Measured(ctx context.Context, d *DevStack, z int, pg *raster.Gray16, m *PlaneMeter) (*planestats.Measure, error) {
	if d == nil || d.ptr == 0 || z < 0 || z >= d.N || pg == nil || pg.W != d.W || pg.H != d.H || len(pg.Pix) != d.W*d.H {
		return nil, fmt.Errorf("%w: plane %d does not fit the device stack", decon.ErrInput, z)
	}
	var r *planestats.Measure
	err := e.do(ctx, "decon upload plane", func() error {
		if err := m.check(e, d); err != nil {
			return err
		}
		tmp := e.alloc(int64(d.H) * int64(d.W) * 2)
		defer e.release(tmp)
		put(e, tmp, pg.Pix)
		r = e.planeIn(d, z, tmp, m)
		return nil
	})
	return r, err
}

// PutPlaneFromDevice is UploadPlaneGray16Measured from a plane already on
// the device (src: uint16 counts of the stack's plane size, e.g. a blended
// mosaic from CorrectAndBlendTilesDevice), which is only read: the same
// float32 plane and measure without the trip through the host.
func (e *Engine) PutPlaneFromDevice(ctx context.Context, d *DevStack, z int, src *DevGray16, m *PlaneMeter) (*planestats.Measure, error) {
	if d == nil || d.ptr == 0 || z < 0 || z >= d.N {
		return nil, fmt.Errorf("%w: plane %d does not fit the device stack", decon.ErrInput, z)
	}
	var r *planestats.Measure
	err := e.do(ctx, "decon put device plane", func() error {
		if err := m.check(e, d); err != nil {
			return err
		}
		if err := src.checkLive(e, d.W, d.H); err != nil {
			return fmt.Errorf("%w: %w", decon.ErrInput, err)
		}
		r = e.planeIn(d, z, src.ptr, m)
		return nil
	})
	return r, err
}

// planeIn converts the uint16 plane q (counts, on the device) into plane z
// of d as float32 (exact) and measures it with m (nil: no measure, nil
// result); on the engine thread.
func (e *Engine) planeIn(d *DevStack, z int, q cu.DevicePtr, m *PlaneMeter) *planestats.Measure {
	n := int64(d.H) * int64(d.W)
	e.launchNormalizeU16(grid1(n), d.ptr+cu.DevicePtr(int64(z)*n*4), q, n, float32(1))
	if m == nil {
		return nil
	}
	return m.measure(q)
}

// DownloadPlaneGray16 rounds plane z of d to uint16 on the device
// (decon.Quantize, as DeconvolveGray16) and copies it into dst (H x W).
func (e *Engine) DownloadPlaneGray16(ctx context.Context, d *DevStack, z int, dst *raster.Gray16) error {
	_, err := e.DownloadPlaneGray16Measured(ctx, d, z, dst, nil)
	return err
}

// DownloadPlaneGray16Measured is DownloadPlaneGray16 that also measures
// the rounded plane on the device with m (nil: no measure).
func (e *Engine) DownloadPlaneGray16Measured(ctx context.Context, d *DevStack, z int, dst *raster.Gray16, m *PlaneMeter) (*planestats.Measure, error) {
	if dst == nil {
		return nil, fmt.Errorf("%w: no plane to download plane %d into", decon.ErrInput, z)
	}
	return e.RoundPlaneInto(ctx, d, z, nil, dst, m)
}

// RoundPlaneInto rounds plane z of d to uint16 on the device (decon.Quantize,
// as DownloadPlaneGray16) into plane z of to (an EDF device stack of this
// engine of the same plane size; nil: a scratch buffer), measures it there
// with m (nil: no measure) and, when dst is not nil, copies it into dst (the
// fused cycle hands the deconvolved planes to the EDF stage on the device).
func (e *Engine) RoundPlaneInto(ctx context.Context, d *DevStack, z int, to *EDFStack, dst *raster.Gray16, m *PlaneMeter) (*planestats.Measure, error) {
	if d == nil || d.ptr == 0 || z < 0 || z >= d.N || (dst != nil && (dst.W != d.W || dst.H != d.H || len(dst.Pix) != d.W*d.H)) {
		return nil, fmt.Errorf("%w: plane %d does not fit the device stack", decon.ErrInput, z)
	}
	if to != nil && (to.e != e || to.ptr == 0 || to.W != d.W || to.H != d.H || z >= to.N) {
		return nil, fmt.Errorf("%w: plane %d of a %dx%d stack does not fit the EDF device stack", decon.ErrInput, z, d.W, d.H)
	}
	var r *planestats.Measure
	err := e.do(ctx, "decon round plane uint16", func() error {
		if err := m.check(e, d); err != nil {
			return err
		}
		n := int64(d.H) * int64(d.W)
		var q cu.DevicePtr
		if to != nil {
			q = to.ptr + cu.DevicePtr(int64(z)*n*2)
		} else {
			q = e.alloc(n * 2)
			defer e.release(q)
		}
		e.launchDeconQuantize(grid1(n), q, d.ptr+cu.DevicePtr(int64(z)*n*4), n)
		if m != nil {
			r = m.measure(q)
		}
		if dst != nil {
			get(e, dst.Pix, q)
		}
		return nil
	})
	return r, err
}

// DeconStreams reports, without doing any work, whether a deconvolution of
// an n x h x w stack with k and p would stream its iterates through pinned
// host memory on this engine now (the device's free memory, or
// p.MemoryBudget), and if so the pinned host bytes it allocates (3 padded
// float32 arrays for RL, 6 for Biggs-Andrews). A stack that fits neither
// form is the plan's ErrOutOfMemory.
func (e *Engine) DeconStreams(ctx context.Context, n, h, w int, k *psf.Kernel, p decon.Params) (streamed bool, pinned int64, err error) {
	if err := p.Validate(); err != nil {
		return false, 0, err
	}
	if err := k.Check(); err != nil {
		return false, 0, err
	}
	var pl deconPlan
	err = e.do(ctx, "decon plan", func() error {
		var err error
		pl, err = e.deconMakePlan(n, h, w, k, p, false)
		return err
	})
	if err != nil || !pl.streamed {
		return false, 0, err
	}
	arrays := int64(3)
	if p.Biggs() {
		arrays = 6
	}
	return true, arrays * int64(pl.pn) * int64(pl.g.PH) * int64(pl.g.PW) * 4, nil
}
