package align

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Constants of the CPU translator, exported so that other implementations
// (CUDA) can follow them exactly.
const (
	// NPeaks is the number of phase-correlation peaks (3x3 local maxima)
	// whose wrap candidates are scored by NCC. The original takes the two
	// largest PCM pixels, which are often two pixels of one peak; distinct
	// local maxima are a stronger second chance.
	NPeaks = 4
	// CropSlack is added to the expected overlap plus twice the overlap
	// uncertainty when cropping tiles for phase correlation, px.
	CropSlack = 32
	// TukeyAlpha is the fraction of each crop axis covered by the window's
	// cosine ramps (half at each end); 0 is no window, 1 is Hann. Measured
	// on the aligntest mosaics: 0.25-0.5 find every textured pair and keep
	// textureless pairs at NCC <= 0.04; no window lets a textureless pair
	// reach NCC 0.19 (above the 0.078 threshold); Hann (1) weights the
	// overlap's outer part so little that 43 % of pairs were missed (noise
	// 0.01, measured before PCMSigma was added).
	TukeyAlpha = 0.5
	// PCMSigma is the width, px, of a Gaussian blur applied to the PCM (as
	// a factor exp(-2 pi^2 sigma^2 f^2) on the normalised cross-power
	// spectrum). Whitening gives the noise-only high frequencies as much
	// weight as the signal; the blur keeps the true peak, which is broad
	// for band-limited images, and averages out single-pixel noise peaks.
	// On the aligntest mosaics at noise 0.05 / 0.1 (Tukey 0.25), pairs
	// missed fall from 6 / 17 of 112 without it to 0 / 2 with it.
	PCMSigma = 1.0
	// MaxClimb bounds the NCC hill-climb, as in the original (100 steps).
	MaxClimb = 100
)

// CPU is the reference PairTranslator. Per pair it:
//
//  1. crops both tiles to the strip where they are expected to overlap
//     (overlap + 2·pou + 32 px along the stitching axis, rounded up to a
//     length with factors 2, 3, 5; the whole tile along the other axis),
//     subtracts each crop's mean and applies a separable Tukey window;
//  2. computes PCM = ifft2(F1 conj(F2)/|F1 conj(F2)|) with both real crops
//     packed into one complex FFT, blurred by a Gaussian of PCMSigma px
//     (applied to the spectrum);
//  3. takes the NPeaks largest local maxima of the PCM and, for each, the 4
//     wrap candidates (p or p−N per axis), converted back to tile
//     translations; candidates that leave less than half the expected
//     overlap are skipped;
//  4. keeps the candidate with the largest NCC over the real overlap of the
//     whole tiles, then hill-climbs on NCC to the local maximum;
//  5. with Params.Subpixel, fits a 2-D quadratic to the 3x3 NCC values
//     around that maximum.
//
// The original (m2stitch/Kstitch) correlates whole tiles, without window or
// blur. Cropping is about 3 times cheaper for 1440x1920 tiles at 30 %
// overlap and removes content that cannot match; the package tests check
// that wherever the original's whole-tile PCM finds a translation, the
// cropped one finds the same (TestCropMatchesWholeTiles).
//
// Pairs are spread over Workers goroutines (<= 0: GOMAXPROCS); each worker
// reuses its FFT plans and buffers. Results do not depend on Workers.
type CPU struct {
	Workers int
}

// Translate implements PairTranslator.
func (c CPU) Translate(ctx context.Context, tiles []*raster.Float32, pairs []Pair, p Params) ([]Translation, error) {
	return translateAll(ctx, tiles, pairs, p, c.Workers, true)
}

func translateAll(ctx context.Context, tiles []*raster.Float32, pairs []Pair, p Params, workers int, crop bool) ([]Translation, error) {
	if err := CheckInputs(tiles, pairs, p); err != nil {
		return nil, err
	}
	out := make([]Translation, len(pairs))
	if len(pairs) == 0 {
		return out, nil
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(pairs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			ws := getWorkspace()
			defer putWorkspace(ws)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(pairs) || ctx.Err() != nil {
					return
				}
				pr := pairs[i]
				out[i] = ws.translate(tiles[pr.A], tiles[pr.B], pr.Dir, p, crop)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("align: translate pairs: %w", err)
	}
	return out, nil
}

// CheckInputs validates the arguments of a PairTranslator.Translate call;
// every implementation calls it first.
func CheckInputs(tiles []*raster.Float32, pairs []Pair, p Params) error {
	if !(p.Overlap > 0 && p.Overlap < 1) {
		return fmt.Errorf("align: overlap %g not in (0, 1)", p.Overlap)
	}
	if !(p.POU >= 0) || math.IsInf(p.POU, 0) {
		return fmt.Errorf("align: pou %g not a finite value >= 0", p.POU)
	}
	if len(tiles) == 0 {
		return fmt.Errorf("align: no tiles")
	}
	for i, t := range tiles {
		if t == nil || t.W <= 0 || t.H <= 0 || len(t.Pix) != t.W*t.H {
			return fmt.Errorf("align: tile %d is empty or malformed", i)
		}
		if t.W != tiles[0].W || t.H != tiles[0].H {
			return fmt.Errorf("align: tile %d is %dx%d, tile 0 is %dx%d", i, t.W, t.H, tiles[0].W, tiles[0].H)
		}
	}
	for i, pr := range pairs {
		if pr.A < 0 || pr.A >= len(tiles) || pr.B < 0 || pr.B >= len(tiles) || pr.A == pr.B {
			return fmt.Errorf("align: pair %d has tile indices %d, %d out of range [0, %d)", i, pr.A, pr.B, len(tiles))
		}
		if pr.Dir != Left && pr.Dir != Top {
			return fmt.Errorf("align: pair %d has invalid direction %d", i, pr.Dir)
		}
	}
	return nil
}

// CropRect is the region of A and of B fed to the phase correlation: size
// (H, W), origins (AY, AX) in A and (BY, BX) in B.
type CropRect struct {
	H, W, AY, AX, BY, BX int
	// original: whole tiles, no window and no PCM blur, as the original
	// (kept to compare against; production always crops, and applies the
	// window and blur also when the crop is the whole tile)
	original bool
}

// Crop returns the phase-correlation crop of a pair: along the stitching
// axis, overlap + 2·pou + CropSlack px rounded up to a 5-smooth length
// (the whole tile when that is not shorter); the whole tile across it.
func Crop(g PairGeometry, p Params) CropRect { return cropFor(g, p, true) }

// cropFor returns Crop, or the whole tiles processed as the original does
// when !crop.
func cropFor(g PairGeometry, p Params, crop bool) CropRect {
	c := CropRect{H: g.H, W: g.W, original: !crop}
	if !crop {
		return c
	}
	size := g.W
	if g.Dir == Top {
		size = g.H
	}
	ov := int(math.Round(p.Overlap * float64(size)))
	pou := int(math.Ceil(p.POU / 100 * float64(size)))
	n := nextSmooth5(ov + 2*pou + CropSlack)
	if n >= size {
		return c
	}
	switch g.Dir {
	case Left: // A's right strip, B's left strip
		c.W, c.AX = n, g.W-n
	case Top: // A's bottom strip, B's top strip
		c.H, c.AY = n, g.H-n
	}
	return c
}

// workspace is one worker's reusable state: FFT plans by size, the complex
// buffer and the window.
type workspace struct {
	plans   map[[2]int]*fft2
	buf     []complex128
	winY    []float64
	winX    []float64
	alpha   float64 // of winY, winX
	lpY     []float64
	lpX     []float64
	lpSigma float64 // of lpY, lpX
	peaks   []peak
}

var wsPool = sync.Pool{New: func() any { return &workspace{plans: map[[2]int]*fft2{}} }}

func getWorkspace() *workspace  { return wsPool.Get().(*workspace) }
func putWorkspace(w *workspace) { wsPool.Put(w) }

func (ws *workspace) plan(h, w int) *fft2 {
	k := [2]int{h, w}
	f := ws.plans[k]
	if f == nil {
		f = newFFT2(h, w)
		ws.plans[k] = f
	}
	return f
}

// Tukey fills dst with a Tukey window of len(dst) points (alpha 0: ones).
func Tukey(dst []float64, alpha float64) {
	n := len(dst)
	ramp := alpha * float64(n-1) / 2
	for i := range dst {
		d := math.Min(float64(i), float64(n-1-i))
		if ramp <= 0 || d >= ramp {
			dst[i] = 1
		} else {
			dst[i] = 0.5 * (1 - math.Cos(math.Pi*d/ramp))
		}
	}
}

// translate measures one pair. See CPU.
func (ws *workspace) translate(a, b *raster.Float32, dir Direction, p Params, crop bool) Translation {
	g := NewPairGeometry(a.H, a.W, dir, p.Overlap)
	c := cropFor(g, p, crop)
	s := newScorer(a, b, g)
	pcm := ws.phaseCorrelate(a, b, c)

	best := Translation{DY: g.NomY, DX: g.NomX, NCC: -1}
	by, bx, found := 0, 0, false
	for _, pk := range pcm {
		for _, sy := range [2]int{pk.y, pk.y - c.H} {
			for _, sx := range [2]int{pk.x, pk.x - c.W} {
				// b_crop(y,x) = a_crop(y+sy, x+sx)  =>  B(y,x) = A(y+dy, x+dx)
				dy, dx := sy+c.AY-c.BY, sx+c.AX-c.BX
				v, ok := s.score(dy, dx)
				if ok && (!found || v > best.NCC) {
					best.NCC, by, bx, found = v, dy, dx, true
				}
			}
		}
	}
	if !found {
		return best
	}
	by, bx, best.NCC = s.climb(by, bx, best.NCC, nil)
	best.DY, best.DX = float64(by), float64(bx)
	if p.Subpixel {
		best.DY, best.DX = s.subpixel(by, bx)
	}
	return best
}

type peak struct {
	y, x int
	v    float64
}

// phaseCorrelate computes the PCM of the crops c of a and b and returns its
// NPeaks largest local maxima (3x3, circular), largest first.
func (ws *workspace) phaseCorrelate(a, b *raster.Float32, c CropRect) []peak {
	n := c.H * c.W
	if cap(ws.buf) < n {
		ws.buf = make([]complex128, n)
	}
	buf := ws.buf[:n]
	alpha := TukeyAlpha
	if c.original {
		alpha = 0
	}
	if len(ws.winY) != c.H || ws.alpha != alpha {
		ws.winY = make([]float64, c.H)
		Tukey(ws.winY, alpha)
	}
	if len(ws.winX) != c.W || ws.alpha != alpha {
		ws.winX = make([]float64, c.W)
		Tukey(ws.winX, alpha)
	}
	ws.alpha = alpha
	ma := cropMean(a, c.AY, c.AX, c.H, c.W)
	mb := cropMean(b, c.BY, c.BX, c.H, c.W)
	for y := 0; y < c.H; y++ {
		ra := a.Pix[(c.AY+y)*a.W+c.AX:][:c.W]
		rb := b.Pix[(c.BY+y)*b.W+c.BX:][:c.W]
		row := buf[y*c.W : (y+1)*c.W]
		wy := ws.winY[y]
		for x := range row {
			wt := wy * ws.winX[x]
			row[x] = complex((float64(ra[x])-ma)*wt, (float64(rb[x])-mb)*wt)
		}
	}
	f := ws.plan(c.H, c.W)
	f.transform(buf, false)
	if len(ws.lpY) != c.H {
		ws.lpY = make([]float64, c.H)
		GaussLowPass(ws.lpY, PCMSigma)
	}
	if len(ws.lpX) != c.W {
		ws.lpX = make([]float64, c.W)
		GaussLowPass(ws.lpX, PCMSigma)
	}
	if c.original {
		crossPower(buf, c.H, c.W, nil, nil)
	} else {
		crossPower(buf, c.H, c.W, ws.lpY, ws.lpX)
	}
	f.transform(buf, true)
	ws.peaks = topPeaks(ws.peaks[:0], buf, c.H, c.W, NPeaks)
	return ws.peaks
}

func cropMean(t *raster.Float32, y0, x0, h, w int) float64 {
	var s float64
	for y := y0; y < y0+h; y++ {
		for _, v := range t.Pix[y*t.W+x0 : y*t.W+x0+w] {
			s += float64(v)
		}
	}
	return s / float64(h*w)
}

// topPeaks appends to dst the n largest local maxima of real(z) (h x w),
// where a local maximum is >= its 8 circular neighbours; ties between
// values are broken by raster order, so the result is deterministic.
func topPeaks(dst []peak, z []complex128, h, w, n int) []peak {
	dst = dst[:0]
	for y := 0; y < h; y++ {
		ym, yp := (y+h-1)%h, (y+1)%h
		for x := 0; x < w; x++ {
			v := real(z[y*w+x])
			if len(dst) == n && !(v > dst[n-1].v) {
				continue
			}
			xm, xp := (x+w-1)%w, (x+1)%w
			if real(z[ym*w+xm]) > v || real(z[ym*w+x]) > v || real(z[ym*w+xp]) > v ||
				real(z[y*w+xm]) > v || real(z[y*w+xp]) > v ||
				real(z[yp*w+xm]) > v || real(z[yp*w+x]) > v || real(z[yp*w+xp]) > v {
				continue
			}
			// insert keeping dst sorted descending, at most n long
			if len(dst) < n {
				dst = append(dst, peak{})
			}
			i := len(dst) - 1
			for i > 0 && dst[i-1].v < v {
				dst[i] = dst[i-1]
				i--
			}
			dst[i] = peak{y: y, x: x, v: v}
		}
	}
	return dst
}
