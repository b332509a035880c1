//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// DevTiles is one plane's raw tiles (uint16 counts) held on the device, N
// tiles of H x W px back to back (acquisition order): uploaded once for the
// BaSiC fit and the correction and blending (the stitch stage's
// basic.DeviceTiles).
type DevTiles struct {
	e       *Engine
	N, H, W int
	ptr     cu.DevicePtr
	ready   event // the upload completes at it (0: it had when UploadTiles returned)
}

// UploadTiles copies a plane's raw tiles to the device. Tiles in the
// engine's page-locked planes (NewPlane) are copied on a stream of their
// own while the GPU goes on with earlier work, and UploadTiles returns at
// once: such tiles must stay unchanged until the DevTiles is freed (Free
// waits for the copy); FitTiles and CorrectAndBlendTiles order their work
// after it. Other tiles are copied before it returns and may be reused
// then.
func (e *Engine) UploadTiles(ctx context.Context, tiles []*raster.Gray16) (basic.DeviceTiles, error) {
	if len(tiles) < 1 || tiles[0] == nil {
		return nil, fmt.Errorf("basic: no tiles to upload")
	}
	t := &DevTiles{e: e, N: len(tiles), H: tiles[0].H, W: tiles[0].W}
	for k, g := range tiles {
		if g == nil || g.W != t.W || g.H != t.H || len(g.Pix) != t.W*t.H || t.W < 1 || t.H < 1 {
			return nil, fmt.Errorf("basic: tile %d is missing or not %dx%d", k, t.W, t.H)
		}
	}
	err := e.do(ctx, "upload tiles", func() error {
		plane := int64(t.H) * int64(t.W)
		t.ptr = e.alloc(int64(t.N) * plane * 2)
		segs := make([]hostSeg, t.N)
		for k, g := range tiles {
			segs[k] = hostSeg{host: unsafe.Pointer(&g.Pix[0]), dev: t.ptr + cu.DevicePtr(int64(k)*plane*2), n: plane * 2}
		}
		t.ready = e.uploadAsync(segs)
		return nil
	})
	if err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// Free waits for the tiles' upload (their host memory may be reused on
// return) and gives their device memory back; a second Free does nothing.
func (t *DevTiles) Free() {
	if t == nil || (t.ptr == 0 && t.ready == 0) {
		return
	}
	_ = t.e.do(context.Background(), "free tiles", func() error {
		if t.ready != 0 {
			t.ready.synchronize()
			t.ready.destroy()
			t.ready = 0
		}
		if t.ptr != 0 {
			t.e.release(t.ptr)
			t.ptr = 0
		}
		return nil
	})
}

// devTiles checks that dt is live tiles of this engine.
func (e *Engine) devTiles(dt basic.DeviceTiles) (*DevTiles, error) {
	t, ok := dt.(*DevTiles)
	if !ok || t == nil || t.e != e || t.ptr == 0 {
		return nil, fmt.Errorf("basic: tiles of another engine, or freed (%T)", dt)
	}
	return t, nil
}

// FitTiles is Fit on planes whose tiles are on the device: the same
// profiles, bit for bit, without sending the tiles again.
func (e *Engine) FitTiles(ctx context.Context, planes []basic.DeviceTiles, p basic.Params) ([]basic.Profile, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ins := make([]fitInput, len(planes))
	for i, dt := range planes {
		t, err := e.devTiles(dt)
		if err != nil {
			return nil, fmt.Errorf("plane %d: %w", i, err)
		}
		if t.N < 2 {
			return nil, fmt.Errorf("basic: plane %d: need at least 2 tiles, got %d", i, t.N)
		}
		ins[i] = fitInput{n: t.N, h: t.H, w: t.W, dev: t.ptr, ready: t.ready}
	}
	return e.fit(ctx, ins, p, defaultFitBatch)
}

// CorrectAndBlendTiles is CorrectAndBlend on tiles on the device
// (CorrectAndBlendTilesDevice, the mosaic then copied to the host by DMA
// into a page-locked plane of NewPlane, which the caller may give back
// with FreePlane).
func (e *Engine) CorrectAndBlendTiles(ctx context.Context, dt basic.DeviceTiles, prof *basic.Profile, flatMin float32, pos []raster.Point, p blend.Params) (*raster.Gray16, error) {
	dm, err := e.CorrectAndBlendTilesDevice(ctx, dt, prof, flatMin, pos, p)
	if err != nil {
		return nil, err
	}
	defer dm.Free()
	w, h := dm.Size()
	out, err := e.NewPlane(ctx, w, h)
	if err != nil {
		return nil, err
	}
	if err := dm.Download(ctx, out); err != nil {
		e.FreePlane(out)
		return nil, err
	}
	return out, nil
}

// CorrectAndBlendTilesDevice is CorrectAndBlendTiles with the mosaic left
// on the device (a *DevGray16; the caller frees it): the fused cycle puts
// it into the decon stage's device stack without a trip through the host.
func (e *Engine) CorrectAndBlendTilesDevice(ctx context.Context, dt basic.DeviceTiles, prof *basic.Profile, flatMin float32, pos []raster.Point, p blend.Params) (raster.DeviceGray16, error) {
	t, err := e.devTiles(dt)
	if err != nil {
		return nil, err
	}
	if prof == nil || prof.H != t.H || prof.W != t.W || len(prof.Flatfield) != t.H*t.W || len(prof.Darkfield) != t.H*t.W {
		return nil, fmt.Errorf("basic: profile does not fit tiles of %dx%d", t.W, t.H)
	}
	g, err := blendGeomSize(t.N, t.H, t.W, pos, p)
	if err != nil {
		return nil, err
	}
	out := &DevGray16{e: e, W: g.outW, H: g.outH}
	err = e.do(ctx, "correct and blend", func() error {
		if t.ptr == 0 {
			return fmt.Errorf("basic: tiles freed")
		}
		if t.ready != 0 {
			streamWait(e.compute, t.ready)
		}
		out.ptr = e.alloc(int64(g.outW) * int64(g.outH) * 2)
		e.blendRawInto(g, t.ptr, t.N, t.H, t.W, prof, flatMin, out.ptr)
		return nil
	})
	if err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// DevGray16 is a uint16 plane of H x W px (counts, row-major) held on the
// device (raster.DeviceGray16): a blended mosaic.
type DevGray16 struct {
	e    *Engine
	W, H int
	ptr  cu.DevicePtr
}

// Size is the plane's size in px.
func (p *DevGray16) Size() (w, h int) { return p.W, p.H }

// Download copies the plane into dst (W x H) and returns when dst holds it.
func (p *DevGray16) Download(ctx context.Context, dst *raster.Gray16) error {
	if dst == nil || dst.W != p.W || dst.H != p.H || len(dst.Pix) != p.W*p.H {
		return fmt.Errorf("gpu: a %dx%d device plane does not fit the host plane", p.W, p.H)
	}
	return p.e.do(ctx, "download plane", func() error {
		if p.ptr == 0 {
			return fmt.Errorf("gpu: device plane freed")
		}
		get(p.e, dst.Pix, p.ptr)
		return nil
	})
}

// Free gives the plane's device memory back; a second Free does nothing.
func (p *DevGray16) Free() {
	if p != nil {
		p.e.freeDevice("free plane", &p.ptr)
	}
}

// checkLive checks that p is a live plane of engine e of w x h px.
func (p *DevGray16) checkLive(e *Engine, w, h int) error {
	if p == nil || p.e != e || p.ptr == 0 {
		return fmt.Errorf("gpu: a device plane of another engine, or freed")
	}
	if p.W != w || p.H != h {
		return fmt.Errorf("gpu: a device plane of %dx%d, want %dx%d", p.W, p.H, w, h)
	}
	return nil
}

// freeDevice gives the buffers at ptrs back to the pool (on the engine
// thread, named op) and zeroes them; zero pointers are skipped, so a
// second call does nothing.
func (e *Engine) freeDevice(op string, ptrs ...*cu.DevicePtr) {
	var live []cu.DevicePtr
	for _, p := range ptrs {
		if *p != 0 {
			live = append(live, *p)
			*p = 0
		}
	}
	if len(live) == 0 {
		return
	}
	_ = e.do(context.Background(), op, func() error {
		e.release(live...)
		return nil
	})
}
