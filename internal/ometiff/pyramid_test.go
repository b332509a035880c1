package ometiff

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// naiveDownsample is the definition of the 2x2 mean written out: the mean
// of the source pixels of each 2x2 block that exist, rounded half up, in
// float64.
func naiveDownsample(src *raster.Gray16) *raster.Gray16 {
	dst := raster.NewGray16((src.W+1)/2, (src.H+1)/2)
	for y := range dst.H {
		for x := range dst.W {
			sum, n := 0.0, 0.0
			for dy := range 2 {
				for dx := range 2 {
					if sy, sx := 2*y+dy, 2*x+dx; sy < src.H && sx < src.W {
						sum += float64(src.At(sy, sx))
						n++
					}
				}
			}
			dst.Pix[y*dst.W+x] = uint16(math.Floor(sum/n + 0.5))
		}
	}
	return dst
}

func randPlane(rng *rand.Rand, w, h int) *raster.Gray16 {
	g := raster.NewGray16(w, h)
	for i := range g.Pix {
		switch rng.IntN(10) {
		case 0:
			g.Pix[i] = 65535 // sums of four must not overflow
		case 1:
			g.Pix[i] = 0
		default:
			g.Pix[i] = uint16(rng.Uint32())
		}
	}
	return g
}

func TestDownsampleIsTheMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sz := range [][2]int{{1, 1}, {1, 2}, {2, 1}, {3, 3}, {8, 6}, {7, 5}, {130, 131}, {129, 300}} {
		src := randPlane(rng, sz[0], sz[1])
		want := naiveDownsample(src)
		for _, workers := range []int{1, 3} {
			got, err := downsample(context.Background(), nil, src, workers)
			if err != nil {
				t.Fatal(err)
			}
			if got.W != want.W || got.H != want.H {
				t.Fatalf("%dx%d: got %dx%d, want %dx%d", sz[0], sz[1], got.W, got.H, want.W, want.H)
			}
			if i := firstDiff(got.Pix, want.Pix); i >= 0 {
				t.Fatalf("%dx%d, %d workers: pixel (y=%d, x=%d) = %d, want %d", sz[0], sz[1], workers,
					i/want.W, i%want.W, got.Pix[i], want.Pix[i])
			}
		}
		if got := Downsample(src); !slices.Equal(got.Pix, want.Pix) {
			t.Fatalf("%dx%d: Downsample differs from the mean", sz[0], sz[1])
		}
	}
}

func TestLevelSizes(t *testing.T) {
	for _, c := range []struct {
		w, h int
		want [][2]int
	}{
		{1499, 2101, [][2]int{{1499, 2101}, {750, 1051}, {375, 526}}},
		{1023, 1023, [][2]int{{1023, 1023}}},
		{1024, 10, [][2]int{{1024, 10}, {512, 5}}},
		{7493, 12676, [][2]int{{7493, 12676}, {3747, 6338}, {1874, 3169}, {937, 1585}, {469, 793}}},
	} {
		if got := LevelSizes(c.w, c.h); !slices.Equal(got, c.want) {
			t.Errorf("LevelSizes(%d, %d) = %v, want %v", c.w, c.h, got, c.want)
		}
	}
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []uint16) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
