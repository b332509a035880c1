//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// hostMem is the engine's page-locked host memory: buffers the DMA engine
// reads and writes directly, so that uploads and downloads of planes held in
// them skip the copy through the staging buffers (a plane of 12676 x 7493
// px is 190 MB: 30-60 ms of memmove each way on one core). Freed buffers
// are kept by size and handed out again (page-locking is slow, and new Go
// memory is zeroed first); all are freed when the engine closes. Safe for
// concurrent use: NewPlane and FreePlane are called from host goroutines.
type hostMem struct {
	mu    sync.Mutex
	live  map[unsafe.Pointer]int64 // start -> bytes, every buffer allocated
	free  map[int64][]unsafe.Pointer
	bytes int64 // allocated in all
}

var _ raster.HostPlanes = (*Engine)(nil)

// NewPlane implements raster.HostPlanes: a w x h plane in the engine's
// page-locked memory (contents undefined), a given-back one when there is
// one (without waiting for the engine goroutine), else a new one.
func (e *Engine) NewPlane(ctx context.Context, w, h int) (*raster.Gray16, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("gpu: host plane of %dx%d px", w, h)
	}
	if g := e.host.take(w, h); g != nil {
		return g, nil
	}
	var g *raster.Gray16
	err := e.do(ctx, "host plane", func() error {
		g = e.newHostPlane(w, h)
		return nil
	})
	return g, err
}

// FreePlane implements raster.HostPlanes.
func (e *Engine) FreePlane(g *raster.Gray16) { e.host.freeHostPlane(g) }

// take returns a freed w x h plane, or nil when there is none (any
// goroutine).
func (m *hostMem) take(w, h int) *raster.Gray16 {
	n := int64(w) * int64(h) * 2
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.free[n]
	if len(l) == 0 {
		return nil
	}
	p := l[len(l)-1]
	m.free[n] = l[:len(l)-1]
	return &raster.Gray16{W: w, H: h, Pix: unsafe.Slice((*uint16)(p), w*h)}
}

// newHostPlane returns a w x h plane in page-locked memory (contents
// undefined): a freed one, else a new one. It runs on the engine goroutine
// (the context is current).
func (e *Engine) newHostPlane(w, h int) *raster.Gray16 {
	m := &e.host
	if g := m.take(w, h); g != nil {
		return g
	}
	n := int64(w) * int64(h) * 2
	p := cu.MemAllocHost(n)
	m.mu.Lock()
	if m.live == nil {
		m.live, m.free = map[unsafe.Pointer]int64{}, map[int64][]unsafe.Pointer{}
	}
	m.live[p] = n
	m.bytes += n
	m.mu.Unlock()
	return &raster.Gray16{W: w, H: h, Pix: unsafe.Slice((*uint16)(p), w*h)}
}

// freeHostPlane takes back a plane from newHostPlane for reuse; it ignores
// planes held elsewhere (Go memory). It reports whether it took it.
func (m *hostMem) freeHostPlane(g *raster.Gray16) bool {
	if g == nil || len(g.Pix) == 0 {
		return false
	}
	p := unsafe.Pointer(&g.Pix[0])
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.live[p]
	if !ok || n != int64(len(g.Pix))*2 {
		return false
	}
	for _, q := range m.free[n] {
		if q == p { // two owners of one buffer would corrupt each other
			panic("gpu: a host plane given back twice")
		}
	}
	m.free[n] = append(m.free[n], p)
	return true
}

// pinned reports whether the n bytes at p lie in one page-locked buffer.
func (m *hostMem) pinned(p unsafe.Pointer, n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := uintptr(p)
	for s, size := range m.live {
		if b := uintptr(s); a >= b && a+uintptr(n) <= b+uintptr(size) {
			return true
		}
	}
	return false
}

// release frees every buffer (the engine is closing; the context is
// current). Planes still in use must not be touched afterwards.
func (m *hostMem) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.live {
		cu.MemFreeHost(s)
	}
	m.live, m.free, m.bytes = nil, nil, 0
}

// allocated is the page-locked memory held, bytes.
func (m *hostMem) allocated() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
