package synth

import (
	"math"
	"math/rand/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Stream purposes. Each random quantity has its own stream so that results do
// not depend on the order work is done in or on what subset is generated.
const (
	tagPositions uint64 = iota + 1
	tagShift
	tagFocus
	tagTissue
	tagCells
	tagTexture
	tagMarker
	tagNoise
	tagEmpty
	tagFlat
)

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// stream returns the PCG stream for (seed, tag, keys...).
func stream(seed uint64, tag uint64, keys ...uint64) *rand.Rand {
	h := mix64(tag)
	for _, k := range keys {
		h = mix64(h ^ k)
	}
	return rand.New(rand.NewPCG(seed, h))
}

// SnakeRowCol returns the grid row and column of tile k (0-based, acquisition
// order): row = k / cols; col = k % cols on even rows, cols-1-k%cols on odd rows.
func SnakeRowCol(k, cols int) (row, col int) {
	row = k / cols
	col = k % cols
	if row%2 == 1 {
		col = cols - 1 - col
	}
	return row, col
}

// stepY and stepX are the nominal grid steps, px.
func (o Options) stepY() float64 { return float64(o.TileH) * (1 - o.Overlap) }
func (o Options) stepX() float64 { return float64(o.TileW) * (1 - o.Overlap) }

// nominalSize is the nominal mosaic size (no jitter), px.
func (o Options) nominalSize() (h, w float64) {
	return float64(o.Rows-1)*o.stepY() + float64(o.TileH), float64(o.Cols-1)*o.stepX() + float64(o.TileW)
}

// TilePositions returns the true positions of cycle's tiles in acquisition
// order (index k = tile number - 1): nominal grid position plus stage jitter,
// shifted so the minimum Y and the minimum X are 0.
func (o Options) TilePositions(cycle int) []raster.Point {
	n := o.Rows * o.Cols
	rng := stream(o.Seed, tagPositions, uint64(cycle))
	pos := make([]raster.Point, n)
	jit := func() float64 {
		v := rng.NormFloat64()
		return max(-3, min(3, v)) * o.StageJitterPx
	}
	minY, minX := math.Inf(1), math.Inf(1)
	for k := range n {
		r, c := SnakeRowCol(k, o.Cols)
		pos[k] = raster.Point{Y: float64(r)*o.stepY() + jit(), X: float64(c)*o.stepX() + jit()}
		minY, minX = min(minY, pos[k].Y), min(minX, pos[k].X)
	}
	for k := range pos {
		pos[k].Y -= minY
		pos[k].X -= minX
	}
	return pos
}

// CycleShift returns the global shift (dy, dx) of a cycle, px: zero for cycle
// 1, uniform in [-CycleShiftPx, CycleShiftPx] per axis otherwise.
func (o Options) CycleShift(cycle int) raster.Point {
	if cycle == 1 {
		return raster.Point{}
	}
	rng := stream(o.Seed, tagShift, uint64(cycle))
	return raster.Point{
		Y: (2*rng.Float64() - 1) * o.CycleShiftPx,
		X: (2*rng.Float64() - 1) * o.CycleShiftPx,
	}
}

// MosaicSize is the blender's mosaic size for positions pos: (round(max Y) + H,
// round(max X) + W).
func (o Options) MosaicSize(pos []raster.Point) (h, w int) {
	var my, mx float64
	for _, p := range pos {
		my, mx = max(my, p.Y), max(mx, p.X)
	}
	return int(math.Round(my)) + o.TileH, int(math.Round(mx)) + o.TileW
}

// focusSurface is the focal plane zf(y, x) (0-based plane index, float) in
// scene coordinates: a tilt plus a broad bump, scaled to about ±FocusRange
// around the stack centre.
type focusSurface struct {
	zc, amp          float64
	cy, cx           float64 // centre of the nominal mosaic, px
	ty, tx           float64 // tilt direction over the nominal mosaic size, per px
	by, bx, bs2, bam float64 // bump centre, 2 sigma², amplitude
}

func newFocusSurface(o Options) focusSurface {
	rng := stream(o.Seed, tagFocus)
	h, w := o.nominalSize()
	theta := 2 * math.Pi * rng.Float64()
	bs := 0.3 * math.Max(h, w)
	return focusSurface{
		zc:  float64(o.NZ-1)/2 + (rng.Float64()-0.5)*0.5,
		amp: o.FocusRange,
		cy:  h / 2, cx: w / 2,
		// 0.7 of the range from the tilt: ±0.7 at the mosaic's edges.
		ty: 1.4 * math.Cos(theta) / h, tx: 1.4 * math.Sin(theta) / w,
		by: h * (0.25 + 0.5*rng.Float64()), bx: w * (0.25 + 0.5*rng.Float64()),
		bs2: 2 * bs * bs, bam: 0.3 * (2*float64(rng.IntN(2)) - 1),
	}
}

// at returns zf(y, x), planes, 0-based.
func (f focusSurface) at(y, x float64) float64 {
	t := f.ty*(y-f.cy) + f.tx*(x-f.cx)
	dy, dx := y-f.by, x-f.bx
	b := f.bam * math.Exp(-(dy*dy+dx*dx)/f.bs2)
	return f.zc + f.amp*(t+b)
}
