//go:build cuda

package deconstage

import "testing"

// TestPSFFileGPU: the GPU engine, given the kernel made from decon.psf_file,
// matches the CPU engine given the same PSF built in memory, for both
// Richardson-Lucy variants (within float32 convolution rounding).
func TestPSFFileGPU(t *testing.T) {
	g := openGPU(t)
	const ch = 2
	cfg, fileCfg, _, k0, st := psfFileProject(t, ch)
	matchesInMemory(t, g, cfg, fileCfg, ch, k0, st)
}
