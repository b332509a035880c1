//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"runtime"
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
	// The allocator goroutine (alloc), started at the first new buffer.
	startOnce sync.Once
	reqs      chan hostReq
	exited    chan struct{}

	mu    sync.Mutex
	live  map[unsafe.Pointer]int64 // start -> bytes, every buffer allocated
	free  map[int64][]unsafe.Pointer
	bytes int64 // allocated in all
}

var _ raster.HostPlanes = (*Engine)(nil)

// NewPlane implements raster.HostPlanes: a w x h plane in the engine's
// page-locked memory (contents undefined), a given-back one when there is
// one, else a new one. Neither waits for the engine goroutine: new buffers
// are page-locked by the allocator goroutine (hostMem), so a reader that
// needs a buffer is not queued behind a long GPU call, and the engine does
// not stop for the page-locking (about 2 ms per 5.5 MB tile).
func (e *Engine) NewPlane(ctx context.Context, w, h int) (*raster.Gray16, error) {
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("gpu: host plane of %dx%d px", w, h)
	}
	if g := e.host.take(w, h); g != nil {
		return g, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Held for reading while the allocator works: Close waits for it, and
	// the allocator is stopped only after Close (destroy).
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return nil, fmt.Errorf("gpu: host plane: %w", ErrClosed)
	}
	g, err := e.host.alloc(e.cuctx, w, h)
	if err != nil {
		return nil, fmt.Errorf("gpu: host plane: %w", err)
	}
	return g, nil
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

// hostReq asks the allocator goroutine for n bytes of page-locked memory.
type hostReq struct {
	n     int64
	reply chan hostRep
}

type hostRep struct {
	p   unsafe.Pointer
	err error
}

// alloc returns a new w x h plane in page-locked memory (contents
// undefined), made by the allocator goroutine, started at the first call
// with ctx current on its own locked OS thread (CUDA allocates page-locked
// memory for the context current on the calling thread).
func (m *hostMem) alloc(ctx cu.Context, w, h int) (*raster.Gray16, error) {
	n := int64(w) * int64(h) * 2
	m.startOnce.Do(func() {
		m.reqs, m.exited = make(chan hostReq), make(chan struct{})
		go allocLoop(ctx, m.reqs, m.exited)
	})
	r := hostReq{n: n, reply: make(chan hostRep, 1)}
	m.reqs <- r
	rep := <-r.reply
	if rep.err != nil {
		return nil, rep.err
	}
	m.mu.Lock()
	if m.live == nil {
		m.live, m.free = map[unsafe.Pointer]int64{}, map[int64][]unsafe.Pointer{}
	}
	m.live[rep.p] = n
	m.bytes += n
	m.mu.Unlock()
	return &raster.Gray16{W: w, H: h, Pix: unsafe.Slice((*uint16)(rep.p), w*h)}, nil
}

// allocLoop serves page-locked allocations until reqs is closed.
func allocLoop(ctx cu.Context, reqs <-chan hostReq, exited chan<- struct{}) {
	defer close(exited)
	// Locked until the goroutine exits: Go then retires the thread, so no
	// other goroutine runs where the context is current.
	runtime.LockOSThread()
	err := cudaCall(func() { cu.CtxSetCurrent(ctx) })
	for r := range reqs {
		if err != nil {
			r.reply <- hostRep{err: fmt.Errorf("make the context current: %w", err)}
			continue
		}
		var p unsafe.Pointer
		e := cudaCall(func() { p = cu.MemAllocHost(r.n) })
		r.reply <- hostRep{p: p, err: e}
	}
}

// stop ends the allocator goroutine, if it was started (the engine is
// closing: no NewPlane is in flight).
func (m *hostMem) stop() {
	if m.reqs != nil {
		close(m.reqs)
		<-m.exited
		m.reqs = nil
	}
}

// freeHostPlane takes back a plane from alloc for reuse; it ignores
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

// release stops the allocator and frees every buffer (the engine is
// closing; the context is current). Planes still in use must not be
// touched afterwards.
func (m *hostMem) release() {
	m.stop()
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
