//go:build cuda

package gpu

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// deflateImages: zero background, uniform noise (stored blocks), tissue-like
// noise on a background and a mixture, at sizes that leave edge tiles.
func deflateImages() map[string]*raster.Gray16 {
	r := rand.New(rand.NewPCG(11, 12))
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
		"mixed": mk(1500, 1100, func(x, y int) uint16 {
			switch {
			case y < 200:
				return 0
			case x < 300:
				return uint16(r.Uint32())
			case (x/90+y/70)%3 == 0:
				return uint16(2300 + 40*r.NormFloat64())
			}
			return uint16(max(0, 300+40*r.NormFloat64()))
		}),
	}
}

// TestHuffmanTilesMatchCPU: the device's Huffman-only tiles are
// ometiff.CPUCoder's, byte for byte (tile sides of one block per tile, two
// blocks of unequal length, 4 and 16 blocks; edge tiles), and an OME-TIFF
// written with the engine as its Coder is the file written with CPUCoder.
func TestHuffmanTilesMatchCPU(t *testing.T) {
	ctx := context.Background()
	for name, img := range deflateImages() {
		for _, ts := range []int{48, 144, 256, 512} {
			want, err := ometiff.CodeTiles(ctx, ometiff.CPUCoder{Workers: 4}, img, ts, 4)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ometiff.CodeTiles(ctx, testEngine, img, ts, 4)
			if err != nil {
				t.Fatalf("%s ts %d: %v", name, ts, err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s ts %d: %d tiles, want %d", name, ts, len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					n := 0
					for n < min(len(got[i]), len(want[i])) && got[i][n] == want[i][n] {
						n++
					}
					t.Fatalf("%s ts %d tile %d: %d bytes, want %d; first difference at byte %d", name, ts, i, len(got[i]), len(want[i]), n)
				}
			}
		}
	}
	img := deflateImages()["mixed"]
	ch := []ometiff.Channel{{Name: "a", Load: func() (*raster.Gray16, error) { return img, nil }}}
	var files [][]byte
	for _, c := range []ometiff.Coder{ometiff.CPUCoder{Workers: 2}, testEngine, testEngine.Registrar().(ometiff.Coder)} {
		path := filepath.Join(t.TempDir(), "c.ome.tif")
		if err := ometiff.Write(ctx, path, img.W, img.H, ch, ometiff.Options{PixelSizeNM: 500, Workers: 2, Coder: c}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	for k := 1; k < len(files); k++ {
		if !bytes.Equal(files[k], files[0]) {
			t.Errorf("OME-TIFF through coder %d differs from CPUCoder's (%d vs %d bytes)", k, len(files[k]), len(files[0]))
		}
	}
	fmt.Printf("huffman tiles: device = CPU for %d images x 4 tile sides; OME-TIFF of %d bytes identical\n", len(deflateImages()), len(files[0]))
}
