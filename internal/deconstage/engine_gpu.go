package deconstage

import (
	"context"
	"fmt"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// GPUEngine runs the stage on the CUDA engine. In a binary built without
// the cuda tag, OpenGPU fails with gpu.ErrNoCUDA: there is no CPU fallback.
type GPUEngine struct {
	e *gpu.Engine
	d decon.Deconvolver
}

// OpenGPU opens GPU index (among the visible devices).
func OpenGPU(index int, debug bool) (*GPUEngine, error) {
	e, err := gpu.Open(gpu.Options{Device: index, Debug: debug})
	if err != nil {
		return nil, fmt.Errorf("open GPU %d: %w", index, err)
	}
	return NewGPUEngine(e), nil
}

// NewGPUEngine runs the stage on the open engine e; closing the result
// closes e.
func NewGPUEngine(e *gpu.Engine) *GPUEngine { return &GPUEngine{e: e, d: e.Deconvolver()} }

// Name describes the device.
func (g *GPUEngine) Name() string { return "gpu " + g.e.Device() }

// Close releases the GPU.
func (g *GPUEngine) Close() error { return g.e.Close() }

// MemInfo reports device memory figures.
func (g *GPUEngine) MemInfo() (gpu.MemStats, error) { return g.e.MemInfo() }

// Deconvolve implements decon.Deconvolver on the GPU.
func (g *GPUEngine) Deconvolve(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, error) {
	return g.d.Deconvolve(ctx, in, k, p)
}

// DeconvolveGray16 deconvolves and rounds on the device (see Gray16Engine).
func (g *GPUEngine) DeconvolveGray16(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) ([]*raster.Gray16, decon.Stats, error) {
	return g.e.DeconvolveGray16(ctx, in, k, p)
}

// runPlanes deconvolves job j on the device in modePlane: its planes go to
// the device as they are read (or from the planes read ahead, each dropped
// once sent), the stack, the iterates and the result stay there, and the
// result comes back rounded to uint16 (the same values as
// DeconvolveGray16): with behind, every plane into pages for the caller to
// write behind (once the previous channel's write-behind ended:
// waitBehind); else one plane per writer, written at once (nil pages).
func runPlanes(ctx context.Context, e *gpu.Engine, j *job, in input, workers int, behind bool, c *Channel,
	waitBehind func() error, path func(z int) string) ([]*raster.Gray16, error) {
	n := len(j.paths)
	d, err := e.AllocStack(ctx, n, j.h, j.w)
	if err != nil {
		return nil, err
	}
	defer e.FreeStack(d)
	if in.pages != nil {
		for z, pg := range in.pages {
			if err := e.UploadPlaneGray16(ctx, d, z, pg); err != nil {
				return nil, err
			}
			in.pages[z] = nil
		}
	} else {
		t0 := time.Now()
		err := par.ForEach(ctx, n, workers, func(z int) error {
			pg, err := readPlane(j.paths[z], j.w, j.h)
			if err != nil {
				return err
			}
			return e.UploadPlaneGray16(ctx, d, z, pg)
		})
		c.ReadSec = time.Since(t0).Seconds()
		if err != nil {
			return nil, err
		}
	}
	t1 := time.Now()
	out, s, err := e.DeconvolveDevice(ctx, d, j.k, j.p)
	e.FreeStack(d)
	if err != nil {
		return nil, err
	}
	defer e.FreeStack(out)
	c.Stats = s
	c.Seconds = time.Since(t1).Seconds()
	if err := waitBehind(); err != nil {
		return nil, err
	}
	if behind {
		pages := make([]*raster.Gray16, n)
		for z := range pages {
			pages[z] = raster.NewGray16(j.w, j.h)
			if err := e.DownloadPlaneGray16(ctx, out, z, pages[z]); err != nil {
				return nil, err
			}
		}
		return pages, nil
	}
	t2 := time.Now()
	err = par.ForEach(ctx, n, workers, func(z int) error {
		pg := raster.NewGray16(j.w, j.h)
		if err := e.DownloadPlaneGray16(ctx, out, z, pg); err != nil {
			return err
		}
		return tiffio.WriteGray16(path(z), pg)
	})
	if err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	c.WriteSec = time.Since(t2).Seconds()
	return nil, nil
}
