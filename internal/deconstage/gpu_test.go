//go:build cuda

package deconstage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestRunGPU runs the stage on the GPU (rounding on the device) and on the
// CPU over the same stitched cycle: the uint16 outputs must be identical
// (the convolutions are bit-identical; the stop decision uses float64 sums
// in another order, which on this data does not change the iterations).
func TestRunGPU(t *testing.T) {
	g, err := OpenGPU(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cfg, dir := project(t, nil)
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: g, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	gpuOut := OutDir(dir, 1) + ".gpu"
	if err := os.Rename(OutDir(dir, 1), gpuOut); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 2}, Workers: 2, CPU: true}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range cfg.Channels {
		for z := 1; z <= nz; z++ {
			name := filepath.Join(fmt.Sprintf("CH%d", ch), fmt.Sprintf("deconv_%03d.tif", z))
			a, err := tiffio.ReadGray16(filepath.Join(gpuOut, name))
			if err != nil {
				t.Fatal(err)
			}
			b, err := tiffio.ReadGray16(filepath.Join(OutDir(dir, 1), name))
			if err != nil {
				t.Fatal(err)
			}
			for i := range a.Pix {
				if a.Pix[i] != b.Pix[i] {
					t.Fatalf("%s pixel %d: GPU %d, CPU %d", name, i, a.Pix[i], b.Pix[i])
				}
			}
		}
	}
	s, _ := os.ReadFile(filepath.Join(gpuOut, ".snakemake_complete"))
	if !bytes.Contains(s, []byte("engine=gpu ")) {
		t.Errorf("sentinel engine:\n%s", s)
	}
}
