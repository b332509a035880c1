//go:build cuda

package deconstage

import (
	"testing"

	cuda "github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
)

// TestPSFFileGPU: the GPU engine, given the kernel made from decon.psf_file,
// matches the CPU engine given the same PSF built in memory, for both
// Richardson-Lucy variants (within float32 convolution rounding).
func TestPSFFileGPU(t *testing.T) {
	g, err := cuda.Open(cuda.Options{Device: 0}) // *gpu.Engine is a deconstage PlaneEngine
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const ch = 2
	cfg, fileCfg, _, k0, st := psfFileProject(t, ch)
	matchesInMemory(t, g, cfg, fileCfg, ch, k0, st)
}
