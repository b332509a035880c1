package register

import (
	"context"
	"fmt"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Backend does the heavy, data-parallel steps of registration. The CPU
// reference (CPU) and the CUDA engine (internal/gpu) implement it; both are
// held to registertest.Run. The rules each method follows are stated here
// and in the exported helpers (SampleLevel, PCWindow, PCLowPass,
// PeakShift), which every implementation uses.
type Backend interface {
	// Name says what runs, for logs.
	Name() string
	// Downsample returns, for each k in ks, the k x k box mean of img in
	// counts, floor(H/k) x floor(W/k) (the package's level definition).
	// The sum is exact (integer); the mean is float32(sum / k²).
	Downsample(ctx context.Context, img *raster.Gray16, ks []int) ([]*raster.Float32, error)
	// BlockShifts measures, for each block, the residual shift between the
	// fixed level and the moving level sampled through maps[b.Map]
	// (level factor k), by phase correlation. See Block and Shift.
	BlockShifts(ctx context.Context, fixed, moving *raster.Float32, k int, maps []*Mapping, blocks []Block, bh, bw int) ([]Shift, error)
	// Warp resamples each full-resolution image through m onto an h x w
	// grid: out(p) = bilinear(img, m.Apply(p)), 0 where m.Apply(p) lies
	// outside [0, H−1] x [0, W−1], rounded to the nearest count.
	Warp(ctx context.Context, imgs []*raster.Gray16, m *Mapping, h, w int) ([]*raster.Gray16, error)
}

// Block is a bh x bw block of the fixed level with top-left corner
// (Y0, X0), level px, measured through maps[Map].
type Block struct {
	Y0, X0 int
	Map    int
}

// Shift is the result for one block, level px: the fixed patch f and the
// moving patch m (the moving level sampled through the mapping at the
// block's pixels) satisfy f(p) ≈ m(p + (DY, DX)), so the mapping improves
// to p -> Mapping(p + k·(DY, DX)). Peak is the PCM maximum divided by the
// number of pixels (0..~0.2 with the PCM blur; higher is a clearer match).
type Shift struct {
	DY, DX float64
	Peak   float64
}

// CheckBlocks validates BlockShifts arguments; every implementation calls it.
func CheckBlocks(fixed, moving *raster.Float32, k int, maps []*Mapping, blocks []Block, bh, bw int) error {
	if fixed == nil || moving == nil || len(fixed.Pix) != fixed.W*fixed.H || len(moving.Pix) != moving.W*moving.H || fixed.W < 2 || fixed.H < 2 || moving.W < 2 || moving.H < 2 {
		return fmt.Errorf("register: block shifts: empty or malformed level image")
	}
	if k < 1 {
		return fmt.Errorf("register: block shifts: level factor %d < 1", k)
	}
	if bh < 4 || bw < 4 || bh > fixed.H || bw > fixed.W {
		return fmt.Errorf("register: block shifts: block %dx%d does not fit the %dx%d level (min 4x4)", bh, bw, fixed.H, fixed.W)
	}
	var field *Field
	for i, m := range maps {
		if m == nil {
			return fmt.Errorf("register: block shifts: mapping %d is nil", i)
		}
		if m.Field != nil {
			if field != nil && field != m.Field {
				return fmt.Errorf("register: block shifts: the mappings of one call share at most one field")
			}
			field = m.Field
		}
	}
	for i, b := range blocks {
		if b.Y0 < 0 || b.X0 < 0 || b.Y0+bh > fixed.H || b.X0+bw > fixed.W {
			return fmt.Errorf("register: block %d at (%d, %d) outside the %dx%d level", i, b.Y0, b.X0, fixed.H, fixed.W)
		}
		if b.Map < 0 || b.Map >= len(maps) {
			return fmt.Errorf("register: block %d: mapping index %d out of range [0, %d)", i, b.Map, len(maps))
		}
	}
	return nil
}

// CheckWarp validates Warp arguments.
func CheckWarp(imgs []*raster.Gray16, m *Mapping, h, w int) error {
	if m == nil {
		return fmt.Errorf("register: warp: nil mapping")
	}
	if h < 1 || w < 1 {
		return fmt.Errorf("register: warp: output size %dx%d", w, h)
	}
	for i, g := range imgs {
		if g == nil || g.W < 2 || g.H < 2 || len(g.Pix) != g.W*g.H {
			return fmt.Errorf("register: warp: image %d is empty or malformed", i)
		}
	}
	return nil
}

// CheckDownsample validates Downsample arguments.
func CheckDownsample(img *raster.Gray16, ks []int) error {
	if img == nil || img.W < 1 || img.H < 1 || len(img.Pix) != img.W*img.H {
		return fmt.Errorf("register: downsample: empty or malformed image")
	}
	for _, k := range ks {
		if k < 1 || img.H/k < 1 || img.W/k < 1 {
			return fmt.Errorf("register: downsample: factor %d for a %dx%d image", k, img.W, img.H)
		}
	}
	return nil
}

// LevelCoord converts a level coordinate of factor k to full resolution.
func LevelCoord(i float64, k int) float64 { return float64(k)*i + float64(k-1)/2 }

// SampleLevel returns img at the level coordinate (y, x) by bilinear
// interpolation, coordinates clamped to the image (edge values repeat).
func SampleLevel(img *raster.Float32, y, x float64) float64 {
	h, w := img.H, img.W
	y = math.Max(0, math.Min(float64(h-1), y))
	x = math.Max(0, math.Min(float64(w-1), x))
	return bilinear(img.Pix, w, h, y, x)
}

// bilinear interpolates the w x h plane pix (row-major, x fastest) at
// (y, x), which must lie in [0, h-1] x [0, w-1]: the arithmetic of
// SampleLevel and WarpPixel (on the last row or column, the cell is the one
// before it, at weight 1), in float64.
func bilinear[T uint16 | float32](pix []T, w, h int, y, x float64) float64 {
	i0 := min(int(y), h-2)
	j0 := min(int(x), w-2)
	fy := y - float64(i0)
	fx := x - float64(j0)
	r0 := pix[i0*w+j0:]
	r1 := pix[(i0+1)*w+j0:]
	top := float64(r0[0]) + fx*(float64(r0[1])-float64(r0[0]))
	bot := float64(r1[0]) + fx*(float64(r1[1])-float64(r1[0]))
	return top + fy*(bot-top)
}

// MovingLevelCoord maps level pixel (i, j) of the fixed level (factor k)
// through a (matrix a, offset b, field f) to the moving level's coordinate.
func MovingLevelCoord(a [4]float64, b [2]float64, f *Field, k int, i, j int) (float64, float64) {
	h := float64(k-1) / 2
	kf := float64(k)
	qy, qx := applyAB(a, b, f, kf*float64(i)+h, kf*float64(j)+h)
	return (qy - h) / kf, (qx - h) / kf
}

// PCWindow returns the window applied to a mean-subtracted patch axis of n
// px before phase correlation: align's Tukey window with align.TukeyAlpha.
func PCWindow(n int) []float64 {
	w := make([]float64, n)
	align.Tukey(w, align.TukeyAlpha)
	return w
}

// PCLowPass returns the PCM blur factors of an axis of n frequencies:
// align.GaussLowPass with align.PCMSigma.
func PCLowPass(n int) []float64 {
	l := make([]float64, n)
	align.GaussLowPass(l, align.PCMSigma)
	return l
}

// PeakShift turns the PCM maximum at raster position (py, px) of a bh x bw
// PCM, with its circular 3x3 neighbourhood f, into a signed sub-pixel
// shift: indices above half the size wrap to negative shifts, and
// align.QuadPeak refines the position (kept integer when the fit fails).
func PeakShift(f *[3][3]float64, py, px, bh, bw int) (float64, float64) {
	sy, sx := float64(py), float64(px)
	if 2*py > bh {
		sy -= float64(bh)
	}
	if 2*px > bw {
		sx -= float64(bw)
	}
	if oy, ox, ok := align.QuadPeak(f); ok {
		sy += oy
		sx += ox
	}
	return sy, sx
}

// WarpPixel returns the warped value at fixed pixel (y, x) (Backend.Warp's
// rule) before rounding.
func WarpPixel(img *raster.Gray16, a [4]float64, b [2]float64, f *Field, y, x int) float64 {
	qy, qx := applyAB(a, b, f, float64(y), float64(x))
	h, w := img.H, img.W
	if !(qy >= 0 && qy <= float64(h-1) && qx >= 0 && qx <= float64(w-1)) {
		return 0
	}
	return bilinear(img.Pix, w, h, qy, qx)
}

// RoundCount rounds a warped value to the nearest count in [0, 65535].
func RoundCount(v float64) uint16 {
	v += 0.5
	switch {
	case !(v > 0):
		return 0
	case v >= 65535:
		return 65535
	}
	return uint16(v)
}
