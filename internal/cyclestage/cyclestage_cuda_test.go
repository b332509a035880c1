//go:build cuda

package cyclestage

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
)

// TestFusedGPU: on the CUDA engine (one engine for the three stages, as
// kintsugi-cycle opens it) the fused cycle, with its planes handed through
// the decon and EDF device stacks, writes exactly the three-stage chain's
// files on the same engine.
func TestFusedGPU(t *testing.T) {
	e, err := gpu.Open(gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	conformFused(t, Engines{Stitch: e, Decon: e, EDF: e}, stitch.DefaultGPUBatch)
}
