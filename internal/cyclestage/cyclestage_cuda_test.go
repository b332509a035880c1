//go:build cuda

package cyclestage

import (
	"slices"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
)

// TestFusedGPU: on the CUDA engine the fused cycle, with its planes handed
// through the decon and EDF device stacks, writes exactly the files of the
// three-stage chain on one engine: with one engine for the three stages,
// and with decon and EDF on a lane of it (gpu.Engine.Lane, as
// kintsugi-cycle opens them: a channel deconvolved beside the stitching of
// the next).
func TestFusedGPU(t *testing.T) {
	e, err := gpu.Open(gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	one := Engines{Stitch: e, Decon: e, EDF: e}
	t.Run("one engine", func(t *testing.T) { conformFused(t, one, one, stitch.DefaultGPUBatch) })
	t.Run("lane", func(t *testing.T) {
		l, err := e.Lane()
		if err != nil {
			t.Fatal(err)
		}
		conformFused(t, one, Engines{Stitch: e, Decon: l, EDF: l}, stitch.DefaultGPUBatch)
		ops, err := e.Busy()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ops, func(o gpu.OpTime) bool { return o.Op == "lane decon" }) {
			t.Errorf("no deconvolution ran on the lane: %+v", ops)
		}
	})
}
