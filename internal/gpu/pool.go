//go:build cuda

package gpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
)

// pool keeps freed device buffers by size for reuse, so that a stage that
// runs the same shapes plane after plane allocates once. On an allocation
// failure it frees its cache and tries again once before reporting
// ErrOutOfMemory. Buffers go back to the pool right after the launches
// that use them are queued: everything runs on the compute stream, in
// order, so a recycled buffer is only written after earlier readers ran.
// Copies on the copy stream are ordered with events (stager).
type pool struct {
	free   map[int64][]cu.DevicePtr
	size   map[cu.DevicePtr]int64
	inUse  int64
	cached int64
	peak   int64
}

const allocAlign = 512

// alloc returns a device buffer of at least bytes bytes.
func (e *Engine) alloc(bytes int64) cu.DevicePtr {
	p := &e.pool
	if p.free == nil {
		p.free = map[int64][]cu.DevicePtr{}
		p.size = map[cu.DevicePtr]int64{}
	}
	if bytes <= 0 {
		bytes = allocAlign
	}
	bytes = (bytes + allocAlign - 1) / allocAlign * allocAlign
	if l := p.free[bytes]; len(l) > 0 {
		ptr := l[len(l)-1]
		p.free[bytes] = l[:len(l)-1]
		p.cached -= bytes
		p.inUse += bytes
		return ptr
	}
	ptr, ok := tryAlloc(bytes)
	if !ok && p.cached > 0 {
		e.sync()
		p.drain()
		ptr, ok = tryAlloc(bytes)
	}
	if !ok {
		free, total := cu.MemGetInfo()
		panic(&oomError{bytes: bytes, free: free, total: total, pool: p.inUse})
	}
	p.size[ptr] = bytes
	p.inUse += bytes
	if t := p.inUse + p.cached; t > p.peak {
		p.peak = t
	}
	e.sample()
	return ptr
}

// oomError carries the figures of a failed allocation; it is converted to
// an *Error wrapped with them.
type oomError struct{ bytes, free, total, pool int64 }

func tryAlloc(bytes int64) (ptr cu.DevicePtr, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if r, isRes := v.(cu.Result); isRes && r == cu.ERROR_OUT_OF_MEMORY {
				ok = false
				return
			}
			panic(v)
		}
	}()
	return cu.MemAlloc(bytes), true
}

// release returns a buffer from alloc to the pool.
func (e *Engine) release(ptrs ...cu.DevicePtr) {
	p := &e.pool
	for _, ptr := range ptrs {
		if ptr == 0 {
			continue
		}
		n, ok := p.size[ptr]
		if !ok {
			panic("gpu: release of a buffer the pool did not allocate")
		}
		p.free[n] = append(p.free[n], ptr)
		p.inUse -= n
		p.cached += n
	}
}

// drain frees every cached buffer. The caller synchronises first.
func (p *pool) drain() {
	for n, l := range p.free {
		for _, ptr := range l {
			cu.MemFree(ptr)
			delete(p.size, ptr)
			p.cached -= n
		}
		delete(p.free, n)
	}
}

// stager moves data between Go memory and the device through pinned host
// buffers: helper goroutines copy Go memory into one staging buffer while
// the DMA engine drains another on the copy stream, and the compute stream
// waits for the copies with an event, so the host keeps working while the
// GPU computes.
type stager struct {
	buf   []unsafe.Pointer
	ev    []event
	done  event // copy stream -> compute stream
	cdone event // compute stream -> copy stream
	next  int
}

const (
	stageBufs  = 4
	stageBytes = 32 << 20
	stagePiece = 4 << 20 // host copies run in parallel per piece
)

func (s *stager) init() {
	for i := 0; i < stageBufs; i++ {
		s.buf = append(s.buf, cu.MemAllocHost(stageBytes))
		ev := eventCreate()
		ev.record(0)
		s.ev = append(s.ev, ev)
	}
	s.done = eventCreate()
	s.cdone = eventCreate()
}

func (s *stager) free() {
	for i := range s.buf {
		cu.MemFreeHost(s.buf[i])
		s.ev[i].destroy()
	}
	s.buf, s.ev = nil, nil
	for _, ev := range []*event{&s.done, &s.cdone} {
		if *ev != 0 {
			ev.destroy()
			*ev = 0
		}
	}
}

// hostSeg is one contiguous host range and its device destination/source.
type hostSeg struct {
	host unsafe.Pointer
	dev  cu.DevicePtr
	n    int64 // bytes
}

// upload copies host segments to the device. It returns when the host
// memory may be reused; the compute stream is ordered after the copies.
func (e *Engine) upload(segs []hostSeg) {
	s := &e.stage
	segs, direct := e.splitPinned(segs)
	if len(direct) > 0 {
		s.cdone.record(e.compute)
		streamWait(e.copy, s.cdone)
		for _, sg := range direct {
			cu.MemcpyHtoDAsync(sg.dev, sg.host, sg.n, e.copy)
		}
		defer s.done.synchronize() // the host memory may be reused on return
	}
	type piece struct {
		off int64 // in the staging buffer
		seg hostSeg
	}
	var pieces []piece
	var used int64
	// Device buffers may be recycled from work still queued on the compute
	// stream: the copies start after it.
	s.cdone.record(e.compute)
	streamWait(e.copy, s.cdone)
	flush := func() {
		if len(pieces) == 0 {
			return
		}
		k := s.next
		s.next = (s.next + 1) % len(s.buf)
		s.ev[k].synchronize() // the last DMA out of buffer k is done
		base := s.buf[k]
		parallelFor(len(pieces), func(i int) {
			pc := pieces[i]
			copyBytes(unsafe.Add(base, pc.off), pc.seg.host, pc.seg.n)
		})
		for _, pc := range pieces {
			cu.MemcpyHtoDAsync(pc.seg.dev, unsafe.Add(base, pc.off), pc.seg.n, e.copy)
		}
		s.ev[k].record(e.copy)
		pieces, used = pieces[:0], 0
	}
	for _, sg := range segs {
		for sg.n > 0 {
			room := stageBytes - used
			if room == 0 {
				flush()
				continue
			}
			n := min(room, sg.n, stagePiece)
			pieces = append(pieces, piece{off: used, seg: hostSeg{host: sg.host, dev: sg.dev, n: n}})
			used += n
			sg.host = unsafe.Add(sg.host, n)
			sg.dev += cu.DevicePtr(n)
			sg.n -= n
		}
	}
	flush()
	s.done.record(e.copy)
	streamWait(e.compute, s.done)
}

// uploadAsync is upload for page-locked host memory without the wait: the
// copies go on the up stream and the returned event completes when they
// have (the host memory must stay as it is until then; the compute stream
// is not ordered after them: streamWait on the event first). Segments not
// all page-locked are uploaded by upload, and the event is 0.
func (e *Engine) uploadAsync(segs []hostSeg) event {
	if staged, _ := e.splitPinned(segs); len(staged) > 0 {
		e.upload(segs)
		return 0
	}
	if e.up == 0 {
		e.up = cu.StreamCreate()
	}
	// The device buffers may be recycled from work still queued on the
	// compute stream: the copies start after it.
	s := &e.stage
	s.cdone.record(e.compute)
	streamWait(e.up, s.cdone)
	for _, sg := range segs {
		cu.MemcpyHtoDAsync(sg.dev, sg.host, sg.n, e.up)
	}
	ev := eventCreate()
	ev.record(e.up)
	return ev
}

// download copies device ranges (written by the compute stream) into host
// segments and returns when the host memory holds the data.
func (e *Engine) download(segs []hostSeg) {
	s := &e.stage
	s.cdone.record(e.compute)
	streamWait(e.copy, s.cdone)
	segs, direct := e.splitPinned(segs)
	for _, sg := range direct {
		cu.MemcpyDtoHAsync(sg.host, sg.dev, sg.n, e.copy)
	}
	if len(direct) > 0 {
		defer func() {
			s.done.record(e.copy)
			s.done.synchronize()
		}()
	}
	type piece struct {
		off int64
		seg hostSeg
	}
	type batch struct {
		k      int
		pieces []piece
	}
	var pending []batch
	drain := func(b batch) {
		s.ev[b.k].synchronize()
		base := s.buf[b.k]
		parallelFor(len(b.pieces), func(i int) {
			pc := b.pieces[i]
			copyBytes(pc.seg.host, unsafe.Add(base, pc.off), pc.seg.n)
		})
	}
	var cur batch
	var used int64
	issue := func() {
		if len(cur.pieces) == 0 {
			return
		}
		for _, pc := range cur.pieces {
			cu.MemcpyDtoHAsync(unsafe.Add(s.buf[cur.k], pc.off), pc.seg.dev, pc.seg.n, e.copy)
		}
		s.ev[cur.k].record(e.copy)
		pending = append(pending, cur)
		// Keep at most len(buf)-1 batches in flight; drain the oldest.
		if len(pending) >= len(s.buf)-1 {
			drain(pending[0])
			pending = pending[1:]
		}
		s.next = (cur.k + 1) % len(s.buf)
		cur = batch{k: s.next}
		used = 0
	}
	cur.k = s.next
	for _, sg := range segs {
		for sg.n > 0 {
			room := stageBytes - used
			if room == 0 {
				issue()
				continue
			}
			n := min(room, sg.n, stagePiece)
			cur.pieces = append(cur.pieces, piece{off: used, seg: hostSeg{host: sg.host, dev: sg.dev, n: n}})
			used += n
			sg.host = unsafe.Add(sg.host, n)
			sg.dev += cu.DevicePtr(n)
			sg.n -= n
		}
	}
	issue()
	for _, b := range pending {
		drain(b)
	}
}

// splitPinned separates the segments whose host memory is page-locked
// (hostMem), which the DMA engine copies directly, from the rest, which go
// through the staging buffers.
func (e *Engine) splitPinned(segs []hostSeg) (staged, direct []hostSeg) {
	for _, sg := range segs {
		if sg.n >= directMin && e.host.pinned(sg.host, sg.n) {
			direct = append(direct, sg)
		} else {
			staged = append(staged, sg)
		}
	}
	return staged, direct
}

// directMin is the smallest segment looked up in hostMem: below it the
// staging copy costs less than the lookup.
const directMin = 64 << 10

func copyBytes(dst, src unsafe.Pointer, n int64) {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}

// parallelFor runs f(0..n-1) on up to GOMAXPROCS goroutines (host work
// only: these goroutines never call CUDA).
func parallelFor(n int, f func(i int)) {
	w := min(runtime.GOMAXPROCS(0), n, 16)
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// Unwrap lets errors.Is(err, ErrOutOfMemory) match.
func (o *oomError) Unwrap() error {
	return &Error{Lib: "cuda", Code: int(cu.ERROR_OUT_OF_MEMORY), Name: cu.ERROR_OUT_OF_MEMORY.String()}
}

func (o *oomError) Error() string {
	return fmt.Sprintf("alloc %s: %d MiB free of %d MiB, %d MiB held by this engine",
		fmtBytes(o.bytes), o.free>>20, o.total>>20, o.pool>>20)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
