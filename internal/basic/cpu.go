package basic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// CPU is the reference Fitter: a float64 port of the original's KCorrect
// (MATLAB BaSiC's inexact_alm_rspca_l1 with darkfield). Results do not
// depend on Workers.
type CPU struct {
	// Workers bounds the goroutines used (stacks fitted concurrently, and
	// images resized / pixel blocks swept in parallel inside a fit);
	// 0 means runtime.NumCPU().
	Workers int
}

var _ Fitter = CPU{}

// Fit fits one profile per stack. Stacks run concurrently up to Workers;
// the remaining workers parallelise inside each fit. It returns ctx.Err()
// when ctx is cancelled.
func (c CPU) Fit(ctx context.Context, stacks []*raster.Stack, p Params) ([]Profile, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for i, st := range stacks {
		if err := CheckStack(st); err != nil {
			return nil, fmt.Errorf("basic: stack %d: %w", i, err)
		}
	}
	workers := c.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	out := make([]Profile, len(stacks))
	if len(stacks) == 0 {
		return out, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conc := min(len(stacks), workers)
	inner := max(1, workers/conc)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(stacks) || ctx.Err() != nil {
					return
				}
				prof, err := fitOne(ctx, stacks[i], p, inner)
				if err != nil {
					if ctx.Err() == nil {
						err = fmt.Errorf("stack %d: %w", i, err)
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				out[i] = prof
			}
		})
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if firstErr != nil {
		if errors.Is(firstErr, context.Canceled) || errors.Is(firstErr, context.DeadlineExceeded) {
			return nil, firstErr
		}
		return nil, fmt.Errorf("basic: fit: %w", firstErr)
	}
	return out, nil
}

// CheckStack validates one stack given to a Fitter: at least 2 images of
// at least 1x1 px, pixel count matching; every implementation calls it.
func CheckStack(st *raster.Stack) error {
	switch {
	case st == nil:
		return errors.New("nil stack")
	case st.N < 2 || st.H < 1 || st.W < 1:
		return fmt.Errorf("need at least 2 images of at least 1x1 px, got %dx%dx%d (n, y, x)", st.N, st.H, st.W)
	case len(st.Pix) != st.N*st.H*st.W:
		return fmt.Errorf("pixel count %d does not match %dx%dx%d", len(st.Pix), st.N, st.H, st.W)
	}
	return nil
}

// ResizeToWorking resizes every image of st to size x size (skimage-style
// bilinear with anti-aliasing, see resize.go) into dst, image-major: pixel i
// of image j at dst[j*size*size+i], float64, in the stack's unit. dst is
// allocated when nil. Images are resized on up to workers goroutines
// (0: runtime.NumCPU()).
func ResizeToWorking(dst []float64, st *raster.Stack, size, workers int) []float64 {
	return resizeImages(dst, st.N, st.H, st.W, size, workers, func(j int, _ []float32) []float32 { return st.Plane(j) })
}

// resizeImages resizes n images of h x w px, image j given by load(j, buf)
// (buf is a worker's h x w scratch, which load may fill and return), into
// dst as ResizeToWorking does.
func resizeImages(dst []float64, n, h, w, size, workers int, load func(j int, buf []float32) []float32) []float64 {
	m := size * size
	if dst == nil {
		dst = make([]float64, m*n)
	}
	if len(dst) != m*n {
		panic(fmt.Sprintf("basic: ResizeToWorking: dst length %d, want %d", len(dst), m*n))
	}
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			r := newResizer(h, w, size, size)
			var buf []float32
			for {
				j := int(next.Add(1)) - 1
				if j >= n {
					return
				}
				if buf == nil {
					buf = make([]float32, 0, h*w)
				}
				resizePlane(r, dst[j*m:(j+1)*m], load(j, buf[:h*w]))
			}
		})
	}
	wg.Wait()
	return dst
}

// AutoLambdaFlat returns the original's automatic flatfield regularisation
// sum|DCT2ortho(mean/mean(mean))| / 400 · 0.5 for working data d (image-major,
// n images of size x size, as ResizeToWorking returns).
func AutoLambdaFlat(d []float64, n, size int) float64 {
	m := size * size
	if len(d) != m*n || n < 1 {
		panic(fmt.Sprintf("basic: AutoLambdaFlat: %d values for %d images of %dx%d", len(d), n, size, size))
	}
	mean := make([]float64, m)
	for j := range n {
		for i, v := range d[j*m : (j+1)*m] {
			mean[i] += v
		}
	}
	var mm float64
	for i := range mean {
		mean[i] /= float64(n)
		mm += mean[i]
	}
	mm /= float64(m)
	for i := range mean {
		mean[i] /= mm
	}
	newDCT2(size).forward(mean, mean)
	var s float64
	for _, v := range mean {
		s += math.Abs(v)
	}
	return s / 400 * 0.5
}

// ResizeProfile resizes a size x size working profile to h x w (float32),
// with the same resize as the working images.
func ResizeProfile(dst []float32, src []float64, size, h, w int) []float32 {
	if dst == nil {
		dst = make([]float32, h*w)
	}
	resizePlane(newResizer(size, size, h, w), dst, src)
	return dst
}

// fitOne fits one stack with up to workers goroutines.
func fitOne(ctx context.Context, st *raster.Stack, p Params, workers int) (Profile, error) {
	ps := p.WorkingSize
	m, n := ps*ps, st.N
	s := newSolver(ps, n, p, workers)
	ResizeToWorking(s.d, st, ps, workers)
	if err := ctx.Err(); err != nil {
		return Profile{}, err
	}
	s.lamFlat, s.lamDark = p.LambdaFlat, p.LambdaDark
	if s.lamFlat == 0 || s.lamDark == 0 {
		auto := AutoLambdaFlat(s.d, n, ps)
		if s.lamFlat == 0 {
			s.lamFlat = auto
		}
		if s.lamDark == 0 {
			s.lamDark = 0.2 * auto
		}
	}
	s.prepare()
	if !(s.normTwo > 0) {
		return Profile{}, errors.New("images are all zero (or not finite)")
	}

	flatLast := make([]float64, m)
	for i := range flatLast {
		flatLast[i] = 1
	}
	flatCur := make([]float64, m)
	darkLast := make([]float64, m)
	prof := Profile{W: st.W, H: st.H}
	stop := NewRoundStop(p)
	for round := 1; round <= p.MaxReweightIterations; round++ {
		it, err := s.solve(ctx)
		prof.Iterations += it
		prof.Reweights = round
		if err != nil {
			return Profile{}, err
		}
		s.reweight(p.Epsilon)
		// Flatfield = mean_j(A) - offset, mean 1.
		var mc float64
		for _, c := range s.coeffA {
			mc += c
		}
		mc /= float64(n)
		var mf float64
		for i := range m {
			flatCur[i] = s.wIdct[i]*mc + s.aOffA[i] - s.offset[i]
			mf += flatCur[i]
		}
		mf /= float64(m)
		var dNum, dDen, fNum, fDen float64
		for i := range m {
			flatCur[i] /= mf
			fNum += math.Abs(flatCur[i] - flatLast[i])
			fDen += math.Abs(flatLast[i])
			dNum += math.Abs(s.offset[i] - darkLast[i])
			dDen += math.Abs(darkLast[i])
		}
		madFlat := fNum / fDen
		// The original starts from a random darkfield, so the first round
		// never counts as converged.
		madDark := math.Inf(1)
		if round > 1 {
			if dNum < 1e-7 {
				madDark = 0
			} else {
				madDark = dNum / math.Max(dDen, 1e-6)
			}
		}
		copy(flatLast, flatCur)
		copy(darkLast, s.offset)
		if stop.Round(RoundChange(madFlat, madDark), it) {
			break
		}
	}
	prof.Converged, prof.Stalled, prof.Rounds = stop.Converged, stop.Stalled, stop.History()

	prof.WorkFlat = make([]float32, m)
	prof.WorkDark = make([]float32, m)
	for i := range m {
		prof.WorkFlat[i] = float32(flatLast[i])
		if p.Darkfield {
			prof.WorkDark[i] = float32(darkLast[i])
		}
	}
	prof.Flatfield = ResizeProfile(nil, flatLast, ps, st.H, st.W)
	var mean float64
	ok := true
	for _, v := range prof.Flatfield {
		mean += float64(v)
		if !(v >= 0) {
			ok = false
		}
	}
	mean /= float64(len(prof.Flatfield))
	if !ok || !(mean > 0) {
		for i := range prof.Flatfield {
			prof.Flatfield[i] = 1
		}
		for i := range prof.WorkFlat {
			prof.WorkFlat[i] = 1
		}
	} else {
		for i := range prof.Flatfield {
			prof.Flatfield[i] = float32(float64(prof.Flatfield[i]) / mean)
		}
	}
	if p.Darkfield {
		prof.Darkfield = ResizeProfile(nil, darkLast, ps, st.H, st.W)
	} else {
		prof.Darkfield = make([]float32, st.H*st.W)
	}
	return prof, nil
}

// reweight sets the weights from the last solve's sparse part:
// W = 1/(|E/(mean_image(A)+1e-6)| + ε), normalised to mean 1.
func (s *solver) reweight(eps float64) {
	m, n := s.m, s.n
	var mw, mo float64
	for i := range m {
		mw += s.wIdct[i]
		mo += s.aOffA[i]
	}
	mw /= float64(m)
	mo /= float64(m)
	var sum float64
	for j := range n {
		inv := 1 / (mw*s.coeffA[j] + mo + 1e-6)
		e := s.e[j*m : (j+1)*m]
		w := s.weight[j*m : (j+1)*m]
		for i, ev := range e {
			v := 1 / (math.Abs(ev*inv) + eps)
			w[i] = v
			sum += v
		}
	}
	scale := float64(m*n) / sum
	for i := range s.weight {
		s.weight[i] *= scale
	}
}

// Transform applies a profile to one image: dst = max((src - dark) /
// max(flat, flatMin), 0), per pixel (NaN maps to 0). src is one image of the
// profile's size (H x W) in the unit the profile was fitted in; dst may alias
// src. The stitch stage clips to [0, 1] itself.
func Transform(dst, src []float32, prof *Profile, flatMin float32) {
	n := prof.W * prof.H
	if len(src) != n || len(dst) != n || len(prof.Flatfield) != n || len(prof.Darkfield) != n {
		panic(fmt.Sprintf("basic: Transform size mismatch: src %d, dst %d, profile %dx%d", len(src), len(dst), prof.H, prof.W))
	}
	flat, dark := prof.Flatfield, prof.Darkfield
	for i, v := range src {
		r := (v - dark[i]) / max(flat[i], flatMin)
		if !(r > 0) {
			r = 0
		}
		dst[i] = r
	}
}
