//go:build cuda

package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/mumax/3/cuda/cu"
	"gonum.org/v1/gonum/mat"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// BaSiC is the GPU basic.Fitter: the algorithm of basic.CPU (resize with
// the same weights, the same inexact ALM with darkfield, the same
// reweighting and stop rules), with all the stacks of one call fitted
// together: every step advances each unfinished fit by one inner iteration,
// so 80 fits of a cycle cost about as many kernel launches as one.
//
// Precision: the resize to the working size is bit-identical to the CPU's
// (float32 samples, float64 sums in the same order); the ALM is float64 like
// the CPU, with different summation orders in the reductions (block sums,
// DCT by matrix products instead of FFTPACK), so results agree to rounding,
// amplified only near the discrete decisions of the algorithm (stop test,
// darkfield masks). TestBaSiCMatchesCPU (basic_test.go) states the
// tolerances it holds.
type BaSiC struct {
	e *Engine
	// maxBatch bounds the fits advanced together (0: defaultFitBatch).
	// Batching is lossless (fitBatchSize), so it changes only the device
	// memory used; the test of lossless batching sets 1.
	maxBatch int
}

// Fit implements basic.Fitter. Stacks are (n, y, x) float32 in any
// consistent unit (the stitch stage uses counts/65535).
func (b *BaSiC) Fit(ctx context.Context, stacks []*raster.Stack, p basic.Params) ([]basic.Profile, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ins := make([]fitInput, len(stacks))
	for i, st := range stacks {
		if err := basic.CheckStack(st); err != nil {
			return nil, fmt.Errorf("basic: stack %d: %w", i, err)
		}
		ins[i] = fitInput{n: st.N, h: st.H, w: st.W, f32: st.Pix}
	}
	return b.e.fit(ctx, ins, p, cmp.Or(b.maxBatch, defaultFitBatch))
}

// Fit fits one profile per plane from raw tiles in counts: planes[i] holds
// the tiles of plane i. The tiles are normalised on the GPU exactly as
// raster.Normalize16 does, so the profiles equal those of BaSiC.Fit on the
// normalised stacks (darkfield in counts/65535). It implements the fitting
// half of the stitch stage's engine.
func (e *Engine) Fit(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ins := make([]fitInput, len(planes))
	for i, tiles := range planes {
		if len(tiles) < 2 {
			return nil, fmt.Errorf("basic: plane %d: need at least 2 tiles, got %d", i, len(tiles))
		}
		in := fitInput{n: len(tiles), h: tiles[0].H, w: tiles[0].W}
		for k, t := range tiles {
			if t == nil || t.W != in.w || t.H != in.h || len(t.Pix) != t.W*t.H || t.W < 1 || t.H < 1 {
				return nil, fmt.Errorf("basic: plane %d: tile %d is missing or not %dx%d", i, k, in.w, in.h)
			}
			in.u16 = append(in.u16, t.Pix)
		}
		ins[i] = in
	}
	return e.fit(ctx, ins, p, defaultFitBatch)
}

// FitGray16 is Fit under the name the brief uses.
func (e *Engine) FitGray16(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error) {
	return e.Fit(ctx, planes, p)
}

// fitInput is one stack: n images of h x w, either one float32 slice (n*h*w)
// or n uint16 slices (counts, normalised on the device).
type fitInput struct {
	n, h, w int
	f32     []float32
	u16     [][]uint16
	dev     cu.DevicePtr // uint16 counts already on the device (DevTiles), n x h x w; kept
	ready   event        // dev's upload still in flight completes at it (0: none)
}

// Scalar slots of kernels/basic.cu.
const (
	nST      = 32
	stMu     = 0
	stDNorm  = 3
	stLamF   = 4
	stLamD   = 5
	stIter   = 17
	stDone   = 18
	stNorm2  = 19
	stFNum   = 21
	stFDen   = 22
	stDNum   = 23
	stDDen   = 24
	stDMin   = 25
	passBS   = 256 // alm_pass block size
	maxTiles = 256 // per plane: alm_pass keeps 8 x 3 x n doubles in shared memory
)

// defaultFitBatch bounds the fits advanced together (device memory: 4
// float64 arrays of n x working pixels per fit, 2.6 GB for 80 fits of 63
// tiles); BaSiC.maxBatch lowers it.
const defaultFitBatch = 128

// norm16 is raster.Normalize16's factor as a float32, passed to kernels.
const norm16 = float32(1.0 / 65535.0)

// fit fits every input, at most maxBatch fits (and what device memory
// allows) together.
func (e *Engine) fit(ctx context.Context, ins []fitInput, p basic.Params, maxBatch int) ([]basic.Profile, error) {
	out := make([]basic.Profile, len(ins))
	batch := e.fitBatchSize(ins, p.WorkingSize, maxBatch)
	for lo := 0; lo < len(ins); lo += batch {
		hi := min(len(ins), lo+batch)
		var res []basic.Profile
		err := e.do(ctx, "basic fit", func() error {
			var err error
			res, err = e.fitBatch(ctx, ins[lo:hi], p, lo)
			return err
		})
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			return nil, err
		}
		copy(out[lo:], res)
	}
	return out, nil
}

// fitBatchSize is how many fits advance together: at most maxBatch, and
// few enough that their state takes at most half of the free device memory.
// Batches are independent (each fit's arithmetic does not depend on the
// others), so splitting is lossless: the profiles are bit-identical.
func (e *Engine) fitBatchSize(ins []fitInput, ps, maxBatch int) int {
	var free int64
	if err := e.do(context.Background(), "meminfo", func() error {
		free, _ = cu.MemGetInfo()
		free += e.pool.cached
		return nil
	}); err != nil {
		return maxBatch
	}
	m := int64(ps) * int64(ps)
	var nmax, stage int64
	for _, in := range ins {
		nmax = max(nmax, int64(in.n))
		// one stack uploaded (float32 at most) and its row-resized copy
		stage = max(stage, int64(in.n)*int64(in.h)*int64(in.w)*4+int64(in.n)*int64(ps)*int64(in.w)*8)
	}
	perFit := 4*nmax*m*8 + 20*m*8 + 64*nmax*(3*nmax+1)*8 + nmax*nmax*8
	n := (free/2 - stage) / perFit
	return int(max(1, min(n, int64(maxBatch))))
}

// devArena frees every buffer it handed out when done.
type devArena struct {
	e    *Engine
	bufs []cu.DevicePtr
}

func (a *devArena) f64(n int) cu.DevicePtr { return a.bytes(int64(n) * 8) }
func (a *devArena) i32(n int) cu.DevicePtr { return a.bytes(int64(n) * 4) }
func (a *devArena) bytes(n int64) cu.DevicePtr {
	p := a.e.alloc(n)
	a.bufs = append(a.bufs, p)
	return p
}
func (a *devArena) free() { a.e.release(a.bufs...); a.bufs = nil }

// put copies a host slice to the device (small transfers).
func put[T any](e *Engine, dst cu.DevicePtr, src []T) {
	if len(src) == 0 {
		return
	}
	var z T
	e.upload([]hostSeg{{host: unsafe.Pointer(&src[0]), dev: dst, n: int64(len(src)) * int64(unsafe.Sizeof(z))}})
}

// get copies device data into a host slice, after the compute stream's work.
func get[T any](e *Engine, dst []T, src cu.DevicePtr) {
	if len(dst) == 0 {
		return
	}
	var z T
	e.download([]hostSeg{{host: unsafe.Pointer(&dst[0]), dev: src, n: int64(len(dst)) * int64(unsafe.Sizeof(z))}})
}

// almBatch is the device state of one batch of F fits: N images in all
// (stack f holds nn[f] of them from image noff[f] on), m = ps x ps working
// pixels each, row-major. The buffer names are those of kernels/basic.cu;
// float64 unless noted.
type almBatch struct {
	F, N, nmax, ps, m, nblk int
	nn                      []int32 // images per fit (host copy of NN)

	D, E, Y, WT                                 cu.DevicePtr // N x m
	S, VSUM, WHAT, WIDCT, AOFF, AOFFA           cu.DevicePtr // F x m
	TMP, TMP2, TMP3, OFFSET, FLATLAST, DARKLAST cu.DevicePtr // F x m
	FLATCUR, ROWSUM                             cu.DevicePtr // F x m
	HI, LO                                      cu.DevicePtr // F x m bytes
	COEFF, COEFFA                               cu.DevicePtr // N
	VALID, SIGN                                 cu.DevicePtr // N int32
	ST                                          cu.DevicePtr // F x nST scalar slots
	NN, NOFF, ACT, ACT2, DACT                   cu.DevicePtr // F int32
	PART, G, CM, CT                             cu.DevicePtr // block partials, Gram, DCT matrices
	gpix, gdct, gpass, gctl, grw                dim          // launch shapes
}

// perFit is a launch of one block of bs threads per fit.
func (b *almBatch) perFit(bs int) dim { return dim{gx: b.F, gy: 1, gz: 1, bx: bs, by: 1, bz: 1} }

// almFits is the host-side progress of each fit of a batch.
type almFits struct {
	round []int // reweighting round, from 1
	iters []int // inner iterations over all rounds
	stops []*basic.RoundStop
}

// fitBatch runs on the engine goroutine: the fits of ins (the first of
// them is stack number first, for messages) advanced together.
func (e *Engine) fitBatch(ctx context.Context, ins []fitInput, p basic.Params, first int) ([]basic.Profile, error) {
	ar := devArena{e: e}
	defer ar.free()
	b, err := e.almAllocate(&ar, ins, p.WorkingSize, first)
	if err != nil {
		return nil, err
	}

	// Resize every stack to the working grid, straight into D.
	e.op = "resize to working size"
	if err := e.resizeInputs(ctx, ins, b.D, b.ps); err != nil {
		return nil, err
	}
	if err := e.almLambdas(b, p, first); err != nil {
		return nil, err
	}
	fits, err := e.almSolve(ctx, b, p)
	if err != nil {
		return nil, err
	}
	return e.almProfiles(b, ins, p, fits)
}

// almAllocate checks the batch, allocates its state in ar and uploads the
// per-fit image counts and the DCT matrices; D is zeroed.
func (e *Engine) almAllocate(ar *devArena, ins []fitInput, ps, first int) (*almBatch, error) {
	F := len(ins)
	m := ps * ps
	nn := make([]int32, F)
	noff := make([]int32, F)
	N, nmax := 0, 0
	for f, in := range ins {
		if in.n > maxTiles {
			return nil, fmt.Errorf("stack %d: %d images; the GPU fit takes at most %d per stack", first+f, in.n, maxTiles)
		}
		nn[f], noff[f] = int32(in.n), int32(N)
		N += in.n
		nmax = max(nmax, in.n)
	}
	b := &almBatch{F: F, N: N, nmax: nmax, ps: ps, m: m, nn: nn}
	e.op = "allocate BaSiC state"
	b.D, b.E, b.Y, b.WT = ar.f64(N*m), ar.f64(N*m), ar.f64(N*m), ar.f64(N*m)
	pix := func() cu.DevicePtr { return ar.f64(F * m) }
	b.S, b.VSUM, b.WHAT, b.WIDCT, b.AOFF, b.AOFFA = pix(), pix(), pix(), pix(), pix(), pix()
	b.TMP, b.TMP2, b.TMP3, b.OFFSET, b.FLATLAST, b.DARKLAST, b.FLATCUR, b.ROWSUM = pix(), pix(), pix(), pix(), pix(), pix(), pix(), pix()
	b.HI, b.LO = ar.bytes(int64(F*m)), ar.bytes(int64(F*m))
	b.COEFF, b.COEFFA = ar.f64(N), ar.f64(N)
	b.VALID, b.SIGN = ar.i32(N), ar.i32(N)
	b.ST = ar.f64(F * nST)
	b.NN, b.NOFF, b.ACT, b.ACT2, b.DACT = ar.i32(F), ar.i32(F), ar.i32(F), ar.i32(F), ar.i32(F)
	b.nblk = (m + passBS - 1) / passBS
	partLen := F * b.nblk * (3*nmax + 1)
	b.PART = ar.f64(max(partLen, F*64))
	b.G = ar.f64(F * nmax * nmax)
	b.CM, b.CT = ar.f64(m), ar.f64(m)
	put(e, b.NN, nn)
	put(e, b.NOFF, noff)
	c, ct := dctMatrices(ps)
	put(e, b.CM, c)
	put(e, b.CT, ct)
	e.launchFillF64(grid1(int64(N*m)), b.D, 0.0, int64(N*m))

	b.gpix = dim{gx: (m + 255) / 256, gy: F, gz: 1, bx: 256, by: 1, bz: 1}
	b.gdct = dim{gx: (ps + 31) / 32, gy: (ps + 31) / 32, gz: F, bx: 32, by: 32, bz: 1}
	b.gpass = dim{gx: b.nblk, gy: F, gz: 1, bx: passBS, by: 1, bz: 1, shmem: 8 * 3 * nmax * 8}
	b.gctl = dim{gx: F, gy: 1, gz: 1, bx: 256, by: 1, bz: 1, shmem: (3*nmax + 1) * 8}
	b.grw = dim{gx: 64, gy: F, gz: 1, bx: 256, by: 1, bz: 1}
	return b, nil
}

// almLambdas sets each fit's scalar slots from the resized images: the
// automatic lambdas from the per-pixel mean (before sorting), the spectral
// norm from the Gram matrix, ‖D‖_F and min(D); D is sorted per pixel.
func (e *Engine) almLambdas(b *almBatch, p basic.Params, first int) error {
	F, m, nmax := b.F, b.m, b.nmax
	e.launchAlmMeanImg(b.gpix, b.TMP, b.D, b.NN, b.NOFF, m)
	e.launchAlmSort(b.gpix, b.D, b.ROWSUM, b.NN, b.NOFF, m)
	e.launchAlmNorms(b.perFit(1024), b.ST, b.D, b.NN, b.NOFF, m)
	e.launchFillF64(grid1(int64(F*nmax*nmax)), b.G, 0.0, int64(F*nmax*nmax))
	e.launchAlmGram(dim{gx: nmax * nmax, gy: F, gz: 1, bx: 256, by: 1, bz: 1}, b.G, b.D, b.NN, b.NOFF, m, nmax)
	meanImg := make([]float64, F*m)
	get(e, meanImg, b.TMP)
	gram := make([]float64, F*nmax*nmax)
	get(e, gram, b.G)
	st := make([]float64, F*nST)
	get(e, st, b.ST)
	for f := range F {
		n := int(b.nn[f])
		g := mat.NewSymDense(n, nil)
		for a := range n {
			for c := a; c < n; c++ {
				g.SetSym(a, c, gram[(f*nmax+a)*nmax+c])
			}
		}
		var es mat.EigenSym
		if !es.Factorize(g, false) {
			return fmt.Errorf("stack %d: eigen decomposition of the Gram matrix failed", first+f)
		}
		vals := es.Values(nil)
		norm2 := math.Sqrt(math.Max(0, vals[len(vals)-1]))
		if !(norm2 > 0) {
			return fmt.Errorf("stack %d: images are all zero (or not finite)", first+f)
		}
		s := st[f*nST : (f+1)*nST]
		s[stNorm2] = norm2
		lf, ld := p.LambdaFlat, p.LambdaDark
		if lf == 0 || ld == 0 {
			auto := basic.AutoLambdaFlat(meanImg[f*m:(f+1)*m], 1, b.ps)
			if lf == 0 {
				lf = auto
			}
			if ld == 0 {
				ld = 0.2 * auto
			}
		}
		s[stLamF], s[stLamD] = lf, ld
	}
	put(e, b.ST, st)
	return nil
}

// almSolve runs the solve loop: every step advances each unfinished fit by
// one inner ALM iteration; a fit whose solve stopped goes through the end
// of its reweighting round (almRoundEnd) and either finishes or restarts.
func (e *Engine) almSolve(ctx context.Context, b *almBatch, p basic.Params) (almFits, error) {
	F, m := b.F, b.m
	e.launchFillF64(grid1(int64(b.N*m)), b.WT, 1.0, int64(b.N*m))
	e.launchFillF64(grid1(int64(F*m)), b.FLATLAST, 1.0, int64(F*m))
	e.launchFillF64(grid1(int64(F*m)), b.DARKLAST, 0.0, int64(F*m))
	e.launchFillF64(grid1(int64(F*m)), b.AOFFA, 0.0, int64(F*m))

	dark := 0
	if p.Darkfield {
		dark = 1
	}
	var method int
	switch p.DarkfieldMethod {
	case basic.DarkfieldOriginal:
		method = 0 // DARK_ORIGINAL of kernels/basic.cu
	case basic.DarkfieldDarkest:
		method = 1 // DARK_DARKEST
	default:
		return almFits{}, fmt.Errorf("darkfield method %v not implemented on the GPU", p.DarkfieldMethod)
	}
	fits := almFits{round: make([]int, F), iters: make([]int, F), stops: make([]*basic.RoundStop, F)}
	act := make([]int32, F)
	act2 := make([]int32, F)
	for f := range F {
		fits.round[f] = 1
		act[f] = 1
		fits.stops[f] = basic.NewRoundStop(p) // the CPU's stop rule, per fit
	}
	put(e, b.ACT, act)
	e.resetSolve(b, b.ACT)
	st := make([]float64, F*nST)
	remaining := F
	for remaining > 0 {
		if err := checkCtx(ctx); err != nil {
			return almFits{}, err
		}
		e.op = "ALM iteration"
		e.almIteration(b, p, dark, method)
		get(e, st, b.ST)
		ended := false
		for f := range F {
			act2[f] = 0
			if act[f] == 1 && st[f*nST+stDone] != 0 {
				act2[f] = 1
				ended = true
			}
		}
		if ended {
			remaining -= e.almRoundEnd(b, p, st, act, act2, fits)
		}
	}
	return fits, nil
}

// almIteration launches one inner iteration of every fit active in ACT:
// the flatfield update (through the DCT), the masks, the pass over the
// images, the control step and, with darkfield, the darkfield update of
// the fits in DACT.
func (e *Engine) almIteration(b *almBatch, p basic.Params, dark, method int) {
	m, ps, nmax := b.m, b.ps, b.nmax
	gpix, gdct := b.gpix, b.gdct
	e.launchAlmFlatIn(gpix, b.TMP, b.S, b.WIDCT, b.AOFF, b.ST, b.NN, b.ACT, m)
	e.launchDctPass(gdct, b.TMP2, b.TMP, b.CM, ps, b.ACT)
	e.launchDctPass(gdct, b.TMP, b.TMP2, b.CM, ps, b.ACT)
	e.launchAlmFlatShrink(gpix, b.WHAT, b.TMP, b.ST, b.ACT, m)
	e.launchDctPass(gdct, b.TMP2, b.WHAT, b.CT, ps, b.ACT)
	e.launchDctPass(gdct, b.WIDCT, b.TMP2, b.CT, ps, b.ACT)
	e.launchAlmMasks(b.perFit(1024), b.HI, b.LO, b.WIDCT, b.COEFF, b.COEFFA, b.AOFF, b.AOFFA, b.ST, b.NN, b.NOFF, b.ACT, m, dark)
	e.launchAlmPass(b.gpass, b.E, b.Y, b.S, b.VSUM, b.PART, b.D, b.WT, b.WIDCT, b.AOFF, b.COEFF, b.VALID, b.HI, b.LO, b.ST, b.NN, b.NOFF, b.ACT, m, nmax, dark)
	e.launchAlmControl(b.gctl, b.ST, b.COEFF, b.VALID, b.SIGN, b.DACT, b.PART, b.D, b.WIDCT, b.NN, b.NOFF, b.ACT, b.nblk, nmax, m, dark, method, p.OptimizationTol, p.MaxIterations)
	if dark == 1 {
		e.launchAlmDarkA1(b.perFit(1024), b.TMP, b.VSUM, b.D, b.E, b.WIDCT, b.SIGN, b.ST, b.NN, b.NOFF, b.ACT, b.DACT, m)
		e.launchDctPass(gdct, b.TMP2, b.TMP, b.CM, ps, b.DACT)
		e.launchDctPass(gdct, b.TMP3, b.TMP2, b.CM, ps, b.DACT)
		e.launchAlmDarkSoft(gpix, b.TMP3, b.ST, b.DACT, m)
		e.launchDctPass(gdct, b.TMP2, b.TMP3, b.CT, ps, b.DACT)
		e.launchDctPass(gdct, b.TMP, b.TMP2, b.CT, ps, b.DACT)
		e.launchAlmDarkOut(gpix, b.AOFF, b.TMP, b.WIDCT, b.ST, b.DACT, m)
	}
}

// almRoundEnd ends the solve of the fits in act2 (host copy; st holds the
// scalar slots just downloaded): offset, reweighting, flatfield and the
// reweighting convergence test. A fit that stops is cleared from act; the
// others restart a solve. It returns how many fits finished.
func (e *Engine) almRoundEnd(b *almBatch, p basic.Params, st []float64, act, act2 []int32, fits almFits) int {
	m := b.m
	e.op = "BaSiC reweighting"
	put(e, b.ACT2, act2)
	e.launchAlmEndOffset(b.perFit(1024), b.OFFSET, b.ST, b.AOFF, b.AOFFA, b.WIDCT, b.COEFFA, b.NN, b.NOFF, b.ACT2, m)
	e.launchAlmReweight(b.grw, b.WT, b.PART, b.E, b.COEFFA, b.ST, b.NN, b.NOFF, b.ACT2, m, p.Epsilon)
	e.launchAlmReweightScale(b.grw, b.WT, b.PART, b.NN, b.NOFF, b.ACT2, m)
	e.launchAlmEndFlat(b.perFit(1024), b.FLATLAST, b.DARKLAST, b.FLATCUR, b.ST, b.WIDCT, b.AOFFA, b.OFFSET, b.ACT2, m)
	get(e, st, b.ST)
	finished := 0
	restart := false
	for f := range b.F {
		if act2[f] == 0 {
			continue
		}
		s := st[f*nST : (f+1)*nST]
		fits.iters[f] += int(s[stIter])
		madFlat := s[stFNum] / s[stFDen]
		madDark := math.Inf(1)
		if fits.round[f] > 1 {
			if s[stDNum] < 1e-7 {
				madDark = 0
			} else {
				madDark = s[stDNum] / math.Max(s[stDDen], 1e-6)
			}
		}
		if fits.stops[f].Round(basic.RoundChange(madFlat, madDark), int(s[stIter])) {
			act[f] = 0
			act2[f] = 0
			finished++
			continue
		}
		fits.round[f]++
		restart = true
	}
	put(e, b.ACT, act)
	if restart {
		put(e, b.ACT2, act2)
		e.resetSolve(b, b.ACT2)
	}
	return finished
}

// almProfiles downloads the working-size profiles, then resizes them to
// full size on the GPU and normalises the flatfields.
func (e *Engine) almProfiles(b *almBatch, ins []fitInput, p basic.Params, fits almFits) ([]basic.Profile, error) {
	F, m := b.F, b.m
	e.op = "profiles"
	flatW := make([]float64, F*m)
	darkW := make([]float64, F*m)
	get(e, flatW, b.FLATLAST)
	get(e, darkW, b.DARKLAST)
	profs := make([]basic.Profile, F)
	for f, in := range ins {
		stop := fits.stops[f]
		pr := basic.Profile{W: in.w, H: in.h, Iterations: fits.iters[f], Reweights: fits.round[f],
			Converged: stop.Converged, Stalled: stop.Stalled, Rounds: stop.History()}
		pr.WorkFlat = make([]float32, m)
		pr.WorkDark = make([]float32, m)
		for i := range m {
			pr.WorkFlat[i] = float32(flatW[f*m+i])
			if p.Darkfield {
				pr.WorkDark[i] = float32(darkW[f*m+i])
			}
		}
		profs[f] = pr
	}
	if err := e.profilesFullSize(profs, b.FLATLAST, b.DARKLAST, b.ps, p.Darkfield); err != nil {
		return nil, err
	}
	return profs, nil
}

// resetSolve starts a new solve for the fits active in act.
func (e *Engine) resetSolve(b *almBatch, act cu.DevicePtr) {
	m := b.m
	e.launchAlmResetPix(b.gpix, b.S, b.VSUM, b.WHAT, b.WIDCT, b.AOFF, b.ROWSUM, act, m)
	e.launchAlmResetElem(dim{gx: 64, gy: b.gpix.gy, gz: 1, bx: 256, by: 1, bz: 1}, b.E, b.Y, b.NN, b.NOFF, act, m)
	e.launchAlmResetScalars(b.perFit(256), b.ST, b.COEFF, b.VALID, b.NN, b.NOFF, act)
}

// resizeInputs uploads each stack and resizes it to ps x ps into D
// (image-major, stacks one after the other).
func (e *Engine) resizeInputs(ctx context.Context, ins []fitInput, D cu.DevicePtr, ps int) error {
	m := ps * ps
	type axes struct{ y, x *devAxis }
	cache := map[[2]int]axes{}
	defer func() {
		for _, a := range cache {
			a.y.free(e)
			a.x.free(e)
		}
	}()
	off := 0
	for _, in := range ins {
		if err := checkCtx(ctx); err != nil {
			return err
		}
		ax, ok := cache[[2]int{in.h, in.w}]
		if !ok {
			ax = axes{y: e.newDevAxis(in.h, ps), x: e.newDevAxis(in.w, ps)}
			cache[[2]int{in.h, in.w}] = ax
		}
		plane := int64(in.h) * int64(in.w)
		var src cu.DevicePtr
		var resizeY func(d dim, tmp, src cu.DevicePtr, sw, dh int, start, cnt, off, w cu.DevicePtr, scale float32, srcStride, tmpStride int64)
		owned := in.dev == 0
		if in.dev != 0 {
			if in.ready != 0 {
				streamWait(e.compute, in.ready)
			}
			src = in.dev
			resizeY = e.launchResizeYU16
		} else if in.u16 != nil {
			src = e.alloc(int64(in.n) * plane * 2)
			segs := make([]hostSeg, in.n)
			for k, t := range in.u16 {
				segs[k] = hostSeg{host: unsafe.Pointer(&t[0]), dev: src + cu.DevicePtr(int64(k)*plane*2), n: plane * 2}
			}
			e.upload(segs)
			resizeY = e.launchResizeYU16
		} else {
			src = e.alloc(int64(in.n) * plane * 4)
			e.upload([]hostSeg{{host: unsafe.Pointer(&in.f32[0]), dev: src, n: int64(in.n) * plane * 4}})
			resizeY = e.launchResizeYF32
		}
		tmp := e.alloc(int64(in.n) * int64(ps) * int64(in.w) * 8)
		resizeY(dim{gx: (in.w + 255) / 256, gy: ps, gz: in.n, bx: 256, by: 1, bz: 1},
			tmp, src, in.w, ps, ax.y.start, ax.y.cnt, ax.y.off, ax.y.w, norm16, plane, int64(ps)*int64(in.w))
		dst := D + cu.DevicePtr(int64(off)*int64(m)*8)
		e.launchResizeXF64(dim{gx: (ps + 255) / 256, gy: ps, gz: in.n, bx: 256, by: 1, bz: 1},
			dst, tmp, in.w, ps, ps, ax.x.start, ax.x.cnt, ax.x.off, ax.x.w, int64(ps)*int64(in.w), int64(m))
		e.release(tmp)
		if owned {
			e.release(src)
		}
		off += in.n
	}
	return nil
}

// profilesFullSize resizes the working profiles (ps x ps, float64 on the
// device) to each profile's (H, W), normalises the flatfields to mean 1
// (ones when not positive) and downloads them.
func (e *Engine) profilesFullSize(profs []basic.Profile, FLAT, DARK cu.DevicePtr, ps int, darkfield bool) error {
	m := int64(ps) * int64(ps)
	for f := range profs {
		pr := &profs[f]
		h, w := pr.H, pr.W
		ay, ax := e.newDevAxis(ps, h), e.newDevAxis(ps, w)
		plane := int64(h) * int64(w)
		tmp := e.alloc(int64(h) * int64(ps) * 8)
		outF := e.alloc(plane * 4)
		resize := func(dst, src cu.DevicePtr) {
			e.launchResizeYF64(dim{gx: (ps + 255) / 256, gy: h, gz: 1, bx: 256, by: 1, bz: 1},
				tmp, src, ps, h, ay.start, ay.cnt, ay.off, ay.w, float32(1), m, int64(h)*int64(ps))
			e.launchResizeXF32(dim{gx: (w + 255) / 256, gy: h, gz: 1, bx: 256, by: 1, bz: 1},
				dst, tmp, ps, h, w, ax.start, ax.cnt, ax.off, ax.w, int64(h)*int64(ps), plane)
		}
		resize(outF, FLAT+cu.DevicePtr(int64(f)*m*8))
		ok := e.alloc(4)
		e.launchFlatNormalise(dim{gx: 1, gy: 1, gz: 1, bx: 1024, by: 1, bz: 1}, outF, ok, plane)
		pr.Flatfield = make([]float32, plane)
		get(e, pr.Flatfield, outF)
		okv := make([]int32, 1)
		get(e, okv, ok)
		if okv[0] == 0 {
			for i := range pr.WorkFlat {
				pr.WorkFlat[i] = 1
			}
		}
		pr.Darkfield = make([]float32, plane)
		if darkfield {
			resize(outF, DARK+cu.DevicePtr(int64(f)*m*8))
			get(e, pr.Darkfield, outF)
		}
		e.release(tmp, outF, ok)
		ay.free(e)
		ax.free(e)
	}
	return nil
}

// dctMatrices returns the orthonormal DCT-II matrix C (C[u][x] = s(u)
// cos(π(2x+1)u/2p), row-major) and its transpose, the inverse.
func dctMatrices(p int) (c, ct []float64) {
	c = make([]float64, p*p)
	ct = make([]float64, p*p)
	s0, sk := math.Sqrt(1/float64(p)), math.Sqrt(2/float64(p))
	for u := range p {
		s := sk
		if u == 0 {
			s = s0
		}
		for x := range p {
			v := s * math.Cos(math.Pi*float64(2*x+1)*float64(u)/float64(2*p))
			c[u*p+x] = v
			ct[x*p+u] = v
		}
	}
	return c, ct
}

// devAxis is an axis kernel (see axisWeights) on the device.
type devAxis struct {
	start, cnt, off, w cu.DevicePtr
}

func (e *Engine) newDevAxis(in, out int) *devAxis {
	start, cnt, off, w := axisWeights(in, out)
	a := &devAxis{start: e.alloc(int64(len(start)) * 4), cnt: e.alloc(int64(len(cnt)) * 4),
		off: e.alloc(int64(len(off)) * 4), w: e.alloc(int64(len(w)) * 8)}
	put(e, a.start, start)
	put(e, a.cnt, cnt)
	put(e, a.off, off)
	put(e, a.w, w)
	return a
}

func (a *devAxis) free(e *Engine) { e.release(a.start, a.cnt, a.off, a.w) }
