package planestats

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// naive is the definition, pixel by pixel: the Laplacian of every interior
// pixel added to the block that holds it, the histogram by counting.
func naive(g *raster.Gray16, block int) (hist map[uint16]uint64, blocks map[[2]int][]float64) {
	hist, blocks = map[uint16]uint64{}, map[[2]int][]float64{}
	at := func(y, x int) float64 { return float64(g.Pix[y*g.W+x]) }
	for y := 0; y < g.H; y++ {
		for x := 0; x < g.W; x++ {
			hist[g.Pix[y*g.W+x]]++
			if y == 0 || x == 0 || y == g.H-1 || x == g.W-1 {
				continue
			}
			l := 4*at(y, x) - at(y-1, x) - at(y+1, x) - at(y, x-1) - at(y, x+1)
			k := [2]int{y / block, x / block}
			blocks[k] = append(blocks[k], l)
		}
	}
	return hist, blocks
}

func refVariance(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var m float64
	for _, x := range v {
		m += x
	}
	m /= float64(len(v))
	var s float64
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return s / float64(len(v))
}

// TestOfMatchesDefinition: histogram, block moments, block and plane focus
// of random planes (sizes from 1 x 1, blocks from 1 px to larger than the
// plane) against the pixel-by-pixel definition.
func TestOfMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	sizes := [][3]int{{1, 1, 1}, {2, 5, 2}, {3, 3, 1}, {3, 3, 8}, {17, 9, 4}, {40, 33, 7}, {64, 64, 16}, {50, 70, 200}}
	for _, sz := range sizes {
		w, h, block := sz[0], sz[1], sz[2]
		g := raster.NewGray16(w, h)
		for i := range g.Pix {
			switch rng.IntN(4) {
			case 0:
				g.Pix[i] = 65535
			case 1:
				g.Pix[i] = 0
			default:
				g.Pix[i] = uint16(rng.IntN(65536))
			}
		}
		m := Of(g, block)
		hist, blocks := naive(g, block)
		var n uint64
		for v, c := range m.Hist {
			if c != hist[uint16(v)] {
				t.Fatalf("%dx%d: bin %d has %d, want %d", w, h, v, c, hist[uint16(v)])
			}
			n += c
		}
		if n != uint64(w*h) {
			t.Fatalf("%dx%d: %d pixels counted", w, h, n)
		}
		if nx, ny := Grid(w, h, block); m.NX != nx || m.NY != ny || len(m.Blocks) != nx*ny {
			t.Fatalf("%dx%d block %d: grid %dx%d (%d), want %dx%d", w, h, block, m.NX, m.NY, len(m.Blocks), nx, ny)
		}
		var all []float64
		bf := m.BlockFocus()
		for by := 0; by < m.NY; by++ {
			for bx := 0; bx < m.NX; bx++ {
				ls := blocks[[2]int{by, bx}]
				all = append(all, ls...)
				b := m.Blocks[by*m.NX+bx]
				if b.N != int64(len(ls)) {
					t.Fatalf("%dx%d block (%d,%d): %d px, want %d", w, h, by, bx, b.N, len(ls))
				}
				if want := refVariance(ls); math.Abs(bf[by*m.NX+bx]-want) > 1e-9*max(1, want) {
					t.Errorf("%dx%d block (%d,%d): focus %g, want %g", w, h, by, bx, bf[by*m.NX+bx], want)
				}
			}
		}
		if want := refVariance(all); math.Abs(m.Focus()-want) > 1e-9*max(1, want) {
			t.Errorf("%dx%d: focus %g, want %g", w, h, m.Focus(), want)
		}
	}
}

// TestFocusIndependentOfBlocks: the plane's focus is the same bits for any
// block size (exact integer sums), which is what lets the device's measure
// and the host's agree.
func TestFocusIndependentOfBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := raster.NewGray16(97, 61)
	for i := range g.Pix {
		g.Pix[i] = uint16(rng.IntN(65536))
	}
	want := Of(g, 1).Focus()
	for _, b := range []int{2, 5, 16, 61, 97, 1000} {
		if f := Of(g, b).Focus(); f != want {
			t.Errorf("block %d: focus %v, block 1: %v", b, f, want)
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	g := raster.NewGray16(10, 1)
	for i := range g.Pix {
		g.Pix[i] = uint16(10 * (i + 1)) // 10 .. 100
	}
	m := Of(g, 4)
	for _, c := range []struct {
		p    float64
		want int
	}{{0, 10}, {0.01, 10}, {0.1, 10}, {0.11, 20}, {0.5, 50}, {0.99, 100}, {1, 100}} {
		if got := m.Percentile(c.p); got != c.want {
			t.Errorf("p=%v: %d, want %d", c.p, got, c.want)
		}
	}
}

// TestFocusSumsPast64Bits: the blocks' sums of squares are added in 128
// bits (a plane of a few hundred Mpx of full-scale edges passes 2^64).
func TestFocusSumsPast64Bits(t *testing.T) {
	m := &Measure{Blocks: []Moments{{N: 1, S2: 1 << 63}, {N: 1, S2: 1 << 63}, {N: 2, S2: 1 << 62}}}
	// S2 = 2^64 + 2^62 over N = 4, S = 0: variance 2^62 + 2^60.
	if got, want := m.Focus(), 0x1p62+0x1p60; got != want {
		t.Errorf("focus %g, want %g", got, want)
	}
}
