//go:build cuda

package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/mumax/3/cuda/cu"
	"github.com/mumax/3/cuda/cufft"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
)

// Built reports whether this binary has the CUDA engine (-tags cuda).
const Built = true

// Engine owns one GPU: a CUDA context current on one locked OS thread, the
// kernels, two streams (compute, of the greatest priority, and copy; a
// lane's compute stream has the least), a buffer pool, pinned staging
// buffers and cuFFT plans. All of it is touched only by the engine's
// goroutine; exported methods hand it closures and wait.
type Engine struct {
	opts Options
	desc string

	mu     sync.RWMutex // held for reading while a call is submitted
	closed bool
	jobs   chan job
	exited chan struct{}

	// Owned by the engine goroutine.
	dev     cu.Device
	cuctx   cu.Context
	compute cu.Stream
	copy    cu.Stream
	up      cu.Stream // UploadTiles' copies (made at the first), beside copy's
	fns     map[string]cu.Function
	pool    pool
	stage   stager
	host    hostMem // page-locked planes (NewPlane); its own lock
	plans   map[planKey]cufft.Handle
	op      string // operation in progress, for error messages
	broken  bool
	devPeak int64
	total   int64
	busy    map[string]*OpTime // time per op, for Busy

	// feeder is the engine a lane (Lane) was made from, nil for an
	// engine of its own context; lanes are the lanes made from this one
	// (under mu), closed before it; xev orders this engine's compute
	// stream after another's (waitFor).
	feeder *Engine
	lanes  []*Engine
	xev    event
}

type job struct {
	op   string
	fn   func() error
	done chan result
}

type result struct {
	err      error
	panicked any
	stack    []byte
}

// Open creates the CUDA context on the device opts.Device (an index among
// the devices CUDA_VISIBLE_DEVICES leaves visible), loads the kernels and
// returns the engine. It fails with a clear error when there is no driver
// usable, no visible device, or the index is out of range; it never falls
// back to the CPU.
func Open(opts Options) (*Engine, error) {
	e := &Engine{
		opts:   opts,
		jobs:   make(chan job),
		exited: make(chan struct{}),
		fns:    map[string]cu.Function{},
		plans:  map[planKey]cufft.Handle{},
		busy:   map[string]*OpTime{},
	}
	if err := e.start("open"); err != nil {
		return nil, err
	}
	return e, nil
}

// start runs e's goroutine and waits for its init (what names it in a
// panic).
func (e *Engine) start(what string) error {
	ready := make(chan result, 1)
	go e.loop(ready)
	if r := <-ready; r.err != nil || r.panicked != nil {
		<-e.exited
		if r.panicked != nil {
			panic(fmt.Sprintf("gpu: %s: %v\n%s", what, r.panicked, r.stack))
		}
		return r.err
	}
	return nil
}

// Lane returns a second engine on e's CUDA context: a goroutine of its own
// (a locked OS thread with the context current) with its own streams,
// staging buffers, buffer pool, cuFFT plans and page-locked planes, so that
// its calls run on the GPU beside e's instead of after them (the fused
// cycle deconvolves and fuses one channel on a lane while e stitches the
// next). The lane's DeconDeviceStack makes its stacks on e, which fills
// them (the stitch stage's planes are e's); DeconvolveDeviceStack on the
// lane starts after the work e has queued and ends with its own done, so
// that the stack may go back to e's pool. e.Close closes its lanes first.
func (e *Engine) Lane() (*Engine, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("gpu: lane: %w", ErrClosed)
	}
	if e.feeder != nil {
		return nil, fmt.Errorf("gpu: a lane of a lane")
	}
	l := &Engine{
		opts:   e.opts,
		desc:   e.desc,
		jobs:   make(chan job),
		exited: make(chan struct{}),
		fns:    e.fns, // read only after Open
		plans:  map[planKey]cufft.Handle{},
		busy:   map[string]*OpTime{},
		feeder: e,
		dev:    e.dev,
		cuctx:  e.cuctx,
		total:  e.total,
	}
	if err := l.start("lane"); err != nil {
		return nil, fmt.Errorf("gpu: lane: %w", err)
	}
	e.lanes = append(e.lanes, l)
	return l, nil
}

// stackOwner is the engine whose pool holds the lane's input stacks (its
// feeder; e itself for an engine of its own context).
func (e *Engine) stackOwner() *Engine {
	if e.feeder != nil {
		return e.feeder
	}
	return e
}

// afterFeeder orders e's later work after the work its feeder has queued.
func (e *Engine) afterFeeder(ctx context.Context) error {
	return e.do(ctx, "wait for the feeder", func() error {
		e.waitFor(e.feeder)
		return nil
	})
}

// drain waits for e's queued work (even when a context was cancelled: the
// buffers it reads may be freed next).
func (e *Engine) drain() {
	_ = e.do(context.Background(), "drain", func() error {
		e.sync()
		return nil
	})
}

// waitFor orders later work on e's compute stream after the work queued
// on o's so far (o: e's feeder or lane, same context; engine goroutine).
func (e *Engine) waitFor(o *Engine) {
	e.xev.record(o.compute)
	streamWait(e.compute, e.xev)
}

// Close releases the GPU (a lane: its streams and buffers), its lanes
// first. Calls in flight finish first; later calls return ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	lanes := e.lanes
	e.lanes = nil
	e.mu.Unlock()
	for _, l := range lanes {
		_ = l.Close()
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.jobs)
	e.mu.Unlock()
	<-e.exited
	return nil
}

// Name says which device and implementation run, for logs and the stages'
// sentinels ("gpu " and Device, as the registration backend's).
func (e *Engine) Name() string { return "gpu " + e.desc }

// Device describes the GPU, e.g. "NVIDIA H200 (cc 9.0, 139.8 GiB, driver 13.0, visible index 0, CUDA_VISIBLE_DEVICES=3)".
func (e *Engine) Device() string { return e.desc }

// BaSiC returns the GPU BaSiC fitter (basic.Fitter). Fit batches all the
// stacks of one call into one set of inner iterations.
func (e *Engine) BaSiC() basic.Fitter { return &BaSiC{e: e} }

// Translator returns the GPU pair translator (align.PairTranslator).
func (e *Engine) Translator() align.PairTranslator { return &Translator{e: e} }

// Blender returns the GPU blender (blend.Blender).
func (e *Engine) Blender() blend.Blender { return &Blender{e: e} }

// Busy returns the engine goroutine's time per op since Open, most time
// first (the op of Busy itself excluded), its lanes' ops among them named
// "lane OP".
func (e *Engine) Busy() ([]OpTime, error) {
	var ops []OpTime
	err := e.do(context.Background(), "busy", func() error {
		for _, t := range e.busy {
			ops = append(ops, *t)
		}
		return nil
	})
	e.mu.RLock()
	lanes := e.lanes
	e.mu.RUnlock()
	for _, l := range lanes { // a lane's ops as "lane OP"
		lo, lerr := l.Busy()
		for _, t := range lo {
			t.Op = "lane " + t.Op
			ops = append(ops, t)
		}
		err = cmp.Or(err, lerr)
	}
	slices.SortFunc(ops, func(a, b OpTime) int { return cmp.Compare(b.Seconds, a.Seconds) })
	return ops, err
}

// account adds d to op's time.
func (e *Engine) account(op string, d time.Duration) {
	if op == "busy" {
		return
	}
	t := e.busy[op]
	if t == nil {
		t = &OpTime{Op: op}
		e.busy[op] = t
	}
	t.Calls++
	t.Seconds += d.Seconds()
}

// MemInfo returns device-memory figures.
func (e *Engine) MemInfo() (MemStats, error) {
	var s MemStats
	err := e.do(context.Background(), "meminfo", func() error {
		e.sample()
		s.Free, s.Total = cu.MemGetInfo()
		s.PoolInUse, s.PoolCached, s.PoolPeak = e.pool.inUse, e.pool.cached, e.pool.peak
		s.DevicePeak = e.devPeak
		return nil
	})
	return s, err
}

// ResetPeak starts a new peak-memory measurement (pool and device).
func (e *Engine) ResetPeak() error {
	return e.do(context.Background(), "resetpeak", func() error {
		e.pool.peak = e.pool.inUse + e.pool.cached
		free, total := cu.MemGetInfo()
		e.devPeak = total - free
		return nil
	})
}

// Trim frees the buffers the pool keeps for reuse.
func (e *Engine) Trim() error {
	return e.do(context.Background(), "trim", func() error {
		e.sync()
		e.pool.drain()
		return nil
	})
}

// do runs fn on the engine goroutine and returns its error, wrapped with op.
// A panic of mumax's cu or cufft (a CUDA failure) becomes an *Error; any
// other panic is re-raised in the caller's goroutine.
func (e *Engine) do(ctx context.Context, op string, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return fmt.Errorf("gpu: %s: %w", op, ErrClosed)
	}
	done := make(chan result, 1)
	e.jobs <- job{op: op, fn: fn, done: done}
	e.mu.RUnlock()
	r := <-done
	if r.panicked != nil {
		panic(fmt.Sprintf("gpu: %s: %v\n[engine goroutine stack]\n%s", op, r.panicked, r.stack))
	}
	return r.err
}

func (e *Engine) loop(ready chan<- result) {
	defer close(e.exited)
	// The context is current on this OS thread only. The thread stays
	// locked until the goroutine exits, so Go retires it afterwards and
	// no other goroutine ever runs on a thread with our context current.
	runtime.LockOSThread()
	r := e.exec("open", e.init)
	if r.err != nil || r.panicked != nil {
		e.destroy()
		ready <- r
		return
	}
	ready <- r
	for j := range e.jobs {
		t0 := time.Now()
		r := e.exec(j.op, j.fn)
		e.account(j.op, time.Since(t0))
		j.done <- r
	}
	e.destroy()
}

func (e *Engine) exec(op string, fn func() error) (r result) {
	if e.broken {
		r.err = fmt.Errorf("gpu: %s: %w", op, ErrBroken)
		return r
	}
	e.op = op
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		var cerr error
		if o, ok := v.(*oomError); ok {
			cerr = o
		} else if ce := asCUDAError(v); ce != nil {
			if sticky(ce) {
				e.broken = true
			}
			cerr = ce
		} else {
			r.panicked, r.stack = v, debug.Stack()
			return
		}
		if e.op != op {
			r.err = fmt.Errorf("gpu: %s: %s: %w", op, e.op, cerr)
		} else {
			r.err = fmt.Errorf("gpu: %s: %w", op, cerr)
		}
	}()
	if err := fn(); err != nil {
		r.err = fmt.Errorf("gpu: %s: %w", op, err)
	}
	if !e.broken && e.cuctx != 0 {
		e.sample()
	}
	return r
}

// asCUDAError turns a panic value of mumax's cu or cufft into an *Error.
func asCUDAError(v any) *Error {
	switch x := v.(type) {
	case cu.Result:
		return &Error{Lib: "cuda", Code: int(x), Name: x.String()}
	case cufft.Result:
		return &Error{Lib: "cufft", Code: int(x), Name: x.String()}
	case *Error:
		return x
	}
	return nil
}

// cudaCall runs f and returns the CUDA failure it panicked with (mumax's
// cu panics on every error) as an *Error; other panics go on.
func cudaCall(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			ce := asCUDAError(v)
			if ce == nil {
				panic(v)
			}
			err = ce
		}
	}()
	f()
	return nil
}

// sticky reports CUDA errors after which the context cannot be used.
func sticky(e *Error) bool {
	if e.Lib != "cuda" {
		return e.Code == int(cufft.EXEC_FAILED) || e.Code == int(cufft.INTERNAL_ERROR)
	}
	switch {
	case e.Code == 214: // ECC uncorrectable
		return true
	case e.Code >= 700 && e.Code <= 720: // illegal address, launch failed, assert, ...
		return true
	case e.Code == 999: // unknown
		return true
	}
	return false
}

// initStreams creates the streams (compute as given), the event and the
// staging buffers, and starts the peak-memory figure (engine goroutine,
// the context current).
func (e *Engine) initStreams(compute cu.Stream) {
	e.compute = compute
	e.copy = cu.StreamCreate()
	e.xev = eventCreate()
	e.op = "pinned staging buffers"
	e.stage.init()
	free, total := cu.MemGetInfo()
	e.devPeak = total - free
}

func (e *Engine) init() error {
	if e.feeder != nil { // a lane: the feeder's context, a stream of the least priority
		e.op = "make the context current"
		cu.CtxSetCurrent(e.cuctx)
		e.op = "create streams"
		e.initStreams(cu.StreamCreate())
		return nil
	}
	e.op = "cuInit"
	if err := cuInit(); err != nil {
		return err
	}
	n := cu.DeviceGetCount()
	vis, visSet := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	visDesc := "unset"
	if visSet {
		visDesc = fmt.Sprintf("%q", vis)
	}
	if n == 0 {
		return fmt.Errorf("no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)", visDesc)
	}
	if e.opts.Device < 0 || e.opts.Device >= n {
		return fmt.Errorf("--gpu %d: only %d CUDA device(s) visible (CUDA_VISIBLE_DEVICES=%s), valid indices 0..%d",
			e.opts.Device, n, visDesc, n-1)
	}
	e.dev = cu.DeviceGet(e.opts.Device)
	e.op = "create context"
	e.cuctx = ctxCreate(e.dev)
	major, minor := e.dev.ComputeCapability()
	e.total = e.dev.TotalMem()
	drv := cu.Version()
	e.desc = fmt.Sprintf("%s (cc %d.%d, %.1f GiB, driver CUDA %d.%d, visible index %d, CUDA_VISIBLE_DEVICES=%s)",
		e.dev.Name(), major, minor, float64(e.total)/(1<<30), drv/1000, (drv%1000)/10, e.opts.Device, visDesc)
	e.op = "load kernels"
	if err := e.loadKernels(); err != nil {
		return err
	}
	e.op = "create streams"
	e.initStreams(streamCreateFirst()) // before any lane's
	return nil
}

// cuInit runs cu.Init and explains the common failures.
func cuInit() error {
	err := cudaCall(func() { cu.Init(0) })
	var ce *Error
	if !errors.As(err, &ce) {
		return err
	}
	switch cu.Result(ce.Code) {
	case cu.ERROR_NO_DEVICE:
		return fmt.Errorf("no CUDA device found (CUDA_VISIBLE_DEVICES=%q): %w", os.Getenv("CUDA_VISIBLE_DEVICES"), ce)
	case cu.ERROR_INVALID_DEVICE:
		return fmt.Errorf("CUDA_VISIBLE_DEVICES=%q names no usable device: %w", os.Getenv("CUDA_VISIBLE_DEVICES"), ce)
	}
	return fmt.Errorf("the CUDA driver failed to initialise (is the NVIDIA driver loaded on this node?): %w", ce)
}

func (e *Engine) destroy() {
	if e.cuctx == 0 {
		return
	}
	func() {
		defer func() { _ = recover() }() // a broken context may fail to tear down
		for k, p := range e.plans {
			p.Destroy()
			delete(e.plans, k)
		}
		e.stage.free()
		e.host.release()
		e.pool.drain()
		if e.compute != 0 {
			e.compute.Destroy()
		}
		if e.copy != 0 {
			e.copy.Destroy()
		}
		if e.up != 0 {
			e.up.Destroy()
		}
		if e.xev != 0 {
			e.xev.destroy()
		}
	}()
	if e.feeder != nil { // the context is the feeder's
		e.cuctx = 0
		return
	}
	func() {
		defer func() { _ = recover() }()
		cu.CtxDestroy(&e.cuctx)
	}()
	e.cuctx = 0
}

// sync waits for both streams.
func (e *Engine) sync() {
	e.copy.Synchronize()
	e.compute.Synchronize()
}

// sample records the device's memory use for the peak figure.
func (e *Engine) sample() {
	free, total := cu.MemGetInfo()
	if u := total - free; u > e.devPeak {
		e.devPeak = u
	}
}

// checkCtx returns ctx's error, for long loops on the engine goroutine.
func checkCtx(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return nil
}
