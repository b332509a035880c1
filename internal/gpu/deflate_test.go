//go:build cuda

package gpu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff/ometifftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestHuffmanTilesMatchCPU: the device's Huffman-only tiles are
// ometiff.CPUCoder's, byte for byte, for ometifftest's images at tile
// sides of one block per tile, two blocks of unequal length, 4 and 16
// blocks (edge tiles included), and an OME-TIFF written with the engine
// (and its Registrar) as its Coder is the file written with CPUCoder.
func TestHuffmanTilesMatchCPU(t *testing.T) {
	ctx := context.Background()
	images := ometifftest.CoderImages()
	for name, img := range images {
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
	img := images["mixed"]
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
	fmt.Printf("huffman tiles: device = CPU for %d images x 4 tile sides; OME-TIFF of %d bytes identical\n", len(images), len(files[0]))
}
