package align

import "github.com/kintsugi-hpc/kintsugi-go/internal/raster"

// This file holds the scorer's way of computing NCC: the float64 sums of
// NCC (Σa, Σb, Σa², Σb², Σab over the overlap), arranged so that the
// translations a hill-climb scores share work, and so that a translation's
// score depends only on the pair (tiles and PairGeometry) and the
// translation: never on what was scored before or alongside it (memoised
// scores can be shared freely, and the CPU translator's results still do
// not depend on the order of its candidates or on cropping).
//
//   - Σa, Σa² over A's side of an overlap and Σb, Σb² over B's side depend
//     only on the region. Each side sums once an anchor region (the overlap
//     at the pair's nominal translation) and gets a region near it by
//     adding and subtracting the strips in which the two differ, a few px
//     wide for the translations a climb visits (sideSums).
//   - Σab needs a pass over the overlap per translation. Up to maxBatch
//     translations share it (crossSums): one load of A's pixel serves them
//     all. The pass follows the order of a pass for one translation alone
//     (rows in turn, each row's products in two alternating accumulators),
//     so Σab is the same to the bit however translations are batched.
//   - A lone translation far from the anchor (a phase-correlation
//     candidate) gets all five sums in one pass, as NCC does (overlapSums).
//
// Only the order of the float64 additions differs from NCC, so the scores
// agree with NCC to float64 rounding (TestScoresMatchReference); that they
// do not depend on batching is TestScoresIndependentOfBatching.

// rect is the region [y0, y1) x [x0, x1) of a tile, px.
type rect struct{ y0, y1, x0, x1 int }

func (r rect) empty() bool { return r.y1 <= r.y0 || r.x1 <= r.x0 }

func (r rect) area() int {
	if r.empty() {
		return 0
	}
	return (r.y1 - r.y0) * (r.x1 - r.x0)
}

func (r rect) intersect(s rect) rect {
	return rect{max(r.y0, s.y0), min(r.y1, s.y1), max(r.x0, s.x0), min(r.x1, s.x1)}
}

func (r rect) shift(dy, dx int) rect { return rect{r.y0 + dy, r.y1 + dy, r.x0 + dx, r.x1 + dx} }

// overlapRect is the overlap of two h x w tiles at translation (dy, dx)
// on A's side (as NCC); B's side is overlapRect(...).shift(-dy, -dx).
func overlapRect(h, w, dy, dx int) rect {
	return rect{max(0, dy), min(h, h+dy), max(0, dx), min(w, w+dx)}
}

// subtract calls f with disjoint rectangles that together cover r minus s:
// the rows of r above and below s, then the parts of the rows they share
// left and right of s.
func subtract(r, s rect, f func(rect)) {
	if r.empty() {
		return
	}
	c := r.intersect(s)
	if c.empty() {
		f(r)
		return
	}
	if r.y0 < c.y0 {
		f(rect{r.y0, c.y0, r.x0, r.x1})
	}
	if c.y1 < r.y1 {
		f(rect{c.y1, r.y1, r.x0, r.x1})
	}
	if r.x0 < c.x0 {
		f(rect{c.y0, c.y1, r.x0, c.x0})
	}
	if c.x1 < r.x1 {
		f(rect{c.y0, c.y1, c.x1, r.x1})
	}
}

// regionSums returns Σv and Σv² over region r of t, in float64, in the
// order of overlapSums (the same sums to the bit).
func regionSums(t *raster.Float32, r rect) (s, ss float64) {
	for y := r.y0; y < r.y1; y++ {
		row := t.Pix[y*t.W+r.x0 : y*t.W+r.x1]
		var s0, s1, ss0, ss1 float64
		i := 0
		for ; i+1 < len(row); i += 2 {
			v0, v1 := float64(row[i]), float64(row[i+1])
			s0 += v0
			ss0 += v0 * v0
			s1 += v1
			ss1 += v1 * v1
		}
		if i < len(row) {
			v := float64(row[i])
			s0 += v
			ss0 += v * v
		}
		s += s0 + s1
		ss += ss0 + ss1
	}
	return s, ss
}

// sideSums gives Σv and Σv² over regions of one tile near an anchor
// region: the anchor's sums (computed on first use) plus the strips of the
// region outside the anchor minus the strips of the anchor outside the
// region.
type sideSums struct {
	t      *raster.Float32
	anchor rect
	s, ss  float64
	ready  bool
}

// near reports whether r is near enough the anchor that its sums are
// cheaper from the anchor's: the strips cover less than a quarter of r.
func (p *sideSums) near(r rect) bool {
	return 4*(r.area()+p.anchor.area()-2*r.intersect(p.anchor).area()) < r.area()
}

// sums returns Σv and Σv² over r: from the anchor's when r is near it,
// else its own.
func (p *sideSums) sums(r rect) (s, ss float64) {
	if r.empty() {
		return 0, 0
	}
	if !p.near(r) {
		return regionSums(p.t, r)
	}
	if !p.ready {
		p.s, p.ss = regionSums(p.t, p.anchor)
		p.ready = true
	}
	s, ss = p.s, p.ss
	subtract(r, p.anchor, func(q rect) {
		qs, qss := regionSums(p.t, q)
		s += qs
		ss += qss
	})
	subtract(p.anchor, r, func(q rect) {
		qs, qss := regionSums(p.t, q)
		s -= qs
		ss -= qss
	})
	return s, ss
}

// maxBatch is the most translations whose Σab share one pass.
const maxBatch = 4

// crossSums returns Σab = Σ a(y, x)·b(y−dy, x−dx) over the overlap of each
// translation (dy, dx) in t (len(t) <= maxBatch), 0 for an empty overlap.
// For each translation the rows of its overlap are taken in turn and each
// row's products summed in two accumulators (pixels x0, x0+2, ... and
// x0+1, x0+3, ...) that are then added; the row sums are added in row
// order. The translations whose overlaps have most of their rows and
// columns in common share one pass over those (rowDots), each taking the
// pixels it has beyond them on its own, in the same order.
func crossSums(a, b *raster.Float32, t [][2]int) [maxBatch]float64 {
	if len(t) > maxBatch {
		panic("align: crossSums of too many translations")
	}
	h, w := a.H, a.W
	var out [maxBatch]float64
	var ov [maxBatch]rect
	var live []int // indices into t of the non-empty overlaps
	var liveBuf [maxBatch]int
	live = liveBuf[:0]
	core := rect{0, h, 0, w}
	for k, d := range t {
		ov[k] = overlapRect(h, w, d[0], d[1])
		if !ov[k].empty() {
			live = append(live, k)
			core = core.intersect(ov[k])
		}
	}
	// Share the pass only where the common part is most of every overlap.
	shared := len(live) > 1 && !core.empty()
	for _, k := range live {
		if shared && 4*(ov[k].area()-core.area()) > ov[k].area() {
			shared = false
		}
	}
	if !shared {
		for _, k := range live {
			out[k] = crossSum(a, b, ov[k], t[k])
		}
		return out
	}
	y0, y1 := h, 0
	for _, k := range live {
		y0, y1 = min(y0, ov[k].y0), max(y1, ov[k].y1)
	}
	var rbs [maxBatch][]float32
	var acc [maxBatch][2]float64
	for y := y0; y < y1; y++ {
		if y < core.y0 || y >= core.y1 {
			// a row only some overlaps have: each on its own
			for _, k := range live {
				if r := ov[k]; y >= r.y0 && y < r.y1 {
					out[k] += rowDot(a, b, y, r.x0, r.x1, t[k])
				}
			}
			continue
		}
		ra := a.Pix[y*w:][:w]
		for j, k := range live {
			r, d := ov[k], t[k]
			ob := (y-d[0])*w - d[1] // b.Pix[ob+x] = b(y−dy, x−dx)
			// the pixels left of the shared columns, then the shared ones
			// (the parity of x − x0 picks the accumulator), then those right
			var s [2]float64
			for x := r.x0; x < core.x0; x++ {
				s[(x-r.x0)&1] += float64(ra[x]) * float64(b.Pix[ob+x])
			}
			if (core.x0-r.x0)&1 == 1 {
				s[0], s[1] = s[1], s[0]
			}
			acc[j] = s
			rbs[j] = b.Pix[ob+core.x0 : ob+core.x1]
		}
		rowDots(ra[core.x0:core.x1], rbs[:len(live)], &acc)
		for j, k := range live {
			r, d := ov[k], t[k]
			ob := (y-d[0])*w - d[1]
			s := acc[j]
			if (core.x0-r.x0)&1 == 1 {
				s[0], s[1] = s[1], s[0]
			}
			for x := core.x1; x < r.x1; x++ {
				s[(x-r.x0)&1] += float64(ra[x]) * float64(b.Pix[ob+x])
			}
			out[k] += s[0] + s[1]
		}
	}
	return out
}

// crossSum is crossSums for one translation d with overlap r.
func crossSum(a, b *raster.Float32, r rect, d [2]int) float64 {
	var s float64
	for y := r.y0; y < r.y1; y++ {
		s += rowDot(a, b, y, r.x0, r.x1, d)
	}
	return s
}

// rowDot is the sum of a(y, x)·b(y−dy, x−dx) over x in [x0, x1), in the
// order of crossSums.
func rowDot(a, b *raster.Float32, y, x0, x1 int, d [2]int) float64 {
	w, n := a.W, x1-x0
	s0, s1 := dot1(a.Pix[y*w+x0:][:n], b.Pix[(y-d[0])*w+x0-d[1]:][:n], 0, 0)
	return s0 + s1
}

// rowDots adds, for each row rbs[k] (as long as ra), the products
// ra[i]·rbs[k][i] of even i to acc[k][0] and of odd i to acc[k][1], in
// increasing i, in float64. Two or three rows run dot4 with the last row
// repeated; the extra accumulators are scratch, never read.
func rowDots(ra []float32, rbs [][]float32, acc *[maxBatch][2]float64) {
	switch len(rbs) {
	case 1:
		acc[0][0], acc[0][1] = dot1(ra, rbs[0], acc[0][0], acc[0][1])
	case 2:
		dot4(ra, rbs[0], rbs[1], rbs[1], rbs[1], acc)
	case 3:
		dot4(ra, rbs[0], rbs[1], rbs[2], rbs[2], acc)
	case 4:
		dot4(ra, rbs[0], rbs[1], rbs[2], rbs[3], acc)
	default:
		panic("align: rowDots batch size")
	}
}

// dot1 and dot4 are rowDots for one and four rows, with the accumulators
// in registers.
func dot1(a, b []float32, s0, s1 float64) (float64, float64) {
	b = b[:len(a)]
	i := 0
	for ; i+1 < len(a); i += 2 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
	}
	if i < len(a) {
		s0 += float64(a[i]) * float64(b[i])
	}
	return s0, s1
}

func dot4(a, b0, b1, b2, b3 []float32, acc *[maxBatch][2]float64) {
	b0, b1, b2, b3 = b0[:len(a)], b1[:len(a)], b2[:len(a)], b3[:len(a)]
	s00, s01, s10, s11 := acc[0][0], acc[0][1], acc[1][0], acc[1][1]
	s20, s21, s30, s31 := acc[2][0], acc[2][1], acc[3][0], acc[3][1]
	i := 0
	for ; i+1 < len(a); i += 2 {
		v0, v1 := float64(a[i]), float64(a[i+1])
		s00 += v0 * float64(b0[i])
		s10 += v0 * float64(b1[i])
		s20 += v0 * float64(b2[i])
		s30 += v0 * float64(b3[i])
		s01 += v1 * float64(b0[i+1])
		s11 += v1 * float64(b1[i+1])
		s21 += v1 * float64(b2[i+1])
		s31 += v1 * float64(b3[i+1])
	}
	if i < len(a) {
		v := float64(a[i])
		s00 += v * float64(b0[i])
		s10 += v * float64(b1[i])
		s20 += v * float64(b2[i])
		s30 += v * float64(b3[i])
	}
	acc[0][0], acc[0][1], acc[1][0], acc[1][1] = s00, s01, s10, s11
	acc[2][0], acc[2][1], acc[3][0], acc[3][1] = s20, s21, s30, s31
}

// nccBatch returns the NCC (as NCC) of the scorer's pair at up to maxBatch
// translations t, 0 where the overlap is empty. A lone translation whose
// sides are both far from the anchors gets all five sums in one pass
// (overlapSums, the same sums to the bit).
func (s *scorer) nccBatch(t [][2]int) [maxBatch]float64 {
	var out [maxBatch]float64
	h, w := s.a.H, s.a.W
	if len(t) == 1 {
		d := t[0]
		r := overlapRect(h, w, d[0], d[1])
		if r.empty() {
			return out
		}
		if rb := r.shift(-d[0], -d[1]); !s.sa.near(r) && !s.sb.near(rb) {
			sa, sb, saa, sbb, sab := overlapSums(s.a, s.b, r, d[0], d[1])
			out[0] = NCCFromSums(sa, sb, saa, sbb, sab, float64(r.area()))
			return out
		}
	}
	sab := crossSums(s.a, s.b, t)
	for k, d := range t {
		r := overlapRect(h, w, d[0], d[1])
		if r.empty() {
			continue
		}
		s1, ss1 := s.sa.sums(r)
		s2, ss2 := s.sb.sums(r.shift(-d[0], -d[1]))
		out[k] = NCCFromSums(s1, s2, ss1, ss2, sab[k], float64(r.area()))
	}
	return out
}
