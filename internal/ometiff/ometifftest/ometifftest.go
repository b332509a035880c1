// Package ometifftest holds the test images of the OME-TIFF's
// Huffman-only tiles, shared by package ometiff's tests (CPUCoder) and the
// GPU's (its Coder against CPUCoder).
package ometifftest

import (
	"math/rand/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// CoderImages are planes that stress the Huffman-only tiles: zero
// background (two symbols per block), uniform noise (stored blocks),
// microscope-like noise on a background, a geometric distribution of
// values (codes past 15 bits before the limit), and a mixture of all
// three kinds, at sizes that leave edge tiles of every kind. The same
// images on every call (fixed seed).
func CoderImages() map[string]*raster.Gray16 {
	r := rand.New(rand.NewPCG(3, 4))
	mk := func(w, h int, f func(x, y int) uint16) *raster.Gray16 {
		g := raster.NewGray16(w, h)
		for y := range h {
			for x := range w {
				g.Pix[y*w+x] = f(x, y)
			}
		}
		return g
	}
	return map[string]*raster.Gray16{
		"zeros":   mk(700, 300, func(x, y int) uint16 { return 0 }),
		"uniform": mk(530, 517, func(x, y int) uint16 { return uint16(r.Uint32()) }),
		"tissue": mk(1100, 700, func(x, y int) uint16 {
			v := 300 + 40*r.NormFloat64()
			if (x/90+y/70)%3 == 0 {
				v += 2000
			}
			return uint16(max(0, v))
		}),
		"geometric": mk(300, 200, func(x, y int) uint16 {
			v := 0
			for v < 60000 && r.IntN(2) == 0 {
				v = 2*v + 1
			}
			return uint16(v)
		}),
		"mixed": mk(1030, 530, func(x, y int) uint16 {
			switch {
			case y < 200:
				return 0
			case x < 400:
				return uint16(r.Uint32())
			}
			return uint16(1000 + r.IntN(50))
		}),
	}
}
