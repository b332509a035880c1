package aligntest

import (
	"math"
	"math/rand/v2"
	"sync"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Rect is an axis-aligned region of the scene, [Y0, Y1) x [X0, X1), px.
type Rect struct{ Y0, X0, Y1, X1 float64 }

type blob struct{ y, x, k, amp, r2 float64 } // amp·exp(-k·d²) for d² < r2

type fibre struct{ y0, x0, dy, dx, len2, k, amp, r2 float64 }

type wave struct{ fy, fx, ph, amp float64 }

// Scene is a continuous synthetic fluorescence-like field over
// [0, H) x [0, W) px: a background level, a faint low-frequency undulation
// (three plane waves of random incommensurate frequencies), Gaussian "nuclei"
// of random size and brightness, and thin Gaussian-profile fibres. It can be
// sampled at any real (y, x), so tiles at fractional positions are exact
// samples, not interpolations. Inside Empty rectangles the field is the
// constant background (no texture); see SetEmpty. Values lie roughly in [0.05, 1].
type Scene struct {
	H, W   float64
	Bg     float64
	Empty  []Rect // textureless regions; add them with SetEmpty
	blobs  []blob
	fibres []fibre
	waves  []wave
	cell   float64
	ncx    int
	cells  [][]int32 // blob indices per cell
	fcells [][]int32 // fibre indices per cell
}

// NewScene draws a scene of h x w px from rng.
func NewScene(rng *rand.Rand, h, w float64) *Scene { return newScene(rng, h, w, 0) }

// newScene draws a scene; with period > 0 the nuclei sit on a square
// lattice of that period, px, each displaced by up to 3 % of it, with
// sigma period/5 and amplitude 0.3-0.4, and there are no fibres: a
// repetitive texture, whose NCC has a local maximum near every lattice
// vector, only slightly below the true one.
func newScene(rng *rand.Rand, h, w, period float64) *Scene {
	s := &Scene{H: h, W: w, Bg: 0.05, cell: 16}
	for range 3 {
		f := (0.004 + 0.01*rng.Float64()) // cycles per px
		th := 2 * math.Pi * rng.Float64()
		s.waves = append(s.waves, wave{fy: f * math.Sin(th), fx: f * math.Cos(th), ph: 2 * math.Pi * rng.Float64(), amp: 0.02})
	}
	if period > 0 {
		sig := period / 5
		for y := period / 2; y < h; y += period {
			for x := period / 2; x < w; x += period {
				s.blobs = append(s.blobs, blob{
					y: y + 0.03*period*(2*rng.Float64()-1), x: x + 0.03*period*(2*rng.Float64()-1),
					k: 1 / (2 * sig * sig), amp: 0.3 + 0.1*rng.Float64(), r2: 16 * sig * sig,
				})
			}
		}
	}
	nb := int(h * w / 120)
	if period > 0 {
		nb = 0
	}
	for range nb {
		sig := 1.5 + 4.5*rng.Float64()
		s.blobs = append(s.blobs, blob{
			y: rng.Float64() * h, x: rng.Float64() * w,
			k: 1 / (2 * sig * sig), amp: 0.05 + 0.35*rng.Float64(), r2: 16 * sig * sig,
		})
	}
	nf := int(h * w / 4000)
	if period > 0 {
		nf = 0
	}
	for range nf {
		sig := 0.7 + 1.0*rng.Float64()
		l := 15 + 60*rng.Float64()
		th := math.Pi * rng.Float64()
		s.fibres = append(s.fibres, fibre{
			y0: rng.Float64() * h, x0: rng.Float64() * w, dy: math.Sin(th), dx: math.Cos(th), len2: l,
			k: 1 / (2 * sig * sig), amp: 0.05 + 0.2*rng.Float64(), r2: 16 * sig * sig,
		})
	}
	s.ncx = int(math.Ceil(w/s.cell)) + 1
	ncy := int(math.Ceil(h/s.cell)) + 1
	s.cells = make([][]int32, s.ncx*ncy)
	s.fcells = make([][]int32, s.ncx*ncy)
	add := func(cells [][]int32, i int, y0, x0, y1, x1 float64) {
		cy0, cy1 := max(0, int(math.Floor(y0/s.cell))), min(ncy-1, int(math.Floor(y1/s.cell)))
		cx0, cx1 := max(0, int(math.Floor(x0/s.cell))), min(s.ncx-1, int(math.Floor(x1/s.cell)))
		for cy := cy0; cy <= cy1; cy++ {
			for cx := cx0; cx <= cx1; cx++ {
				cells[cy*s.ncx+cx] = append(cells[cy*s.ncx+cx], int32(i))
			}
		}
	}
	for i, b := range s.blobs {
		r := math.Sqrt(b.r2)
		add(s.cells, i, b.y-r, b.x-r, b.y+r, b.x+r)
	}
	for i, f := range s.fibres {
		r := math.Sqrt(f.r2)
		y1, x1 := f.y0+f.len2*f.dy, f.x0+f.len2*f.dx
		add(s.fcells, i, min(f.y0, y1)-r, min(f.x0, x1)-r, max(f.y0, y1)+r, max(f.x0, x1)+r)
	}
	return s
}

// emptyRamp is the width over which the smooth undulation fades out around
// an Empty rectangle, px.
const emptyRamp = 20

// mask is 0 inside every Empty rectangle and rises smoothly to 1 at
// emptyRamp px outside it, so that empty regions have no hard edges (a hard
// edge is a strong straight feature that phase correlation locks onto).
func (s *Scene) mask(y, x float64) float64 {
	m := 1.0
	for _, r := range s.Empty {
		dy := max(r.Y0-y, 0, y-r.Y1)
		dx := max(r.X0-x, 0, x-r.X1)
		d := math.Hypot(dy, dx) / emptyRamp
		if d < 1 {
			m *= d * d * (3 - 2*d)
		}
	}
	return m
}

// touchesEmpty reports whether a disc of squared radius r2 at (y, x)
// reaches an Empty rectangle.
func (s *Scene) touchesEmpty(y, x, r2 float64) bool {
	for _, r := range s.Empty {
		dy := max(r.Y0-y, 0, y-r.Y1)
		dx := max(r.X0-x, 0, x-r.X1)
		if dy*dy+dx*dx < r2 {
			return true
		}
	}
	return false
}

// SetEmpty makes the rectangles textureless: blobs and fibres that reach
// them are removed whole (no cut objects), and the undulation fades out
// smoothly around them, leaving the constant background inside.
func (s *Scene) SetEmpty(rects ...Rect) {
	s.Empty = append(s.Empty, rects...)
	for i := range s.blobs {
		b := &s.blobs[i]
		if b.amp != 0 && s.touchesEmpty(b.y, b.x, b.r2) {
			b.amp = 0
		}
	}
	for i := range s.fibres {
		f := &s.fibres[i]
		if f.amp == 0 {
			continue
		}
		// sample the segment densely enough for its radius
		r2 := f.r2
		for t := 0.0; t <= f.len2; t += 1 {
			if s.touchesEmpty(f.y0+t*f.dy, f.x0+t*f.dx, r2) {
				f.amp = 0
				break
			}
		}
	}
}

// At returns the field at (y, x).
func (s *Scene) At(y, x float64) float64 {
	v := 0.03
	for _, w := range s.waves {
		v += w.amp * math.Cos(2*math.Pi*(w.fy*y+w.fx*x)+w.ph)
	}
	if len(s.Empty) > 0 {
		v *= s.mask(y, x)
	}
	v += s.Bg
	cy, cx := int(math.Floor(y/s.cell)), int(math.Floor(x/s.cell))
	if cy < 0 || cx < 0 || cx >= s.ncx || cy*s.ncx+cx >= len(s.cells) {
		return v
	}
	c := cy*s.ncx + cx
	for _, i := range s.cells[c] {
		b := &s.blobs[i]
		d2 := (y-b.y)*(y-b.y) + (x-b.x)*(x-b.x)
		if d2 < b.r2 && b.amp != 0 {
			v += b.amp * math.Exp(-b.k*d2)
		}
	}
	for _, i := range s.fcells[c] {
		f := &s.fibres[i]
		if f.amp == 0 {
			continue
		}
		// distance from the segment
		py, px := y-f.y0, x-f.x0
		t := max(0, min(f.len2, py*f.dy+px*f.dx))
		ey, ex := py-t*f.dy, px-t*f.dx
		d2 := ey*ey + ex*ex
		if d2 < f.r2 {
			v += f.amp * math.Exp(-f.k*d2)
		}
	}
	return v
}

// Render samples the scene into dst: dst(y, x) = At(y0+y, x0+x), using up to
// workers goroutines over rows.
func (s *Scene) Render(dst *raster.Float32, y0, x0 float64, workers int) {
	workers = max(1, workers)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for y := k; y < dst.H; y += workers {
				row := dst.Pix[y*dst.W : (y+1)*dst.W]
				for x := range row {
					row[x] = float32(s.At(y0+float64(y), x0+float64(x)))
				}
			}
		})
	}
	wg.Wait()
}

// MosaicConfig describes a synthetic grid acquisition.
type MosaicConfig struct {
	Rows, Cols int
	H, W       int     // tile size, px
	Overlap    float64 // nominal overlap fraction (both axes)
	Jitter     float64 // each tile's position is nominal + U(-Jitter, Jitter) per axis, px
	Integer    bool    // round the true positions to whole px
	Noise      float64 // Gaussian noise sigma added to every tile pixel
	Seed       uint64
	EmptyTiles []int    // tiles whose whole footprint (+3 px) is textureless
	EmptyPairs [][2]int // (A, B) neighbour pairs whose true overlap (+3 px) is textureless
	Workers    int      // rendering goroutines (default 1)
	// Period > 0: repetitive texture, nuclei on a lattice of this period,
	// px (see newScene).
	Period float64
	// Vignette > 0: each tile is multiplied by 1 − Vignette·d², d the
	// distance from the tile centre over the half-diagonal (an uncorrected
	// flatfield, as on real tiles).
	Vignette float64
}

// Mosaic is a synthetic acquisition with its ground truth.
type Mosaic struct {
	Cfg   MosaicConfig
	Scene *Scene
	Tiles []*raster.Float32
	Grid  []align.GridPos
	Truth []raster.Point // true tile positions in scene px
	Pairs []align.Pair   // all neighbour pairs, in align.Pairs order
	// Textureless marks pairs whose true overlap has no texture (from
	// EmptyTiles or EmptyPairs).
	Textureless []bool
	// EmptyTile marks tiles listed in EmptyTiles.
	EmptyTile []bool
}

// TrueTranslation returns the true position of pair i's B minus its A.
func (m *Mosaic) TrueTranslation(i int) (dy, dx float64) {
	pr := m.Pairs[i]
	return m.Truth[pr.B].Y - m.Truth[pr.A].Y, m.Truth[pr.B].X - m.Truth[pr.A].X
}

// NewMosaic builds the scene, true positions and tiles of cfg. Tiles are
// indexed row by row (tile = row*Cols + col).
func NewMosaic(cfg MosaicConfig) *Mosaic {
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	m := &Mosaic{Cfg: cfg}
	n := cfg.Rows * cfg.Cols
	stepY := float64(cfg.H) * (1 - cfg.Overlap)
	stepX := float64(cfg.W) * (1 - cfg.Overlap)
	margin := cfg.Jitter + 8
	for i := range n {
		r, c := i/cfg.Cols, i%cfg.Cols
		m.Grid = append(m.Grid, align.GridPos{Row: r, Col: c})
		y := margin + float64(r)*stepY + cfg.Jitter*(2*rng.Float64()-1)
		x := margin + float64(c)*stepX + cfg.Jitter*(2*rng.Float64()-1)
		if cfg.Integer {
			y, x = math.Round(y), math.Round(x)
		}
		m.Truth = append(m.Truth, raster.Point{Y: y, X: x})
	}
	sh := 2*margin + float64(cfg.Rows-1)*stepY + float64(cfg.H)
	sw := 2*margin + float64(cfg.Cols-1)*stepX + float64(cfg.W)
	m.Scene = newScene(rng, sh, sw, cfg.Period)
	m.Pairs = align.Pairs(cfg.Rows, cfg.Cols, m.Grid)
	m.EmptyTile = make([]bool, n)
	const pad = 3
	var empty []Rect
	for _, t := range cfg.EmptyTiles {
		m.EmptyTile[t] = true
		p := m.Truth[t]
		empty = append(empty, Rect{p.Y - pad, p.X - pad, p.Y + float64(cfg.H) + pad, p.X + float64(cfg.W) + pad})
	}
	for _, e := range cfg.EmptyPairs {
		a, b := m.Truth[e[0]], m.Truth[e[1]]
		empty = append(empty, Rect{
			max(a.Y, b.Y) - pad, max(a.X, b.X) - pad,
			min(a.Y, b.Y) + float64(cfg.H) + pad, min(a.X, b.X) + float64(cfg.W) + pad,
		})
	}
	m.Scene.SetEmpty(empty...)
	m.Textureless = make([]bool, len(m.Pairs))
	for i, pr := range m.Pairs {
		m.Textureless[i] = m.EmptyTile[pr.A] || m.EmptyTile[pr.B]
		for _, e := range cfg.EmptyPairs {
			if e[0] == pr.A && e[1] == pr.B || e[0] == pr.B && e[1] == pr.A {
				m.Textureless[i] = true
			}
		}
	}
	for i := range n {
		t := raster.NewFloat32(cfg.W, cfg.H)
		m.Scene.Render(t, m.Truth[i].Y, m.Truth[i].X, cfg.Workers)
		if cfg.Vignette > 0 {
			cy, cx := float64(cfg.H-1)/2, float64(cfg.W-1)/2
			d2 := cy*cy + cx*cx
			for y := range cfg.H {
				for x := range cfg.W {
					r2 := ((float64(y)-cy)*(float64(y)-cy) + (float64(x)-cx)*(float64(x)-cx)) / d2
					t.Pix[y*cfg.W+x] *= float32(1 - cfg.Vignette*r2)
				}
			}
		}
		if cfg.Noise > 0 {
			for j := range t.Pix {
				t.Pix[j] += float32(cfg.Noise * rng.NormFloat64())
			}
		}
		m.Tiles = append(m.Tiles, t)
	}
	return m
}
