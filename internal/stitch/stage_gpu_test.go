//go:build cuda

package stitch

import (
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	cuda "github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// gpuStageTol: what the CUDA stage must hold against the CPU stage on the
// same synthetic project. The BaSiC fits agree within the GPU fit test's
// bounds (internal/gpu TestBaSiCMatchesCPU: 1e-3 flatfield, 1 count
// darkfield; float32 on the device vs float64, reductions in another order);
// the alignment then sees a reference plane corrected with profiles that
// differ by that much, so positions may move by a few hundredths of a pixel.
// The correction and blend are the CPU rule bit for bit
// (TestCorrectIsTheRule, TestCorrectAndBlendMatchCPU), so the mosaic must
// equal the rule applied with the run's own profile and positions within the
// one count of the profile files' float32 darkfield. Against the CPU run's
// mosaic, with tile positions rounded alike, a pixel may differ by the
// profile differences: 1 count of darkfield and 1e-3 of flatfield, plus one
// count of rounding: 2 counts + 0.2 % of the value.
var gpuStageTol = stageTol{Pos: 0.05, Flat: 1e-3, Dark: 1, Self: 1, Abs: 2, Rel: 2e-3}

// TestStageGPUMatchesCPU runs the whole stage (stitch.Run: discovery,
// BaSiC per channel x z-plane, alignment, correction, blending, the staged
// output) on the CUDA engine and on the CPU engine for the same small
// synthetic project (2 x 3 tiles of 160 x 200 px, 2 channels, 3 z-planes)
// and compares every output file within gpuStageTol.
func TestStageGPUMatchesCPU(t *testing.T) { stageGPUMatchesCPU(t, project(t)) }

// stageGPUMatchesCPU runs the stage on cfg's project on the CUDA engine
// and on the CPU engine and compares every output file within gpuStageTol.
func stageGPUMatchesCPU(t *testing.T, cfg *config.Config) {
	g, err := cuda.Open(cuda.Options{Device: 0}) // *gpu.Engine is a stitch Engine
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Errorf("close GPU engine: %v", err)
		}
	}()
	cpu, gpu := filepath.Join(t.TempDir(), "cpu"), filepath.Join(t.TempDir(), "gpu")
	runStage(t, cfg, NewCPUEngine(4), 4, 0, cpu)
	runStage(t, cfg, g, 4, DefaultGPUBatch, gpu)
	compareStage(t, cfg, cpu, gpu, gpuStageTol)
}

// TestStageGPUMatchesCPUEnvelope is TestStageGPUMatchesCPU with
// stitching.profile_mode envelope_darkfield: the mode runs on the engine's
// own Fit (darkfield estimation off, the channel's darkfield subtracted
// first), so the CUDA engine's profiles and mosaics follow the CPU's.
func TestStageGPUMatchesCPUEnvelope(t *testing.T) {
	cfg := project(t)
	cfg.Stitching.ProfileMode = "envelope_darkfield"
	stageGPUMatchesCPU(t, cfg)
}

// TestStageGPUMatchesCPUBlankPlane is TestStageGPUMatchesCPU with one plane
// whose tiles are all zero (CH2 Z1, in a batch with planes that are
// fitted): not fitted on either engine, the same identity profile and zero
// mosaic, the other planes within gpuStageTol.
func TestStageGPUMatchesCPUBlankPlane(t *testing.T) {
	cfg := project(t)
	synthtest.BlankPlane(t, cfg, 2, 1)
	stageGPUMatchesCPU(t, cfg)
}
