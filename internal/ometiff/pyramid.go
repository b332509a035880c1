package ometiff

import (
	"context"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// MinLevelSide is the longer side (px) below which no further level is made:
// the pyramid ends with the first level whose longer side is < MinLevelSide.
const MinLevelSide = 1024

// LevelSizes returns the (width, height) of every pyramid level of a
// width x height image, full resolution first: each level is
// ceil(w/2) x ceil(h/2) of the previous, until the longer side is
// < MinLevelSide.
func LevelSizes(width, height int) [][2]int {
	if width <= 0 || height <= 0 {
		panic(fmt.Sprintf("ometiff: invalid size %dx%d", width, height))
	}
	sizes := [][2]int{{width, height}}
	for w, h := width, height; max(w, h) >= MinLevelSide; {
		w, h = (w+1)/2, (h+1)/2
		sizes = append(sizes, [2]int{w, h})
	}
	return sizes
}

// Downsample returns the 2x2 mean of src, of size ceil(W/2) x ceil(H/2):
// pixel (y, x) is the mean of src's pixels (2y..2y+1, 2x..2x+1) that lie
// inside src (4, 2 or 1 of them), rounded half up.
func Downsample(src *raster.Gray16) *raster.Gray16 {
	dst := raster.NewGray16((src.W+1)/2, (src.H+1)/2)
	downsampleRows(dst, src, 0, dst.H)
	return dst
}

// downsample is Downsample on workers goroutines (bands of rows), into dst
// when it has the right size (reused across channels), else a new plane.
func downsample(ctx context.Context, dst, src *raster.Gray16, workers int) (*raster.Gray16, error) {
	if w, h := (src.W+1)/2, (src.H+1)/2; dst == nil || dst.W != w || dst.H != h {
		dst = raster.NewGray16(w, h)
	}
	const band = 64
	n := (dst.H + band - 1) / band
	err := par.ForEach(ctx, n, workers, func(i int) error {
		downsampleRows(dst, src, i*band, min((i+1)*band, dst.H))
		return nil
	})
	return dst, err
}

// downsampleRows fills rows [y0, y1) of dst = Downsample(src).
func downsampleRows(dst, src *raster.Gray16, y0, y1 int) {
	sw, sh := src.W, src.H
	full := sw / 2 // output columns with two source columns
	for y := y0; y < y1; y++ {
		r0 := src.Pix[2*y*sw : (2*y+1)*sw]
		out := dst.Pix[y*dst.W : (y+1)*dst.W]
		if 2*y+1 < sh {
			r1 := src.Pix[(2*y+1)*sw : (2*y+2)*sw]
			for x := range full {
				s := uint32(r0[2*x]) + uint32(r0[2*x+1]) + uint32(r1[2*x]) + uint32(r1[2*x+1])
				out[x] = uint16((s + 2) / 4)
			}
			if sw%2 == 1 {
				s := uint32(r0[sw-1]) + uint32(r1[sw-1])
				out[full] = uint16((s + 1) / 2)
			}
			continue
		}
		// last, odd source row
		for x := range full {
			s := uint32(r0[2*x]) + uint32(r0[2*x+1])
			out[x] = uint16((s + 1) / 2)
		}
		if sw%2 == 1 {
			out[full] = r0[sw-1]
		}
	}
}
