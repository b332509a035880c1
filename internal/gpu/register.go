//go:build cuda

package gpu

import (
	"context"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// Registrar is the GPU register.Backend: box downsampling, block phase
// correlation (all blocks of a call in one batched cuFFT Z2Z, float64 like
// the CPU's complex128) and the full-resolution warp, with register's
// rules (kernels/register.cu). Host code (register.Register) drives it.
type Registrar struct{ e *Engine }

// Registrar returns the GPU registration backend.
func (e *Engine) Registrar() register.Backend { return &Registrar{e: e} }

// Name implements register.Backend.
func (r *Registrar) Name() string { return "gpu " + r.e.desc }

// EngineMemory reports the engine's host memory to regstage's memory model
// (its GPU model and device=gpu in the sentinel).
func (r *Registrar) EngineMemory() membudget.EngineMemory { return r.e.EngineMemory() }

var _ membudget.MemoryReporter = (*Registrar)(nil)

var _ raster.HostPlanes = (*Registrar)(nil)

// NewPlane implements raster.HostPlanes (Engine.NewPlane): Downsample and
// Warp move such planes to and from the card without the staging copy, and
// Warp's results are such planes.
func (r *Registrar) NewPlane(ctx context.Context, w, h int) (*raster.Gray16, error) {
	return r.e.NewPlane(ctx, w, h)
}

// FreePlane implements raster.HostPlanes.
func (r *Registrar) FreePlane(g *raster.Gray16) { r.e.FreePlane(g) }

// Downsample implements register.Backend.
func (r *Registrar) Downsample(ctx context.Context, img *raster.Gray16, ks []int) ([]*raster.Float32, error) {
	if err := register.CheckDownsample(img, ks); err != nil {
		return nil, err
	}
	out := make([]*raster.Float32, len(ks))
	err := r.e.do(ctx, "register downsample", func() error {
		e := r.e
		n := int64(img.W) * int64(img.H)
		src := e.alloc(n * 2)
		defer e.release(src)
		e.upload([]hostSeg{{host: unsafe.Pointer(&img.Pix[0]), dev: src, n: n * 2}})
		for i, k := range ks {
			o := raster.NewFloat32(img.W/k, img.H/k)
			dst := e.alloc(int64(len(o.Pix)) * 4)
			e.regDownsampleDev(dst, src, img.H, img.W, k)
			e.download([]hostSeg{{host: unsafe.Pointer(&o.Pix[0]), dev: dst, n: int64(len(o.Pix)) * 4}})
			e.release(dst)
			out[i] = o
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// regDownsampleDev writes the k x k box mean of the h x w uint16 image src
// into dst (floor(h/k) x floor(w/k) float32).
func (e *Engine) regDownsampleDev(dst, src cu.DevicePtr, h, w, k int) {
	oh, ow := h/k, w/k
	e.launchRegDownsample(grid1(int64(oh)*int64(ow)), dst, src, w, k, oh, ow, 1/float64(k*k))
}

// mapParams packs a mapping for the kernels: a0..a3, b0, b1, hasField.
func mapParams(m *register.Mapping) []float64 {
	a, b := m.Rigid.Matrix()
	f := 0.0
	if m.Field != nil {
		f = 1
	}
	return []float64{a[0], a[1], a[2], a[3], b[0], b[1], f}
}

// devField is a field on the device (zero pointers and a 1 x 1 grid when
// there is none; the kernels then never read it).
type devField struct {
	dy, dx       cu.DevicePtr
	ny, nx       int
	y0, x0, step float64
	owned        bool
}

func (e *Engine) putField(f *register.Field) devField {
	if f == nil {
		return devField{ny: 1, nx: 1, step: 1}
	}
	d := devField{ny: f.NY, nx: f.NX, y0: f.Y0, x0: f.X0, step: f.Step, owned: true}
	d.dy = e.alloc(int64(len(f.DY)) * 4)
	d.dx = e.alloc(int64(len(f.DX)) * 4)
	put(e, d.dy, f.DY)
	put(e, d.dx, f.DX)
	return d
}

func (d devField) free(e *Engine) {
	if d.owned {
		e.release(d.dy, d.dx)
	}
}

// Warp implements register.Backend.
func (r *Registrar) Warp(ctx context.Context, imgs []*raster.Gray16, m *register.Mapping, h, w int) ([]*raster.Gray16, error) {
	if err := register.CheckWarp(imgs, m, h, w); err != nil {
		return nil, err
	}
	// The output planes are page-locked (written by DMA), made before the
	// call so that the engine does not wait for the page-locking.
	out := make([]*raster.Gray16, len(imgs))
	for i := range out {
		o, err := r.e.NewPlane(ctx, w, h)
		if err != nil {
			raster.FreePlanes(r.e, out)
			return nil, err
		}
		out[i] = o
	}
	err := r.e.do(ctx, "register warp", func() error {
		e := r.e
		mp := e.alloc(7 * 8)
		put(e, mp, mapParams(m))
		fd := e.putField(m.Field)
		defer func() { fd.free(e); e.release(mp) }()
		on := int64(h) * int64(w)
		dst := e.alloc(on * 2)
		defer e.release(dst)
		for i, img := range imgs {
			if err := checkCtx(ctx); err != nil {
				return err
			}
			n := int64(img.W) * int64(img.H)
			src := e.alloc(n * 2)
			e.upload([]hostSeg{{host: unsafe.Pointer(&img.Pix[0]), dev: src, n: n * 2}})
			e.regWarpDev(dst, src, img.H, img.W, h, w, mp, fd)
			e.download([]hostSeg{{host: unsafe.Pointer(&out[i].Pix[0]), dev: dst, n: on * 2}})
			e.release(src)
		}
		return nil
	})
	if err != nil {
		raster.FreePlanes(r.e, out)
		return nil, err
	}
	return out, nil
}

// regWarpDev warps the ih x iw uint16 image src through the mapping
// (packed parameters mp, field fd) into the oh x ow uint16 image dst.
func (e *Engine) regWarpDev(dst, src cu.DevicePtr, ih, iw, oh, ow int, mp cu.DevicePtr, fd devField) {
	e.launchRegWarp(grid1(int64(oh)*int64(ow)), dst, src, iw, ih, ow, oh, mp, fd.dy, fd.dx, fd.ny, fd.nx, fd.y0, fd.x0, fd.step)
}

// regMaxBatchBytes bounds the complex buffer of one block batch.
const regMaxBatchBytes = 2 << 30

// BlockShifts implements register.Backend.
func (r *Registrar) BlockShifts(ctx context.Context, fixed, moving *raster.Float32, k int, maps []*register.Mapping, blocks []register.Block, bh, bw int) ([]register.Shift, error) {
	if err := register.CheckBlocks(fixed, moving, k, maps, blocks, bh, bw); err != nil {
		return nil, err
	}
	out := make([]register.Shift, len(blocks))
	if len(blocks) == 0 {
		return out, nil
	}
	err := r.e.do(ctx, "register block shifts", func() error {
		e := r.e
		F := e.alloc(int64(len(fixed.Pix)) * 4)
		M := e.alloc(int64(len(moving.Pix)) * 4)
		defer e.release(F, M)
		e.upload([]hostSeg{
			{host: unsafe.Pointer(&fixed.Pix[0]), dev: F, n: int64(len(fixed.Pix)) * 4},
			{host: unsafe.Pointer(&moving.Pix[0]), dev: M, n: int64(len(moving.Pix)) * 4},
		})
		var field *register.Field
		mps := make([]float64, 0, 7*len(maps))
		for _, m := range maps {
			mps = append(mps, mapParams(m)...)
			if m.Field != nil {
				field = m.Field
			}
		}
		MP := e.alloc(int64(len(mps)) * 8)
		put(e, MP, mps)
		fd := e.putField(field)
		defer func() { fd.free(e); e.release(MP) }()
		return e.regBlockShiftsDev(ctx, F, fixed.H, fixed.W, M, moving.H, moving.W, k, MP, fd, blocks, bh, bw, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// regBlockShiftsDev measures the blocks on device levels F (fh x fw) and M
// (mh x mw) with packed mappings MP and field fd, filling out.
func (e *Engine) regBlockShiftsDev(ctx context.Context, F cu.DevicePtr, fh, fw int, M cu.DevicePtr, mh, mw, k int, MP cu.DevicePtr, fd devField, blocks []register.Block, bh, bw int, out []register.Shift) error {
	_ = fh
	n := int64(bh) * int64(bw)
	WY, WX := e.alloc(int64(bh)*8), e.alloc(int64(bw)*8)
	LY, LX := e.alloc(int64(bh)*8), e.alloc(int64(bw)*8)
	defer e.release(WY, WX, LY, LX)
	put(e, WY, register.PCWindow(bh))
	put(e, WX, register.PCWindow(bw))
	put(e, LY, register.PCLowPass(bh))
	put(e, LX, register.PCLowPass(bw))
	chunk := max(1, min(len(blocks), int(regMaxBatchBytes/(n*16))))
	for lo := 0; lo < len(blocks); lo += chunk {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		part := blocks[lo:min(len(blocks), lo+chunk)]
		nb := len(part)
		bl := make([]int32, 3*nb)
		for i, b := range part {
			bl[3*i], bl[3*i+1], bl[3*i+2] = int32(b.Y0), int32(b.X0), int32(b.Map)
		}
		BL := e.alloc(int64(len(bl)) * 4)
		Z := e.alloc(int64(nb) * n * 16)
		PK := e.alloc(int64(nb) * 11 * 8)
		put(e, BL, bl)
		gb := dim{gx: int((n + 255) / 256), gy: nb, gz: 1, bx: 256, by: 1, bz: 1}
		e.launchRegBlockSample(gb, Z, F, fw, M, mh, mw, BL, MP, fd.dy, fd.dx, fd.ny, fd.nx, fd.y0, fd.x0, fd.step, k, bh, bw)
		e.launchRegBlockWindow(dim{gx: nb, gy: 1, gz: 1, bx: 256, by: 1, bz: 1}, Z, WY, WX, bh, bw)
		plan := e.plan(cufft.Z2Z, bh, bw, nb)
		e.op = "cufft forward"
		plan.ExecZ2Z(Z, Z, cufft.FORWARD)
		e.fftDebug("cufft forward")
		e.launchRegCrossPower(gb, Z, LY, LX, bh, bw)
		e.op = "cufft inverse"
		plan.ExecZ2Z(Z, Z, cufft.INVERSE)
		e.fftDebug("cufft inverse")
		e.launchRegPcmPeak(dim{gx: nb, gy: 1, gz: 1, bx: 256, by: 1, bz: 1}, PK, Z, bh, bw)
		pk := make([]float64, nb*11)
		get(e, pk, PK)
		e.release(BL, Z, PK)
		for i := range part {
			o := pk[11*i:]
			var f [3][3]float64
			for a := 0; a < 3; a++ {
				for b := 0; b < 3; b++ {
					f[a][b] = o[2+a*3+b]
				}
			}
			p := int(o[1])
			dy, dx := register.PeakShift(&f, p/bw, p%bw, bh, bw)
			out[lo+i] = register.Shift{DY: dy, DX: dx, Peak: o[0] / float64(n)}
		}
	}
	if len(e.plans) > 8 {
		e.dropPlans()
	}
	return nil
}
