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

// Blender is the GPU blend.Blender: one thread per mosaic pixel gathers the
// tiles that cover it and computes sum(tile·w)/sum(w) (0 where no tile
// covers), with blend.Taper's float64 tapers and float64 sums in tile order,
// the same arithmetic as blend.CPU (bit-identical up to the compiler).
type Blender struct{ e *Engine }

// Blend implements blend.Blender.
func (b *Blender) Blend(ctx context.Context, tiles []*raster.Float32, pos []raster.Point, p blend.Params) (*raster.Float32, error) {
	g, err := blendGeomFloat32(tiles, pos, p)
	if err != nil {
		return nil, err
	}
	h, w := tiles[0].H, tiles[0].W
	out := raster.NewFloat32(g.outW, g.outH)
	err = b.e.do(ctx, "blend", func() error {
		plane := int64(h) * int64(w)
		src := b.e.alloc(int64(len(tiles)) * plane * 4)
		defer b.e.release(src)
		segs := make([]hostSeg, len(tiles))
		for i, t := range tiles {
			segs[i] = hostSeg{host: unsafe.Pointer(&t.Pix[0]), dev: src + cu.DevicePtr(int64(i)*plane*4), n: plane * 4}
		}
		b.e.upload(segs)
		dg := b.e.putGeom(g)
		defer dg.free(b.e)
		dst := b.e.alloc(int64(len(out.Pix)) * 4)
		defer b.e.release(dst)
		b.e.launchBlendF32(g.grid(), dst, cu.DevicePtr(0), src, len(tiles), h, w, g.outH, g.outW,
			dg.py, dg.px, dg.ty, dg.tx)
		get(b.e, out.Pix, dst)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CorrectAndBlend corrects raw tiles (counts) with prof,
// clip((x/65535 - dark)/max(flat, flatMin), 0, 1), blends them at pos and
// returns the mosaic in counts (raster.Quantize16 of the float mosaic): the
// stitch stage's per-plane work in one pass over the tiles, the same
// arithmetic as Quantize16(blend.CPU.Blend(stitch.Correct(tiles))).
func (e *Engine) CorrectAndBlend(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32, pos []raster.Point, p blend.Params) (*raster.Gray16, error) {
	if err := checkRaw(tiles, prof); err != nil {
		return nil, err
	}
	h, w := prof.H, prof.W
	g, err := blendGeomSize(len(tiles), h, w, pos, p)
	if err != nil {
		return nil, err
	}
	out := raster.NewGray16(g.outW, g.outH)
	err = e.do(ctx, "correct and blend", func() error {
		src := e.uploadTiles(tiles)
		defer e.release(src)
		e.blendRaw(g, src, len(tiles), h, w, prof, flatMin, out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Correct corrects raw tiles (counts) with prof into float32 intensities,
// clip((x/65535 - dark)/max(flat, flatMin), 0, 1), as stitch.Correct.
func (e *Engine) Correct(ctx context.Context, tiles []*raster.Gray16, prof *basic.Profile, flatMin float32) ([]*raster.Float32, error) {
	if err := checkRaw(tiles, prof); err != nil {
		return nil, err
	}
	h, w := prof.H, prof.W
	out := make([]*raster.Float32, len(tiles))
	for i := range out {
		out[i] = raster.NewFloat32(w, h)
	}
	err := e.do(ctx, "correct", func() error {
		src, flat, dark := e.uploadRaw(tiles, prof)
		defer e.release(src, flat, dark)
		plane := int64(h) * int64(w)
		n := int64(len(tiles)) * plane
		dst := e.alloc(n * 4)
		defer e.release(dst)
		e.launchCorrectU16(grid1(n), dst, src, flat, dark, plane, n, norm16, flatMin)
		segs := make([]hostSeg, len(tiles))
		for i, t := range out {
			segs[i] = hostSeg{host: unsafe.Pointer(&t.Pix[0]), dev: dst + cu.DevicePtr(int64(i)*plane*4), n: plane * 4}
		}
		e.download(segs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func checkRaw(tiles []*raster.Gray16, prof *basic.Profile) error {
	if prof == nil || prof.W < 1 || prof.H < 1 || len(prof.Flatfield) != prof.W*prof.H || len(prof.Darkfield) != prof.W*prof.H {
		return fmt.Errorf("correct: missing or malformed profile")
	}
	if len(tiles) == 0 {
		return fmt.Errorf("correct: no tiles")
	}
	for i, t := range tiles {
		if t == nil || t.W != prof.W || t.H != prof.H || len(t.Pix) != t.W*t.H {
			return fmt.Errorf("correct: tile %d is missing or not the profile's %dx%d", i+1, prof.W, prof.H)
		}
	}
	return nil
}

// uploadRaw uploads raw tiles and the profile (engine goroutine).
func (e *Engine) uploadRaw(tiles []*raster.Gray16, prof *basic.Profile) (src, flat, dark cu.DevicePtr) {
	src = e.uploadTiles(tiles)
	flat, dark = e.uploadProfile(prof)
	return src, flat, dark
}

// uploadTiles copies equal-size uint16 tiles to a new device buffer, back
// to back; on the engine thread.
func (e *Engine) uploadTiles(tiles []*raster.Gray16) cu.DevicePtr {
	plane := int64(tiles[0].H) * int64(tiles[0].W)
	src := e.alloc(int64(len(tiles)) * plane * 2)
	segs := make([]hostSeg, len(tiles))
	for i, t := range tiles {
		segs[i] = hostSeg{host: unsafe.Pointer(&t.Pix[0]), dev: src + cu.DevicePtr(int64(i)*plane*2), n: plane * 2}
	}
	e.upload(segs)
	return src
}

// uploadProfile copies a profile's flatfield and darkfield to new device
// buffers; on the engine thread.
func (e *Engine) uploadProfile(prof *basic.Profile) (flat, dark cu.DevicePtr) {
	plane := int64(prof.H) * int64(prof.W)
	flat, dark = e.alloc(plane*4), e.alloc(plane*4)
	e.upload([]hostSeg{
		{host: unsafe.Pointer(&prof.Flatfield[0]), dev: flat, n: plane * 4},
		{host: unsafe.Pointer(&prof.Darkfield[0]), dev: dark, n: plane * 4}})
	return flat, dark
}

// blendRaw corrects n raw tiles of h x w on the device (src) with prof and
// blends them by g into out (rounded counts); on the engine thread.
func (e *Engine) blendRaw(g *blendGeom, src cu.DevicePtr, n, h, w int, prof *basic.Profile, flatMin float32, out *raster.Gray16) {
	dst := e.alloc(int64(len(out.Pix)) * 2)
	defer e.release(dst)
	e.blendRawInto(g, src, n, h, w, prof, flatMin, dst)
	get(e, out.Pix, dst)
}

// blendRawInto is blendRaw into the device buffer dst (g.outH x g.outW
// uint16 counts); on the engine thread.
func (e *Engine) blendRawInto(g *blendGeom, src cu.DevicePtr, n, h, w int, prof *basic.Profile, flatMin float32, dst cu.DevicePtr) {
	flat, dark := e.uploadProfile(prof)
	defer e.release(flat, dark)
	dg := e.putGeom(g)
	defer dg.free(e)
	e.launchCorrectBlendU16(g.grid(), cu.DevicePtr(0), dst, src, flat, dark, norm16, flatMin,
		n, h, w, g.outH, g.outW, dg.py, dg.px, dg.ty, dg.tx)
}

// devGeom is a blendGeom on the device.
type devGeom struct{ py, px, ty, tx cu.DevicePtr }

func (e *Engine) putGeom(g *blendGeom) devGeom {
	d := devGeom{py: e.alloc(int64(len(g.py)) * 4), px: e.alloc(int64(len(g.px)) * 4),
		ty: e.alloc(int64(len(g.ty)) * 8), tx: e.alloc(int64(len(g.tx)) * 8)}
	put(e, d.py, g.py)
	put(e, d.px, g.px)
	put(e, d.ty, g.ty)
	put(e, d.tx, g.tx)
	return d
}

func (d devGeom) free(e *Engine) { e.release(d.py, d.px, d.ty, d.tx) }

func (g *blendGeom) grid() dim {
	return grid32x8(g.outW, g.outH, 32, 8, 0)
}
