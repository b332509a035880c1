package synth

import "math"

// Variety options (Options.DarkfieldVary, MarkerFraction, TissueCover) make
// the generator's data less like the one sample it was built from: a
// darkfield with a spatial pattern of a few hundred counts, channels of a
// chosen density, and a tissue edge that crosses tiles so that background
// is seen only in mixed glass/tissue tiles. Their zero values leave every
// preset's output unchanged (the variety draws come from their own random
// streams).

// darkVaryTerms is the number of cosine terms of the darkfield pattern.
const darkVaryTerms = 4

// darkfieldVariation adds to vals (TileH x TileW, row-major) channel c's
// smooth spatial darkfield pattern: a sum of darkVaryTerms random 2-D
// cosines of 0.3 to 1.5 periods across the tile, scaled to
// o.DarkfieldVary counts peak to peak and made zero-mean (the caller's
// shift restores DarkfieldMean). Camera darkfields (fixed-pattern offset,
// amplifier glow at an edge or corner) vary by tens to hundreds of counts
// on this scale. It does nothing when DarkfieldVary is 0.
func (o Options) darkfieldVariation(vals []float64, c int) {
	if !(o.DarkfieldVary > 0) {
		return
	}
	rng := stream(o.Seed, tagFlat, uint64(c), 3)
	type term struct{ ky, kx, ph, a float64 }
	terms := make([]term, darkVaryTerms)
	for k := range terms {
		phi := 2 * math.Pi * rng.Float64()
		f := 2 * math.Pi * (0.3 + 1.2*rng.Float64()) // radians across the tile
		terms[k] = term{ky: f * math.Cos(phi), kx: f * math.Sin(phi), ph: 2 * math.Pi * rng.Float64(), a: 0.5 + rng.Float64()}
	}
	pat := make([]float64, len(vals))
	lo, hi := math.Inf(1), math.Inf(-1)
	var sum float64
	for i := range o.TileH {
		u := float64(i)/float64(max(1, o.TileH-1)) - 0.5
		for j := range o.TileW {
			v := float64(j)/float64(max(1, o.TileW-1)) - 0.5
			var x float64
			for _, t := range terms {
				x += t.a * math.Cos(t.ky*u+t.kx*v+t.ph)
			}
			pat[i*o.TileW+j] = x
			lo, hi = min(lo, x), max(hi, x)
			sum += x
		}
	}
	if !(hi > lo) {
		return
	}
	mean := sum / float64(len(pat))
	scale := o.DarkfieldVary / (hi - lo)
	for p, x := range pat {
		vals[p] += (x - mean) * scale
	}
}

// markerFraction returns the fraction of cells a marker channel labels:
// o.MarkerFraction when set, else the drawn value p.
func (o Options) markerFraction(p float64) float64 {
	if o.MarkerFraction > 0 {
		return o.MarkerFraction
	}
	return p
}

// tissueEdge returns the tissue-edge factor at scene point (y, x) when
// TissueCover is set: the tissue is cut by a straight boundary at a random
// (seeded) angle through the nominal mosaic, placed so that about
// TissueCover of the mosaic is on the tissue side; the edge is soft over
// 5 % of a tile. Tiles on the boundary are mixed glass/tissue; with
// TissueCover near 1 there are few or no whole glass tiles. Without
// TissueCover it returns 1.
type tissueEdge struct {
	on             bool
	ny, nx, d0, sw float64
}

func newTissueEdge(o Options) tissueEdge {
	if !(o.TissueCover > 0) {
		return tissueEdge{}
	}
	rng := stream(o.Seed, tagTissue, 1)
	phi := 2 * math.Pi * rng.Float64()
	e := tissueEdge{on: true, ny: math.Cos(phi), nx: math.Sin(phi), sw: 0.05 * float64(min(o.TileH, o.TileW))}
	h, w := o.nominalSize()
	// Signed distance along the normal: the cover fraction of a rectangle
	// is found by bisection on a coarse grid.
	const g = 64
	frac := func(d0 float64) float64 {
		var in int
		for a := range g {
			y := (float64(a) + 0.5) / g * h
			for b := range g {
				x := (float64(b) + 0.5) / g * w
				if e.ny*y+e.nx*x-d0 < 0 {
					in++
				}
			}
		}
		return float64(in) / (g * g)
	}
	lo, hi := -(h + w), h+w
	for range 50 {
		mid := (lo + hi) / 2
		if frac(mid) < o.TissueCover {
			lo = mid
		} else {
			hi = mid
		}
	}
	e.d0 = (lo + hi) / 2
	return e
}

func (e tissueEdge) at(y, x float64) float64 {
	if !e.on {
		return 1
	}
	return smoothstep((e.d0 - (e.ny*y + e.nx*x)) / e.sw)
}
