// Package raster holds the host image types shared by every stage.
//
// Conventions used across the project:
//   - A plane is indexed (y, x); a stack is indexed (n, y, x) where n is the
//     tile, z-plane or frame index.
//   - Memory is row-major with x fastest: pixel (y, x) of a plane is Pix[y*W+x];
//     pixel (n, y, x) of a stack is Pix[(n*H+y)*W+x].
//   - Gray16 holds raw detector counts (0..65535). Float32 holds either counts
//     or intensities normalised to [0, 1] by 65535; each API states which.
//
// This package has no GPU dependency; GPU code depends on it, never the
// reverse (DeviceGray16 is only the interface an engine's device plane
// satisfies).
package raster

import (
	"context"
	"fmt"
)

// Gray16 is a uint16 plane in detector counts, row-major (y, x), x fastest.
type Gray16 struct {
	W, H int
	Pix  []uint16
}

// NewGray16 allocates a zeroed W x H plane.
func NewGray16(w, h int) *Gray16 {
	if w <= 0 || h <= 0 {
		panic(fmt.Sprintf("raster: invalid size %dx%d", w, h))
	}
	return &Gray16{W: w, H: h, Pix: make([]uint16, w*h)}
}

// DeviceGray16 is a Gray16 held on an engine's device (the GPU's blended
// mosaics): its size (px), a copy to a host plane of that size (returning
// when dst holds it), and Free, which gives the device memory back (a
// second Free does nothing). Its owner frees it.
type DeviceGray16 interface {
	Size() (w, h int)
	Download(ctx context.Context, dst *Gray16) error
	Free()
}

// At returns pixel (y, x).
func (g *Gray16) At(y, x int) uint16 { return g.Pix[y*g.W+x] }

// HostPlanes is implemented by an engine that keeps host planes in memory
// of its own: the GPU's page-locked memory, which the card reads and writes
// directly, without a copy through staging buffers (and which is not
// zeroed first). NewPlane returns a w x h plane whose contents are
// undefined; FreePlane takes one back for reuse (its holder no longer
// touches it) and ignores planes it did not make. Callers go through
// NewPlane and FreePlane below, which fall back to Go memory.
type HostPlanes interface {
	NewPlane(ctx context.Context, w, h int) (*Gray16, error)
	FreePlane(g *Gray16)
}

// NewPlane returns a w x h plane from engine if it implements HostPlanes
// (contents undefined), else a new zeroed one.
func NewPlane(ctx context.Context, engine any, w, h int) (*Gray16, error) {
	if hp, ok := engine.(HostPlanes); ok {
		return hp.NewPlane(ctx, w, h)
	}
	return NewGray16(w, h), nil
}

// FreePlane gives g back to engine if it implements HostPlanes (g must not
// be used afterwards); otherwise the garbage collector takes it.
func FreePlane(engine any, g *Gray16) {
	if hp, ok := engine.(HostPlanes); ok {
		hp.FreePlane(g)
	}
}

// FreePlanes is FreePlane for every plane of gs (nil entries skipped).
func FreePlanes(engine any, gs []*Gray16) {
	for _, g := range gs {
		if g != nil {
			FreePlane(engine, g)
		}
	}
}

// Float32 is a float32 plane, row-major (y, x), x fastest. Units are stated by
// the API that produces or consumes it.
type Float32 struct {
	W, H int
	Pix  []float32
}

// NewFloat32 allocates a zeroed W x H plane.
func NewFloat32(w, h int) *Float32 {
	if w <= 0 || h <= 0 {
		panic(fmt.Sprintf("raster: invalid size %dx%d", w, h))
	}
	return &Float32{W: w, H: h, Pix: make([]float32, w*h)}
}

// At returns pixel (y, x).
func (f *Float32) At(y, x int) float32 { return f.Pix[y*f.W+x] }

// Stack is a float32 stack of N planes of W x H, indexed (n, y, x), x fastest.
type Stack struct {
	N, H, W int
	Pix     []float32
}

// NewStack allocates a zeroed stack of n planes of w x h.
func NewStack(n, h, w int) *Stack {
	if n <= 0 || w <= 0 || h <= 0 {
		panic(fmt.Sprintf("raster: invalid stack size %dx%dx%d", n, h, w))
	}
	return &Stack{N: n, H: h, W: w, Pix: make([]float32, n*h*w)}
}

// Plane returns plane i as a slice that aliases the stack's memory.
func (s *Stack) Plane(i int) []float32 {
	sz := s.H * s.W
	return s.Pix[i*sz : (i+1)*sz]
}

// Normalize16 converts counts to intensities in [0, 1] (count / 65535), writing
// into dst (allocated when nil) and returning it.
func Normalize16(dst []float32, src []uint16) []float32 {
	if dst == nil {
		dst = make([]float32, len(src))
	}
	const inv = 1.0 / 65535.0
	for i, v := range src {
		dst[i] = float32(v) * inv
	}
	return dst
}

// Quantize16 converts intensities in [0, 1] back to counts, clipping to
// [0, 65535] and rounding to nearest (the original truncated; rounding removes
// its systematic -0.5 count bias).
func Quantize16(dst []uint16, src []float32) []uint16 {
	if dst == nil {
		dst = make([]uint16, len(src))
	}
	for i, v := range src {
		dst[i] = Clip16(float64(v)*65535 + 0.5)
	}
	return dst
}

// AllZero16 reports whether every count of pix is zero, stopping at the
// first that is not (in 16-count blocks, one test per block).
func AllZero16(pix []uint16) bool {
	for len(pix) >= 16 {
		b := pix[:16:16]
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7]|b[8]|b[9]|b[10]|b[11]|b[12]|b[13]|b[14]|b[15] != 0 {
			return false
		}
		pix = pix[16:]
	}
	for _, v := range pix {
		if v != 0 {
			return false
		}
	}
	return true
}

// Point is a position in pixels, (Y, X) with +Y down and +X right. Tile
// positions are the mosaic coordinates of a tile's pixel (0, 0).
type Point struct {
	Y, X float64
}

// Clip16 converts counts c to uint16 by truncation, clipped to [0, 65535]:
// c <= 0 and NaN give 0. Callers add 0.5 first to round half up.
func Clip16(c float64) uint16 {
	switch {
	case !(c > 0): // also catches NaN
		return 0
	case c >= 65535:
		return 65535
	default:
		return uint16(c)
	}
}

// Mirror maps index i of a padded axis (i - before relative to the data)
// onto [0, n) by numpy's 'symmetric' rule, half-sample symmetric extension
// (… c b a | a b c … x y z | z y x …: the edge sample repeated), periodic
// with period 2n for paddings wider than n.
func Mirror(i, n int) int {
	p := 2 * n
	i %= p
	if i < 0 {
		i += p
	}
	if i >= n {
		i = p - 1 - i
	}
	return i
}
