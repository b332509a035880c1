package deconstage

import (
	"context"
	"fmt"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// runPlanes deconvolves job j on the engine's device-buffer form in
// modePlane: its planes go to the device as they are read (or from the
// planes read ahead, each dropped once sent), the stack, the iterates and
// the result stay there, and the result comes back rounded to uint16 (the
// same values as DeconvolveGray16): with behind, every plane into pages
// for the caller to write behind (once the previous channel's write-behind
// ended: waitBehind); else one plane per writer, written at once (nil
// pages).
func runPlanes(ctx context.Context, e PlaneEngine, j *job, in input, workers int, behind bool, c *Channel,
	waitBehind func() error, path func(z int) string) ([]*raster.Gray16, error) {
	n := j.n
	d, err := e.DeconDeviceStack(ctx, n, j.h, j.w)
	if err != nil {
		return nil, err
	}
	defer d.Free()
	if in.pages != nil {
		for z, pg := range in.pages {
			if err := d.PutGray16(ctx, z, pg); err != nil {
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
			return d.PutGray16(ctx, z, pg)
		})
		c.ReadSec = time.Since(t0).Seconds()
		if err != nil {
			return nil, err
		}
	}
	out, err := deconvolveOnDevice(ctx, e, j, d, c)
	if err != nil {
		return nil, err
	}
	defer out.Free()
	if err := waitBehind(); err != nil {
		return nil, err
	}
	if behind {
		pages := make([]*raster.Gray16, n)
		for z := range pages {
			pages[z] = raster.NewGray16(j.w, j.h)
			if err := out.GetGray16(ctx, z, pages[z]); err != nil {
				return nil, err
			}
		}
		return pages, nil
	}
	t2 := time.Now()
	err = downloadEach(ctx, out, j, workers, target{host: e}, func(z int, p Plane) error {
		return tiffio.WriteGray16(path(z), p.Gray)
	})
	if err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	c.WriteSec = time.Since(t2).Seconds()
	return nil, nil
}

// deconvolveOnDevice deconvolves job j's filled device stack d on e, frees
// d and records the stats and the time in c; the result stays on the
// device (the caller frees it).
func deconvolveOnDevice(ctx context.Context, e PlaneEngine, j *job, d decon.DeviceStack, c *Channel) (decon.DeviceStack, error) {
	t1 := time.Now()
	out, s, err := e.DeconvolveDeviceStack(ctx, d, j.k, j.p)
	d.Free()
	if err != nil {
		return nil, err
	}
	c.Stats = s
	c.Seconds = time.Since(t1).Seconds()
	return out, nil
}

// target is where downloadEach also puts the rounded planes on the device
// (the zero target: nowhere, the planes come to the host): to, an EDF
// device stack of out's engine, and meter measuring them there (either may
// be nil); deviceOnly: they do not come to the host. host, when not nil,
// is the engine whose page-locked planes (raster.HostPlanes) the host
// copies come into, by DMA, each given back after fn returns: set only
// where fn keeps no plane.
type target struct {
	to         edf.DeviceStack
	meter      planestats.Meter
	deviceOnly bool
	host       any
}

// downloadEach brings every plane of job j's result out back rounded to
// uint16 (workers at once) and hands each, plane z 0-based, to fn; with a
// target (out then is a meteredStack) also into it (Plane.InTarget) and
// measured there, the host copy (Plane.Gray) unless dt.deviceOnly.
func downloadEach(ctx context.Context, out decon.DeviceStack, j *job, workers int, dt target, fn func(z int, p Plane) error) error {
	return par.ForEach(ctx, j.n, workers, func(z int) error {
		p := Plane{InTarget: dt.to != nil}
		if !dt.deviceOnly {
			var err error
			if dt.host != nil {
				p.Gray, err = raster.NewPlane(ctx, dt.host, j.w, j.h)
				if err != nil {
					return err
				}
				defer raster.FreePlane(dt.host, p.Gray)
			} else {
				p.Gray = raster.NewGray16(j.w, j.h)
			}
		}
		var err error
		if dt.to != nil || dt.meter != nil {
			p.Measure, err = out.(meteredStack).GetGray16Into(ctx, z, dt.to, p.Gray, dt.meter)
		} else {
			err = out.GetGray16(ctx, z, p.Gray)
		}
		if err != nil {
			return err
		}
		return fn(z, p)
	})
}

// toCounts converts a uint16 plane into float32 counts (dst, len(src)).
func toCounts(dst []float32, src []uint16) {
	for i, v := range src {
		dst[i] = float32(v)
	}
}
