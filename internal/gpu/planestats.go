//go:build cuda

package gpu

import (
	"context"
	"fmt"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// PlaneMeter measures H x W uint16 planes on the device as they pass
// through it (UploadPlaneGray16Measured, DownloadPlaneGray16Measured): per
// plane the integers of planestats.Of (histogram, Laplacian moments in
// blocks of Block px), brought back to the host, and over all planes their
// pixelwise maximum, kept on the device until MaxProjection. The fused
// cycle's QC without intermediates uses one per channel and direction.
type PlaneMeter struct {
	e             *Engine
	W, H, Block   int
	nx, ny        int
	hist, mom, mx cu.DevicePtr
	measured      int
}

// NewPlaneMeter allocates a meter of H x W planes in blocks of block px
// (its maximum starts at 0).
func (e *Engine) NewPlaneMeter(ctx context.Context, h, w, block int) (*PlaneMeter, error) {
	if h < 1 || w < 1 || block < 1 {
		return nil, fmt.Errorf("plane meter of %dx%d px in blocks of %d px", w, h, block)
	}
	m := &PlaneMeter{e: e, W: w, H: h, Block: block}
	m.nx, m.ny = planestats.Grid(w, h, block)
	err := e.do(ctx, "plane meter alloc", func() error {
		n := int64(h) * int64(w)
		m.hist = e.alloc(planestats.Bins * 8)
		m.mom = e.alloc(int64(m.nx*m.ny) * 24)
		m.mx = e.alloc(n * 2)
		cu.MemsetD8Async(m.mx, 0, n*2, e.compute)
		return nil
	})
	if err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// measure measures the uint16 plane q (H x W, on the device) and raises
// the maximum by it; on the engine thread.
func (m *PlaneMeter) measure(q cu.DevicePtr) *planestats.Measure {
	e := m.e
	n := int64(m.H) * int64(m.W)
	cu.MemsetD8Async(m.hist, 0, planestats.Bins*8, e.compute)
	e.launchPsHist(grid1(n), m.hist, q, n)
	e.launchPsLapMoments(dim{gx: m.nx, gy: m.ny, gz: 1, bx: 256, by: 1, bz: 1}, m.mom, q, m.H, m.W, m.Block)
	e.launchPsMaxU16(grid1(n), m.mx, q, n)
	r := planestats.New(m.W, m.H, m.Block)
	get(e, r.Hist, m.hist)
	mom := make([]int64, 3*m.nx*m.ny)
	get(e, mom, m.mom)
	for i := range r.Blocks {
		r.Blocks[i] = planestats.Moments{N: mom[3*i], S: mom[3*i+1], S2: uint64(mom[3*i+2])}
	}
	m.measured++
	return r
}

// MaxProjection returns the pixelwise maximum of the planes measured.
func (m *PlaneMeter) MaxProjection(ctx context.Context) (*raster.Gray16, error) {
	g := raster.NewGray16(m.W, m.H)
	err := m.e.do(ctx, "plane meter maximum", func() error {
		if m.mx == 0 {
			return fmt.Errorf("plane meter: freed")
		}
		get(m.e, g.Pix, m.mx)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Free gives the meter's device memory back; a second Free does nothing.
func (m *PlaneMeter) Free() {
	if m != nil {
		m.e.freeDevice("plane meter free", &m.hist, &m.mom, &m.mx)
	}
}

// check reports whether m can measure planes of stack d.
func (m *PlaneMeter) check(e *Engine, d *DevStack) error {
	if m == nil {
		return nil
	}
	if m.e != e || m.W != d.W || m.H != d.H || m.mx == 0 {
		return fmt.Errorf("plane meter of %dx%d px (freed: %t) for a stack of %dx%d", m.W, m.H, m.mx == 0, d.W, d.H)
	}
	return nil
}
