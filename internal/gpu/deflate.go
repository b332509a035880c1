//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// HuffmanTiles implements ometiff.Coder on the device (kernels/deflate.cu):
// img goes to the card, df_count predicts its tiles there and counts each
// block's bytes, plan (on the calling goroutine, the engine free meanwhile)
// fits the codes, and df_code writes the coded bits, which come back as
// one buffer. The predicted bytes stay on the card between the two
// kernels: device memory is about 2·2·ts² bytes per tile (predicted and
// coded) plus the image. The same bytes as ometiff.CPUCoder.
func (e *Engine) HuffmanTiles(ctx context.Context, img *raster.Gray16, ts int,
	plan func(hist []uint32, sums []uint64) (lut []uint32, at []int64, n int, err error)) ([]byte, error) {
	if img == nil || ts < 1 || len(img.Pix) != img.W*img.H || img.W < 1 {
		return nil, fmt.Errorf("gpu: huffman tiles: bad image or tile size %d", ts)
	}
	across, down, bpt := ometiff.CodeGrid(img.W, img.H, ts)
	tb := 2 * int64(ts) * int64(ts)
	nb := across * down * bpt
	hist := make([]uint32, 256*nb)
	sums := make([]uint64, 2*nb)
	var dImg, dPred, dHist, dSums, dLut, dAt, dOut cu.DevicePtr
	defer e.freeDevice("huffman tiles free", &dImg, &dPred, &dHist, &dSums, &dLut, &dAt, &dOut)
	blocks := dim{gx: nb, gy: 1, gz: 1, bx: 256, by: 1, bz: 1}
	err := e.do(ctx, "huffman tiles count", func() error {
		dImg = e.alloc(int64(len(img.Pix)) * 2)
		put(e, dImg, img.Pix)
		dPred = e.alloc(int64(across*down) * tb)
		dHist = e.alloc(int64(len(hist)) * 4)
		dSums = e.alloc(int64(len(sums)) * 8)
		e.launchDfCount(blocks, dPred, dHist, dSums, dImg, img.H, img.W, ts, across, bpt, ometiff.CodeBlock)
		get(e, hist, dHist)
		get(e, sums, dSums)
		e.release(dImg, dHist, dSums)
		dImg, dHist, dSums = 0, 0, 0
		return nil
	})
	if err != nil {
		return nil, err
	}
	lut, at, n, err := plan(hist, sums)
	if err != nil {
		return nil, err
	}
	if len(lut) != 256*nb || len(at) != nb || n < 0 {
		return nil, fmt.Errorf("gpu: huffman tiles: plan gave %d codes, %d positions for %d blocks", len(lut), len(at), nb)
	}
	words := make([]uint32, (n+3)/4+1) // the last word may take a run's final OR
	err = e.do(ctx, "huffman tiles code", func() error {
		dLut = e.alloc(int64(len(lut)) * 4)
		put(e, dLut, lut)
		dAt = e.alloc(int64(nb) * 8)
		put(e, dAt, at)
		dOut = e.alloc(int64(len(words)) * 4)
		cu.MemsetD8Async(dOut, 0, int64(len(words))*4, e.compute)
		e.launchDfCode(blocks, dOut, dPred, dLut, dAt, ts, bpt, ometiff.CodeBlock)
		get(e, words, dOut)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4*len(words))[:n:n], nil
}

// HuffmanTiles is the engine's (ometiff.Coder): the registration stage
// finds it on its backend and codes the OME-TIFF's tiles on the card.
func (r *Registrar) HuffmanTiles(ctx context.Context, img *raster.Gray16, ts int,
	plan func(hist []uint32, sums []uint64) (lut []uint32, at []int64, n int, err error)) ([]byte, error) {
	return r.e.HuffmanTiles(ctx, img, ts, plan)
}
