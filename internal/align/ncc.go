package align

import (
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// NCC returns the normalised cross-correlation (Pearson correlation) of the
// region where tiles a and b overlap when b is placed at integer translation
// (dy, dx) from a, that is b(y, x) is compared with a(y+dy, x+dx). It is 0
// when the overlap is empty or either side has zero variance.
//
// Fix of the original: m2stitch/Kstitch divide the mean-subtracted dot
// product by the norms of the raw regions, ‖a‖·‖b‖, instead of the norms of
// the mean-subtracted regions. That shrinks the score by std/rms of each
// side, so it depends on the background offset and is not bounded by the
// same ±1 for dim and bright tiles; the threshold (0.078) then means
// different things for different channels. Here numerator and denominator
// are both mean-subtracted.
//
// Sums are accumulated in float64 in one pass (Σa, Σb, Σa², Σb², Σab); with
// float32 inputs of at most a few million pixels the cancellation in
// Σa² − (Σa)²/n loses far less than float32 resolution.
func NCC(a, b *raster.Float32, dy, dx int) float64 {
	if a.W != b.W || a.H != b.H {
		panic("align: NCC of tiles of different sizes")
	}
	r := overlapRect(a.H, a.W, dy, dx)
	if r.empty() {
		return 0
	}
	sa, sb, saa, sbb, sab := overlapSums(a, b, r, dy, dx)
	return NCCFromSums(sa, sb, saa, sbb, sab, float64(r.area()))
}

// overlapSums returns NCC's sums Σa, Σb, Σa², Σb², Σab over the overlap r
// (A's side) at translation (dy, dx), in one pass. Row by row, each row's
// pixels alternate between two sets of accumulators (x0, x0+2, ... and
// x0+1, x0+3, ...), added at the end of the row; the row sums are added in
// row order. This is the order of regionSums and crossSums, so each sum is
// the same to the bit as theirs.
func overlapSums(a, b *raster.Float32, r rect, dy, dx int) (sa, sb, saa, sbb, sab float64) {
	w := a.W
	for y := r.y0; y < r.y1; y++ {
		ra := a.Pix[y*w+r.x0 : y*w+r.x1]
		ob := (y-dy)*w - dx
		rs := rowSums(ra, b.Pix[ob+r.x0:ob+r.x1])
		sa += rs[0]
		sb += rs[1]
		saa += rs[2]
		sbb += rs[3]
		sab += rs[4]
	}
	return sa, sb, saa, sbb, sab
}

// rowSums returns NCC's five sums (Σa, Σb, Σa², Σb², Σab) of one row pair
// in float64: the pixels alternate between two sets of accumulators (even
// and odd i, shortening the dependency chains), added at the end. It is
// the row step of overlapSums and TextureNCC.
func rowSums[T float32 | float64](ra, rb []T) [5]float64 {
	rb = rb[:len(ra)]
	var s0a, s0b, s0aa, s0bb, s0ab float64
	var s1a, s1b, s1aa, s1bb, s1ab float64
	i := 0
	for ; i+1 < len(ra); i += 2 {
		va, vb := float64(ra[i]), float64(rb[i])
		s0a += va
		s0b += vb
		s0aa += va * va
		s0bb += vb * vb
		s0ab += va * vb
		va, vb = float64(ra[i+1]), float64(rb[i+1])
		s1a += va
		s1b += vb
		s1aa += va * va
		s1bb += vb * vb
		s1ab += va * vb
	}
	if i < len(ra) {
		va, vb := float64(ra[i]), float64(rb[i])
		s0a += va
		s0b += vb
		s0aa += va * va
		s0bb += vb * vb
		s0ab += va * vb
	}
	return [5]float64{s0a + s1a, s0b + s1b, s0aa + s1aa, s0bb + s1bb, s0ab + s1ab}
}

// NCCFromSums is NCC's final step from float64 sums over an overlap of n
// pixels (Σa, Σb, Σa², Σb², Σab): the Pearson correlation, 0 for zero
// variance or n = 0, clamped to [-1, 1].
func NCCFromSums(sa, sb, saa, sbb, sab, n float64) float64 {
	if !(n > 0) {
		return 0
	}
	va := saa - sa*sa/n
	vb := sbb - sb*sb/n
	if !(va > 0) || !(vb > 0) {
		return 0
	}
	r := (sab - sa*sb/n) / math.Sqrt(va*vb)
	return max(-1, min(1, r))
}

// PairGeometry holds what is known about a pair before measuring it: tile
// size, direction, the nominal translation from the overlap fraction, and the
// smallest overlap a candidate translation may leave. Every PairTranslator
// uses it, so the CPU and GPU translators share these rules.
type PairGeometry struct {
	H, W         int
	Dir          Direction
	NomY, NomX   float64 // nominal translation of B from A, px
	MinOY, MinOX int     // least overlap extents for a candidate, px
}

// NewPairGeometry returns the geometry of a pair of h x w tiles.
func NewPairGeometry(h, w int, dir Direction, overlap float64) PairGeometry {
	g := PairGeometry{H: h, W: w, Dir: dir}
	switch dir {
	case Left:
		g.NomX = float64(w) * (1 - overlap)
		g.MinOX = max(2, int(math.Ceil(overlap*float64(w)/2)))
		g.MinOY = max(2, (h+1)/2)
	case Top:
		g.NomY = float64(h) * (1 - overlap)
		g.MinOY = max(2, int(math.Ceil(overlap*float64(h)/2)))
		g.MinOX = max(2, (w+1)/2)
	default:
		panic("align: invalid direction")
	}
	return g
}

// Plausible reports whether translation (dy, dx) is worth scoring for this
// pair: B lies on the expected side of A (dx >= 0 for Left, dy >= 0 for Top)
// and the overlap is at least half the nominal overlap along the stitching
// axis and half the tile along the other. This guard is an addition to the
// original, which scores every wrap candidate: the NCC of a few pixels is
// noise that can exceed the NCC of the true, large overlap.
func (g PairGeometry) Plausible(dy, dx int) bool {
	if g.Dir == Left && dx < 0 || g.Dir == Top && dy < 0 {
		return false
	}
	return g.H-abs(dy) >= g.MinOY && g.W-abs(dx) >= g.MinOX
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// box bounds integer translations, inclusive.
type box struct {
	y0, y1, x0, x1 int
}

func (b *box) contains(y, x int) bool {
	return b == nil || y >= b.y0 && y <= b.y1 && x >= b.x0 && x <= b.x1
}

// scorer evaluates NCC of one pair at integer translations, memoised (and
// TextureNCC, memoised). Its scores are NCC's up to float64 rounding and
// depend only on the pair, its geometry and the translation: see
// nccsums.go for how it sums, several neighbours of a translation at a
// time (prefetch).
type scorer struct {
	a, b   *raster.Float32
	g      PairGeometry
	seen   map[[2]int]float64
	tex    map[[2]int]float64
	sa, sb sideSums // anchored at the overlap at the nominal translation
}

func newScorer(a, b *raster.Float32, g PairGeometry) *scorer {
	if a.W != b.W || a.H != b.H {
		panic("align: NCC of tiles of different sizes")
	}
	ny, nx := int(math.Round(g.NomY)), int(math.Round(g.NomX))
	anchor := overlapRect(a.H, a.W, ny, nx)
	return &scorer{
		a: a, b: b, g: g, seen: make(map[[2]int]float64, 32),
		sa: sideSums{t: a, anchor: anchor}, sb: sideSums{t: b, anchor: anchor.shift(-ny, -nx)},
	}
}

// score returns the NCC at (dy, dx) and whether the translation is plausible.
func (s *scorer) score(dy, dx int) (float64, bool) {
	if !s.g.Plausible(dy, dx) {
		return 0, false
	}
	return s.ncc(dy, dx), true
}

// ncc returns the NCC at (dy, dx), memoised, plausible or not.
func (s *scorer) ncc(dy, dx int) float64 {
	k := [2]int{dy, dx}
	if v, ok := s.seen[k]; ok {
		return v
	}
	v := s.nccBatch([][2]int{k})[0]
	s.seen[k] = v
	return v
}

// texture returns TextureNCC at (dy, dx), memoised.
func (s *scorer) texture(dy, dx int) float64 {
	k := [2]int{dy, dx}
	if v, ok := s.tex[k]; ok {
		return v
	}
	v := TextureNCC(s.a, s.b, dy, dx)
	if s.tex == nil {
		s.tex = make(map[[2]int]float64, 4)
	}
	s.tex[k] = v
	return v
}

// prefetch scores, in batches, the plausible translations of the 3x3
// neighbourhood of (y, x) that lie inside bx (nil: unbounded) and have not
// been scored, so that the score calls that follow find them memoised.
func (s *scorer) prefetch(y, x int, bx *box) {
	var todo [][2]int
	for ny := y - 1; ny <= y+1; ny++ {
		for nx := x - 1; nx <= x+1; nx++ {
			k := [2]int{ny, nx}
			if _, ok := s.seen[k]; ok || !bx.contains(ny, nx) || !s.g.Plausible(ny, nx) {
				continue
			}
			todo = append(todo, k)
		}
	}
	for len(todo) > 0 {
		n := min(len(todo), maxBatch)
		v := s.nccBatch(todo[:n])
		for i, k := range todo[:n] {
			s.seen[k] = v[i]
		}
		todo = todo[n:]
	}
}

// climb moves from (y, x), whose score is v, to the best of its 8 neighbours
// while that improves the NCC, staying inside bx (nil: unbounded) and among
// plausible translations. Ties keep the current position, so it terminates.
func (s *scorer) climb(y, x int, v float64, bx *box) (int, int, float64) {
	for range MaxClimb {
		s.prefetch(y, x, bx)
		by, bxx, bv := y, x, v
		for ny := y - 1; ny <= y+1; ny++ {
			for nx := x - 1; nx <= x+1; nx++ {
				if ny == y && nx == x || !bx.contains(ny, nx) {
					continue
				}
				if nv, ok := s.score(ny, nx); ok && nv > bv {
					by, bxx, bv = ny, nx, nv
				}
			}
		}
		if by == y && bxx == x {
			break
		}
		y, x, v = by, bxx, bv
	}
	return y, x, v
}

// subpixel refines an integer NCC maximum at (y, x) to sub-pixel precision
// by fitting a 2-D quadratic (least squares over the 3x3 neighbourhood) and
// taking its stationary point. It returns the integer position unchanged when
// a neighbour is not plausible, (y, x) is not the maximum of its
// neighbourhood, or the fit is not a maximum; offsets are clamped to ±0.5 px
// (beyond that a neighbouring integer would have scored higher).
func (s *scorer) subpixel(y, x int) (float64, float64) {
	s.prefetch(y, x, nil)
	var f [3][3]float64
	for i := -1; i <= 1; i++ {
		for j := -1; j <= 1; j++ {
			v, ok := s.score(y+i, x+j)
			if !ok {
				return float64(y), float64(x)
			}
			f[i+1][j+1] = v
		}
	}
	for i := range 3 {
		for j := range 3 {
			if f[i][j] > f[1][1] {
				return float64(y), float64(x)
			}
		}
	}
	oy, ox, ok := QuadPeak(&f)
	if !ok {
		return float64(y), float64(x)
	}
	return float64(y) + oy, float64(x) + ox
}

// QuadPeak fits f(u, v) = c + gy u + gx v + ayy (u²-2/3) + axx (v²-2/3) +
// axy u v to 3x3 samples f[u+1][v+1], u, v in {-1, 0, 1}, by least squares
// (the basis is orthogonal on the 3x3 grid, so each coefficient is one
// projection), and returns the stationary point when it is a maximum.
func QuadPeak(f *[3][3]float64) (oy, ox float64, ok bool) {
	var gy, gx, ayy, axx, axy float64
	for i := range 3 {
		for j := range 3 {
			u, v, w := float64(i-1), float64(j-1), f[i][j]
			gy += w * u
			gx += w * v
			ayy += w * (u*u - 2.0/3)
			axx += w * (v*v - 2.0/3)
			axy += w * u * v
		}
	}
	gy /= 6
	gx /= 6
	ayy /= 2
	axx /= 2
	axy /= 4
	// Hessian [[2ayy, axy], [axy, 2axx]] must be negative definite.
	hyy, hxx, hxy := 2*ayy, 2*axx, axy
	det := hyy*hxx - hxy*hxy
	if !(hyy < 0) || !(det > 0) {
		return 0, 0, false
	}
	// Solve H [oy ox] = -[gy gx].
	oy = (-gy*hxx + gx*hxy) / det
	ox = (-gx*hyy + gy*hxy) / det
	oy = max(-0.5, min(0.5, oy))
	ox = max(-0.5, min(0.5, ox))
	return oy, ox, true
}
