// Package align computes tile positions of a grid mosaic: pairwise
// translations between grid neighbours by phase correlation checked with
// normalised cross-correlation (NCC), outlier filtering with a stage model
// (MIST), a maximum spanning tree over NCC weights, and optionally a global
// robust least-squares refinement of the positions over all accepted pairs.
//
// Tiles are float32 planes (y, x), all of the same size, row-major with x
// fastest (raster.Float32), in any intensity unit (NCC is invariant to gain
// and offset). Positions are in pixels, (Y, X), of each tile's pixel (0, 0),
// shifted so the minimum is 0. A translation is B's position minus A's, px.
//
// Implementations: CPU (cpu.go) and the CUDA translator in internal/gpu,
// both held to the suite in aligntest; Align (mist.go) does the filtering
// and placement on the host for either.
package align

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Direction says where tile B lies relative to tile A.
type Direction int

const (
	Left Direction = iota // B is the right-hand neighbour of A (same row, col+1)
	Top                   // B is the neighbour below A (row+1, same col)
)

// Pair is one neighbour pair, by indices into the tile slice.
type Pair struct {
	A, B int
	Dir  Direction
}

// Translation is the measured position of tile B minus the position of tile
// A, in px, with the NCC of the overlap at that translation.
type Translation struct {
	DY, DX float64
	NCC    float64
}

// Params are the alignment settings (config keys in brackets).
type Params struct {
	Overlap      float64 // expected overlap fraction of a tile, (0,1) [tile_overlap]
	NCCThreshold float64 // initial NCC threshold [ncc_threshold] (0.078)
	POU          float64 // percent overlap uncertainty, % of tile size [pou] (0.5)
	Subpixel     bool    // refine translations to sub-pixel precision
	// Global: solve the positions by robust least squares over all
	// accepted pairs (step 10 of Align) instead of placing them along the
	// spanning tree [stitching.global_refinement]. Translators ignore it.
	Global bool
}

// PairTranslator measures the translations of neighbour pairs. This is the
// heavy part (FFTs, NCC) and has a CPU reference and a CUDA implementation
// held to the same conformance suite (aligntest).
type PairTranslator interface {
	Translate(ctx context.Context, tiles []*raster.Float32, pairs []Pair, p Params) ([]Translation, error)
}
